//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// TestCopiesAndTimer: a pageable host copy, a device copy and a batch
// staged with StageFunc arrive intact; misuse is an error; the Timer
// times a device copy as a positive, finite duration.
func TestCopiesAndTimer(t *testing.T) {
	const n = 128 * 28 * 28
	h := tensor.Normal(tensor.NewRNG(310), tensor.F32, 0, 1, n)
	a := poisoned(t, tensor.F32, n)
	if err := dev.CopyHostToDevice(a, h.Storage().Bytes()); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "host to device", fromDev(t, a), h, 0)
	b := poisoned(t, tensor.F32, n)
	tm, err := dev.NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	d, err := tm.Time(func() error { return dev.CopyDeviceToDevice(b, a) })
	if err != nil {
		t.Fatal(err)
	}
	if !(d > 0) || math.IsInf(d.Seconds(), 0) {
		t.Fatalf("timed a device copy as %v", d)
	}
	closeRel(t, "device to device", fromDev(t, b), h, 0)
	if err := dev.CopyDeviceToDevice(a.Narrow(0, 1, 100), a.Narrow(0, 0, 100)); err == nil {
		t.Fatal("an overlapping device copy was accepted")
	}
	if err := dev.CopyHostToDevice(a, make([]byte, 8)); err == nil {
		t.Fatal("a host copy of the wrong size was accepted")
	}
	s, err := dev.NewStager(2, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := poisoned(t, tensor.F32, n)
	if err := s.StageFunc(c, func(pinned []byte) { copy(pinned, h.Storage().Bytes()) }); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "staged in place", fromDev(t, c), h, 0)
	if err := s.StageFunc(c, nil); err == nil {
		t.Fatal("a nil fill function was accepted")
	}
}

