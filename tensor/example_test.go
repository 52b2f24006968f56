package tensor_test

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// Tensors are created on the CPU from Go slices, from float64 values in
// any dtype, or filled with a constant.
func Example_creation() {
	a := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	fmt.Println(a)

	b := tensor.FromFloat64s(tensor.BF16, []float64{0.5, 1.5})
	fmt.Println(b.DType(), b.Shape(), b.Nbytes(), "bytes")

	fmt.Println(tensor.Full(tensor.I64, 7, 2, 2).I64())
	fmt.Println(tensor.Arange(tensor.F64, 0, 1, 0.25).F64())

	s := tensor.Scalar(tensor.F32, 3)
	fmt.Println(s.Rank(), s.Item())
	// Output:
	// Tensor(f32 [2 3] cpu [1 2 3 4 5 6])
	// bf16 [2] 4 bytes
	// [7 7 7 7]
	// [0 0.25 0.5 0.75]
	// 0 3
}

// Randomness always takes an explicit, seeded source, so a seed fixes
// the values.
func Example_random() {
	a := tensor.Normal(tensor.NewRNG(1), tensor.F32, 0, 1, 3)
	b := tensor.Normal(tensor.NewRNG(1), tensor.F32, 0, 1, 3)
	fmt.Println(fmt.Sprint(a.F32()) == fmt.Sprint(b.F32()))

	idx := tensor.RandInt(tensor.NewRNG(2), 10, 4)
	fmt.Println(idx.DType(), idx.Shape())
	// Output:
	// true
	// i64 [4]
}

// Views share storage with their source: writing through a view shows
// in the source. Reshape of a non-contiguous tensor copies.
func Example_views() {
	x := tensor.FromFloat64s(tensor.F32, []float64{0, 1, 2, 3, 4, 5}, 2, 3)

	t := x.T() // a strided view: no data moves
	fmt.Println(t.Shape(), t.Strides(), t.IsContiguous())
	fmt.Println(t.Float64s())

	col := x.Select(1, 2) // column 2
	col.Set(-1, 0)
	fmt.Println(x.Float64s())

	fmt.Println(x.Narrow(1, 1, 2).Float64s())
	fmt.Println(x.Unsqueeze(0).Shape(), x.Reshape(-1).Shape())

	row := tensor.FromSlice([]float32{1, 2, 3}).Unsqueeze(0)
	b := row.Expand(2, 3) // broadcast: stride 0 along the new rows
	fmt.Println(b.Strides(), b.Float64s())

	packed := t.Contiguous() // a copy with its own storage
	fmt.Println(packed.Strides(), packed.Storage() == x.Storage())
	// Output:
	// [3 2] [1 3] false
	// [0 3 1 4 2 5]
	// [0 1 -1 3 4 5]
	// [1 -1 4 5]
	// [1 2 3] [6]
	// [0 1] [1 2 3 1 2 3]
	// [2 1] false
}

// Cast converts between dtypes. bfloat16 rounds to nearest, ties to even;
// float to integer truncates toward zero.
func Example_cast() {
	x := tensor.FromSlice([]float32{1, 1.00390625, 1.01171875, -2.75})
	b := x.Cast(tensor.BF16)
	fmt.Printf("%#04x\n", b.U16())
	fmt.Println(b.Cast(tensor.F32).F32())
	fmt.Println(x.Cast(tensor.I32).I32())
	fmt.Println(x.Cast(tensor.Bool).Bools())
	fmt.Printf("%#04x\n", tensor.F32ToF16(65504))
	// Output:
	// [0x3f80 0x3f80 0x3f82 0xc030]
	// [1 1 1.015625 -2.75]
	// [1 1 1 -2]
	// [true true true true]
	// 0x7bff
}

func ExampleBroadcastShapes() {
	s, err := tensor.BroadcastShapes([]int{4, 1, 3}, []int{5, 1})
	fmt.Println(s, err)
	_, err = tensor.BroadcastShapes([]int{2, 3}, []int{4})
	fmt.Println(err)
	// Output:
	// [4 5 3] <nil>
	// shapes [2 3] and [4] do not broadcast
}

// Whether two storages are one memory: a tensor and its views share
// their storage; a copy does not.
func ExampleStorage_SameMemory() {
	t := tensor.FromSlice([]float32{1, 2, 3, 4}, 4)
	view := t.Narrow(0, 2, 2)
	fmt.Println(t.Storage().SameMemory(view.Storage()), t.Storage().SameMemory(t.Clone().Storage()))
	// Output:
	// true false
}

// Host syncs are counted per device, with the time the host spent in
// them: here one read of a tensor on the simulated device sim:5.
func ExampleHostSyncTime() {
	dev := tensor.Sim(5)
	x, err := tensor.Ones(tensor.F32, 1024).ToDevice(dev)
	if err != nil {
		panic(err)
	}
	n0, t0 := tensor.HostSyncs(dev), tensor.HostSyncTime(dev)
	if _, err := x.ToDevice(tensor.CPU); err != nil { // a read: the host waits for the device
		panic(err)
	}
	fmt.Println(tensor.HostSyncs(dev)-n0, "sync;", "time spent in it:", tensor.HostSyncTime(dev) > t0)
	// Output:
	// 1 sync; time spent in it: true
}

// A mapped tensor lives in host memory the device addresses directly: the
// host writes it without a transfer once the device's queued work is
// done, and reads it after one counted wait. The CPU has none to give;
// sim's stands in for a GPU's.
func ExampleEmptyMapped() {
	dev := tensor.Sim(0)
	in, err := tensor.EmptyMapped(dev, tensor.MappedInput, tensor.F32, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := tensor.CopyFromHost(in, tensor.FromSlice([]float32{1, 2, 3}, 3)); err != nil {
		fmt.Println(err)
		return
	}
	// ... device work reads in (and writes a mapped output) ...
	s := tensor.HostSyncs(dev)
	dst := make([]byte, in.Nbytes())
	if err := tensor.CopyToHostBytes(dst, in); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(in.Device(), in.IsMapped(), len(dst), "bytes,", tensor.HostSyncs(dev)-s, "host sync")

	_, err = tensor.EmptyMapped(tensor.CPU, tensor.MappedOutput, tensor.F32, 3)
	fmt.Println(errors.Is(err, tensor.ErrNoMappedMemory))
	// Output:
	// sim:0 true 12 bytes, 1 host sync
	// true
}
