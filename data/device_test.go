package data_test

import (
	"slices"
	"testing"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

// accelerator is the device the device-path tests deliver batches on:
// the test device when it is not the CPU (ESPER_TEST_DEVICE), else sim:0
// — these tests are about a device, so they use one either way.
func accelerator(t testing.TB) tensor.Device {
	t.Helper()
	if d := testdevice.Device(t); !d.IsCPU() {
		return d
	}
	d := tensor.Sim(0)
	if _, err := device.OpenDevice(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// hostCopy reads a device tensor back (an explicit, counted copy).
func hostCopy(t testing.TB, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	h, err := x.ToDevice(tensor.CPU)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// gatherOnly hides a dataset's type, so that a Resident loader gathers it
// through Batch instead of taking a TensorDataset's tensors.
type gatherOnly struct{ data.Dataset }

// syntheticSet is a small synthetic split: real normalised pixels, so
// that a bitwise comparison compares something.
func syntheticSet(t testing.TB, n int) *data.TensorDataset {
	t.Helper()
	tr, _, err := data.Synthetic(data.SyntheticOptions{Train: n, Test: 1, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// sameBatches runs epochs of a CPU loader and a device loader with the
// same options and requires every batch of the device's (read back with
// explicit copies) to equal the CPU's bit for bit, with the same
// indices, and no host sync inside the device loader's Next. It returns
// the number of batches compared.
func sameBatches(t *testing.T, ds data.Dataset, o data.LoaderOptions, dev tensor.Device, epochs []int) int {
	t.Helper()
	cpu := newLoader(t, ds, o)
	od := o
	od.Device = dev
	onDev := newLoader(t, ds, od)
	if onDev.Device() != dev || cpu.Device() != tensor.CPU {
		t.Fatalf("Device() = %v and %v", onDev.Device(), cpu.Device())
	}
	n := 0
	for _, e := range epochs {
		cpu.Reset(e)
		onDev.Reset(e)
		for {
			want, okW := cpu.Next()
			s0 := tensor.HostSyncs(dev)
			got, okG := onDev.Next()
			if syncs := tensor.HostSyncs(dev) - s0; syncs != 0 {
				t.Fatalf("epoch %d batch %d: Next cost %d host syncs", e, n, syncs)
			}
			if okW != okG {
				t.Fatalf("epoch %d: the cpu loader has a batch: %v, the %v loader: %v", e, okW, dev, okG)
			}
			if !okW {
				break
			}
			if got.X.Device() != dev || got.Y.Device() != dev {
				t.Fatalf("batch on %v and %v, want %v", got.X.Device(), got.Y.Device(), dev)
			}
			if got.Epoch != want.Epoch || got.Index != want.Index || !slices.Equal(got.Indices, want.Indices) {
				t.Fatalf("epoch %d: batch (%d, %d) indices %v, want (%d, %d) %v", e, got.Epoch, got.Index, got.Indices, want.Epoch, want.Index, want.Indices)
			}
			if !slices.Equal(got.X.Shape(), want.X.Shape()) || !slices.Equal(got.Y.Shape(), want.Y.Shape()) {
				t.Fatalf("epoch %d batch %d: shapes %v %v, want %v %v", e, got.Index, got.X.Shape(), got.Y.Shape(), want.X.Shape(), want.Y.Shape())
			}
			gx, gy := hostCopy(t, got.X), hostCopy(t, got.Y)
			if !slices.Equal(gx.F32(), want.X.F32()) || !slices.Equal(gy.I64(), want.Y.I64()) {
				t.Fatalf("epoch %d batch %d: the %v batch differs from the cpu's", e, got.Index, dev)
			}
			n++
		}
	}
	if onDev.Stats().Batches != n {
		t.Fatalf("Stats().Batches %d, want %d", onDev.Stats().Batches, n)
	}
	return n
}

// TestDeviceLoaderEqualsCPU: on a device the loader delivers, copied
// ahead or resident, the CPU loader's batches bit for bit — shuffled or
// not, the last partial batch kept or dropped, over several epochs (and
// an epoch revisited) — with no host sync, and counts its copies: two
// per batch copied ahead; two for the dataset and one per shuffled
// epoch's order when resident (none without Shuffle: the batches are
// views).
func TestDeviceLoaderEqualsCPU(t *testing.T) {
	dev := accelerator(t)
	ds := syntheticSet(t, 37)
	epochs := []int{0, 1, 1, 4, 0} // epoch 1 twice in a row, as a trainer's validation passes are
	cases := []struct {
		name string
		o    data.LoaderOptions
	}{
		{"shuffled drop last", data.LoaderOptions{BatchSize: 8, Shuffle: true, Seed: 11, DropLast: true}},
		{"shuffled keep last", data.LoaderOptions{BatchSize: 8, Shuffle: true, Seed: 12, Workers: 2}},
		{"in order keep last", data.LoaderOptions{BatchSize: 10}},
		{"one batch bigger than the set", data.LoaderOptions{BatchSize: 64, Shuffle: true, Seed: 1}},
		{"pinned asked", data.LoaderOptions{BatchSize: 8, Shuffle: true, Seed: 3, DropLast: true, Pinned: true}},
	}
	for _, c := range cases {
		for _, resident := range []bool{false, true} {
			for _, wrap := range []bool{false, true} {
				if wrap && !resident {
					continue // a wrapped set only changes how Resident reads it
				}
				var src data.Dataset = ds
				if wrap {
					src = gatherOnly{ds}
				}
				o := c.o
				o.Resident = resident
				name := c.name + "/copied"
				if resident {
					name = c.name + "/resident"
					if wrap {
						name += "-gathered"
					}
				}
				t.Run(name, func(t *testing.T) {
					n := sameBatches(t, src, o, dev, epochs)
					od := o
					od.Device = dev
					l := newLoader(t, src, od)
					for _, e := range epochs {
						for range l.Epoch(e) {
						}
					}
					st := l.Stats()
					want := 2 * n
					if resident {
						want = 2 + 4 // the dataset, then epochs 0, 1, 4, 0 (1 again is on the device)
						if !o.Shuffle {
							want = 2
						}
					}
					if st.Copies != want {
						t.Errorf("resident %v: %d copies, want %d", resident, st.Copies, want)
					}
					if st.CopyTime <= 0 || l.CopyTime() != st.CopyTime {
						t.Errorf("CopyTime %v (Stats %v)", l.CopyTime(), st.CopyTime)
					}
					if (st.ResidentCopyTime > 0) != resident {
						t.Errorf("resident %v: ResidentCopyTime %v", resident, st.ResidentCopyTime)
					}
					if dev.Kind == tensor.KindSim && l.Pinned() {
						t.Error("Pinned() on sim, which has no staging")
					}
				})
			}
		}
	}
}

// TestDeviceLoaderBreakAndRelease: breaking out of an epoch on a device
// (a batch copied ahead and never taken) leaves the loader usable — the
// next epoch is the CPU's — and Release of a device batch does nothing
// harmful.
func TestDeviceLoaderBreakAndRelease(t *testing.T) {
	dev := accelerator(t)
	ds := syntheticSet(t, 30)
	for _, resident := range []bool{false, true} {
		o := data.LoaderOptions{BatchSize: 7, Shuffle: true, Seed: 5, Resident: resident}
		cpu := newLoader(t, ds, o)
		o.Device = dev
		l := newLoader(t, ds, o)
		for b := range l.Epoch(0) {
			b.Release()
			b.Release()
			if b.Index == 1 {
				break
			}
		}
		cpu.Reset(2)
		want, _ := cpu.Next()
		l.Reset(2)
		got, ok := l.Next()
		if !ok || !slices.Equal(got.Indices, want.Indices) || !slices.Equal(hostCopy(t, got.X).F32(), want.X.F32()) {
			t.Fatalf("resident %v: epoch 2 after a break: batch %v, want %v", resident, got.Indices, want.Indices)
		}
		l.Close()
		if _, ok := l.Next(); ok {
			t.Fatalf("resident %v: Next after Close", resident)
		}
	}
}

// TestDeviceLoaderCPUUnchanged: on the CPU, Resident and Pinned change
// nothing — host batches, no copies.
func TestDeviceLoaderCPUUnchanged(t *testing.T) {
	ds := countingSet(t, 12)
	l := newLoader(t, ds, data.LoaderOptions{BatchSize: 5, Resident: true, Pinned: true})
	order, sizes := epochOrder(t, l, 0)
	if !slices.Equal(sizes, []int{5, 5, 2}) || len(order) != 12 {
		t.Fatalf("sizes %v order %v", sizes, order)
	}
	if st := l.Stats(); st.Copies != 0 || st.CopyTime != 0 || l.Pinned() {
		t.Fatalf("stats %+v, pinned %v", st, l.Pinned())
	}
}

// TestDeviceLoaderErrors: a device without a backend, and a Resident
// dataset whose Batch panics, are errors of NewLoader.
func TestDeviceLoaderErrors(t *testing.T) {
	ds := countingSet(t, 10)
	if _, err := data.NewLoader(ds, data.LoaderOptions{Device: tensor.Device{Kind: 200}}); err == nil {
		t.Error("a device without a backend accepted")
	}
	dev := accelerator(t)
	_, err := data.NewLoader(panicSet{ds}, data.LoaderOptions{Device: dev, Resident: true})
	if err == nil {
		t.Fatalf("a resident dataset whose Batch panics: %v", err)
	}
	t.Log(err)
}

// TestResidentInOrderIsFixed: a Resident loader without Shuffle hands out
// views of the dataset on the device — the very same tensors every
// epoch, no launch to assemble them — and reports Fixed
// (tolaria.FixedBatches); shuffled, or copied batch by batch, it does
// not.
func TestResidentInOrderIsFixed(t *testing.T) {
	dev := accelerator(t)
	ds := syntheticSet(t, 37)
	l := newLoader(t, ds, data.LoaderOptions{BatchSize: 10, Device: dev, Resident: true})
	if !l.Fixed() {
		t.Fatal("an unshuffled resident loader is not Fixed")
	}
	var first []*tensor.Tensor
	for x, y := range l.Batches(0) {
		first = append(first, x, y)
	}
	if len(first) != 8 {
		t.Fatalf("%d tensors, want 4 batches of x and y", len(first))
	}
	rowElems := first[0].Numel() / 10
	for i := 2; i < len(first); i += 2 {
		if b := i / 2; first[i].Storage() != first[0].Storage() || first[i].Offset() != b*10*rowElems {
			t.Fatalf("batch %d is not the view of rows %d.. of the dataset (offset %d)", b, b*10, first[i].Offset())
		}
	}
	for _, e := range []int{1, 5} {
		i := 0
		for x, y := range l.Batches(e) {
			if x != first[i] || y != first[i+1] {
				t.Fatalf("epoch %d batch %d: new tensors", e, i/2)
			}
			i += 2
		}
	}
	for _, o := range []data.LoaderOptions{
		{BatchSize: 10, Device: dev, Resident: true, Shuffle: true, Seed: 1},
		{BatchSize: 10, Device: dev},
	} {
		if newLoader(t, ds, o).Fixed() {
			t.Errorf("%+v: Fixed", o)
		}
	}
}