// TestStagerReleaseAndTrace: a batch staged into a buffer after Release
// never overwrites it under the kernel that read the previous batch; a
// trace times the copies and the marked steps on one clock, counts what
// exceeds its capacity; a StageAhead copy is seen after its Await; and
// misuse is an error.
func TestStagerReleaseAndTrace(t *testing.T) {
	const n = 1 << 20
	s, err := dev.NewStager(2, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ones, threes := tensor.Full(tensor.F32, 1, n), tensor.Full(tensor.F32, 3, n)
	a := poisoned(t, tensor.F32, n)
	// A slow step first, so that an unordered copy would land under it.
	big := toDev(t, tensor.Normal(tensor.NewRNG(311), tensor.F32, 0, 1, 2048, 2048))
	prod := poisoned(t, tensor.F32, 2048, 2048)
	if err := s.StartTrace(8, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.StartTrace(8, 4); err == nil {
		t.Fatal("a second StartTrace was accepted")
	}
	if err := s.Stage(a, ones.Storage().Bytes()); err != nil {
		t.Fatal(err)
	}
	b := poisoned(t, tensor.F32, n)
	if err := s.BeginStep(); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginStep(); err == nil {
		t.Fatal("BeginStep inside a step was accepted")
	}
	for i := 0; i < 4; i++ {
		if err := dev.MatMul(prod, big, big, false, false, Highest); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.BinaryScalar(kernels.Mul, b, a, 2, false); err != nil { // reads batch 1
		t.Fatal(err)
	}
	if err := s.EndStep(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(a, threes.Storage().Bytes()); err != nil { // waits for the step
		t.Fatal(err)
	}
	c := poisoned(t, tensor.F32, n)
	if err := s.BeginStep(); err != nil {
		t.Fatal(err)
	}
	if err := dev.BinaryScalar(kernels.Mul, c, a, 2, false); err != nil { // reads batch 2
		t.Fatal(err)
	}
	if err := s.EndStep(); err != nil {
		t.Fatal(err)
	}
	o, err := s.StopTrace()
	if err != nil {
		t.Fatal(err)
	}
	closeRel(t, "step over the released batch", fromDev(t, b), tensor.Full(tensor.F32, 2, n), 0)
	closeRel(t, "step over the next batch", fromDev(t, c), tensor.Full(tensor.F32, 6, n), 0)
	if o.Copies != 2 || o.Steps != 2 || o.Dropped != 0 {
		t.Fatalf("trace counted %+v, want 2 copies and 2 steps", o)
	}
	if !(o.CopyTime > 0 && o.StepTime > 0 && o.Span >= o.StepTime && o.HiddenTime <= o.CopyTime) || !(o.Fraction >= 0 && o.Fraction <= 1) {
		t.Fatalf("implausible trace %+v", o)
	}
	t.Logf("trace: %+v", o)

	if _, err := s.StopTrace(); err == nil {
		t.Fatal("StopTrace without a trace was accepted")
	}
	if err := s.EndStep(); err != nil {
		t.Fatalf("EndStep without a trace must do nothing: %v", err)
	}
	if err := s.StartTrace(1, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := s.Stage(a, ones.Storage().Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndStep(); err == nil {
		t.Fatal("EndStep without BeginStep was accepted")
	}
	if o, err = s.StopTrace(); err != nil || o.Copies != 1 || o.Dropped != 2 {
		t.Fatalf("over capacity: %+v, %v (want 1 copy timed, 2 dropped)", o, err)
	}
	// StageAhead enqueues the copy; Await orders the device's stream
	// after it, once.
	if err := s.Release(a); err != nil {
		t.Fatal(err)
	}
	if err := s.StageAhead(a, func(p []byte) { copy(p, threes.Storage().Bytes()) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Await(a); err != nil {
		t.Fatal(err)
	}
	d := poisoned(t, tensor.F32, n)
	if err := dev.BinaryScalar(kernels.Mul, d, a, 2, false); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "step after Await", fromDev(t, d), tensor.Full(tensor.F32, 6, n), 0)
	if err := s.Await(a); err == nil {
		t.Fatal("a second Await of one StageAhead was accepted")
	}
	if err := s.Await(b); err == nil {
		t.Fatal("Await of a buffer nothing was staged into was accepted")
	}
	if err := s.Release(nil); err == nil {
		t.Fatal("Release(nil) was accepted")
	}
	if err := s.StartTrace(0, 1); err == nil {
		t.Fatal("a trace of no copies was accepted")
	}
}

// TestToHostMany: tensor.ToHostMany over device tensors of three dtypes
// — small ones through the pinned bounces, medium ones through the
// medium pinned buffers, a large one straight into Go memory, a view at
// an offset, more tensors than either pool holds — brings every one back
// bitwise after a kernel that wrote them, with one host sync counted.
func TestToHostMany(t *testing.T) {
	var hosts, ons []*tensor.Tensor
	add := func(h *tensor.Tensor) {
		hosts, ons = append(hosts, h), append(ons, toDev(t, h))
	}
	add(tensor.Normal(tensor.NewRNG(311), tensor.F32, 0, 1, 7))
	add(tensor.Normal(tensor.NewRNG(312), tensor.F64, 0, 1, 3))
	add(tensor.FromSlice([]int64{5, -6, 7}, 3))
	add(tensor.Normal(tensor.NewRNG(313), tensor.F32, 0, 1, 64, 2048)) // 512 KiB: no bounce
	for i := 0; i < bouncePoolSize+2; i++ {
		add(tensor.Normal(tensor.NewRNG(uint64(320+i)), tensor.F32, 0, 1, 5))
	}
	for i := 0; i < mediumPoolSize+2; i++ { // 768 B to 256 KiB: five medium (a buffer each while one is free), one small
		rows := []int{60, 1024, 3, 64, 500, 17}[i%6]
		add(tensor.Normal(tensor.NewRNG(uint64(340+i)), tensor.F32, 0, 1, 64, rows))
	}
	// A kernel writes the first tensor after its upload: the read must
	// follow it on the stream.
	want0 := tensor.Empty(tensor.F32, 7)
	cpuBE.BinaryScalar(kernels.Mul, want0, hosts[0], 3, false)
	be.BinaryScalar(kernels.Mul, ons[0], ons[0], 3, false)
	hosts[0] = want0
	big := ons[3]
	hosts = append(hosts, hosts[3].Narrow(0, 10, 2).Contiguous())
	ons = append(ons, big.Narrow(0, 10, 2))
	s0 := tensor.HostSyncs(tensor.CUDA(0))
	got, err := tensor.ToHostMany(ons)
	if err != nil {
		t.Fatal(err)
	}
	if n := tensor.HostSyncs(tensor.CUDA(0)) - s0; n != 1 {
		t.Fatalf("%d host syncs, want 1", n)
	}
	mediumBounces.mu.Lock()
	made := mediumBounces.made
	mediumBounces.mu.Unlock()
	if made == 0 {
		t.Fatal("no medium pinned buffer was used")
	}
	for i := range ons {
		if got[i].DType() != hosts[i].DType() || fmt.Sprint(got[i].Shape()) != fmt.Sprint(hosts[i].Shape()) {
			t.Fatalf("tensor %d: %v %v, want %v %v", i, got[i].DType(), got[i].Shape(), hosts[i].DType(), hosts[i].Shape())
		}
		g, w := got[i].Float64s(), hosts[i].Float64s()
		for k := range w {
			if g[k] != w[k] {
				t.Fatalf("tensor %d element %d: %v, want %v", i, k, g[k], w[k])
			}
		}
	}
}

// TestUploadsWithoutWaitKeepTheirBytes: with the uploads' wait off
// (ESPER_CUDA_UPLOAD_WAIT=off's setting) a host tensor overwritten right
// after each upload, while the stream is still busy with a long product
// queued before them, still lands on the device as it was at each
// upload — the driver staged the pageable bytes before returning — for a
// small copy (through a C buffer) and a large one; no host sync is
// counted for them. With the wait on, each upload is one counted sync.
func TestUploadsWithoutWaitKeepTheirBytes(t *testing.T) {
	defer uploadWaitOff.Store(uploadWaitOff.Load())
	const m = 2048
	a := toDev(t, tensor.Normal(tensor.NewRNG(330), tensor.F32, 0, 1, m, m))
	c := toDev(t, tensor.Empty(tensor.F32, m, m))
	for _, off := range []bool{true, false} {
		uploadWaitOff.Store(off)
		for _, n := range []int{64, 300_000} {
			host := tensor.Empty(tensor.F32, n)
			data := host.F32()
			for r := 0; r < 4; r++ { // the stream busy for a while
				be.MatMul(c, a, a, false, false)
			}
			s0 := tensor.HostSyncs(tensor.CUDA(0))
			var ons []*tensor.Tensor
			for i := 0; i < 8; i++ {
				for k := range data {
					data[k] = float32(i*1000 + k%997)
				}
				d, err := host.ToDevice(tensor.CUDA(0))
				if err != nil {
					t.Fatal(err)
				}
				ons = append(ons, d)
			}
			want := uint64(0)
			if !off {
				want = 8
			}
			if got := tensor.HostSyncs(tensor.CUDA(0)) - s0; got != want {
				t.Errorf("wait off %v, %d floats: %d host syncs for 8 uploads, want %d", off, n, got, want)
			}
			for i, d := range ons {
				got := fromDev(t, d).F32()
				for k := range got {
					if got[k] != float32(i*1000+k%997) {
						t.Fatalf("wait off %v, %d floats: upload %d element %d is %v, want %v (the host's later bytes?)", off, n, i, k, got[k], float32(i*1000+k%997))
					}
				}
			}
		}
	}
}

// TestMappedMemoryOnCUDA: mapped tensors (tensor.EmptyMapped) on a GPU.
// A kernel reads a mapped input the host wrote and writes a mapped
// output the host reads (one host sync), bit for bit the CPU backend's
// result; a host write into an input the queued work still reads waits
// for that work (the kernel saw the old values); each use's switch off,
// EmptyMapped declines it with tensor.ErrNoMappedMemory; a freed block
// is pooled and handed out again zeroed, and past the pool's bound
// returned to the driver by the next allocation.
func TestMappedMemoryOnCUDA(t *testing.T) {
	d := tensor.CUDA(0)
	const n = 1 << 16
	in, err := tensor.EmptyMapped(d, tensor.MappedInput, tensor.F32, n)
	require.NoError(t, err)
	out, err := tensor.EmptyMapped(d, tensor.MappedOutput, tensor.F32, n)
	require.NoError(t, err)
	require.True(t, in.IsMapped())
	require.True(t, out.IsMapped())
	x := tensor.Normal(tensor.NewRNG(401), tensor.F32, 0, 1, n)
	require.NoError(t, tensor.CopyFromHost(in, x))
	want := tensor.Empty(tensor.F32, n)
	cpuBE.BinaryScalar(kernels.Mul, want, x, 3, false)
	// A long queue before the kernel, then a write into its input at
	// once: the write must wait for the kernel to have read x.
	busy := toDev(t, tensor.Normal(tensor.NewRNG(402), tensor.F32, 0, 1, 1<<22))
	for range 20 {
		be.BinaryScalar(kernels.Mul, busy, busy, 1, false)
	}
	be.BinaryScalar(kernels.Mul, out, in, 3, false)
	require.NoError(t, tensor.CopyFromHost(in, tensor.Full(tensor.F32, 7, n)))
	s0 := tensor.HostSyncs(d)
	got, err := out.ToDevice(tensor.CPU)
	require.NoError(t, err)
	require.Equal(t, uint64(1), tensor.HostSyncs(d)-s0, "a mapped read is one host sync")
	require.Equal(t, tensor.Data[float32](want), tensor.Data[float32](got), "3·x read from mapped memory")
	// The second write is what the next kernel reads.
	be.BinaryScalar(kernels.Mul, out, in, 2, false)
	many, err := tensor.ToHostMany([]*tensor.Tensor{out, toDev(t, tensor.FromSlice([]float32{5}, 1))})
	require.NoError(t, err)
	for i, v := range tensor.Data[float32](many[0]) {
		if v != 14 {
			t.Fatalf("element %d: %v, want 14", i, v)
		}
	}
	require.Equal(t, []float32{5}, tensor.Data[float32](many[1]))

	for _, sw := range []struct {
		use tensor.MappedUse
		on  *atomic.Bool
	}{{tensor.MappedInput, &mappedInputsOn}, {tensor.MappedOutput, &mappedOutputsOn}} {
		sw.on.Store(false)
		_, err := tensor.EmptyMapped(d, sw.use, tensor.F32, 4)
		sw.on.Store(true)
		require.ErrorIs(t, err, tensor.ErrNoMappedMemory, "%v switched off", sw.use)
	}

	// Freed, a block waits in the pool for the next request of its size
	// and kind, which gets it back zeroed; past the pool's bound, it is
	// returned to the driver by the next allocation.
	outPtr := out.Storage().DevicePtr()
	in.Storage().Free()
	out.Storage().Free()
	again, err := tensor.EmptyMapped(d, tensor.MappedOutput, tensor.F32, n)
	require.NoError(t, err)
	require.Equal(t, outPtr, again.Storage().DevicePtr(), "the pooled output block, reused")
	zeros, err := again.ToDevice(tensor.CPU)
	require.NoError(t, err)
	for i, v := range tensor.Data[float32](zeros) {
		if v != 0 {
			t.Fatalf("reused block, element %d: %v, want 0", i, v)
		}
	}
	bound := mappedPoolBytes
	mappedPoolBytes = 0
	defer func() { mappedPoolBytes = bound }()
	again.Storage().Free()
	mapped.mu.Lock()
	dropped := len(mapped.drop)
	mapped.mu.Unlock()
	require.Positive(t, dropped, "a block past the pool's bound waits to be freed")
	small, err := tensor.EmptyMapped(d, tensor.MappedInput, tensor.F32, 4)
	require.NoError(t, err)
	mapped.mu.Lock()
	dropped = len(mapped.drop)
	mapped.mu.Unlock()
	require.Zero(t, dropped, "the next allocation frees the blocks past the bound")
	mappedPoolBytes = bound
	small.Storage().Free()
}
