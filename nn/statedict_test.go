package nn

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
)

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestStateDictRoundTrip(t *testing.T) {
	src, dst := onDev(t, newFixtureCNN()), onDev(t, NewSequential(
		MustConv2d(tensor.NewRNG(99), Conv2dOptions{InChannels: 1, OutChannels: 4, KernelH: 3, Padding: 1, NoBias: true}),
		MustBatchNorm2d(BatchNorm2dOptions{Channels: 4}),
		&ReLU{}, MustMaxPool2d(Pool2dOptions{Kernel: 2}), &Flatten{},
		MustLinear(tensor.NewRNG(98), LinearOptions{In: 64, Out: 3}),
	))
	// Make the buffers differ from their initial values too.
	Constant(src.At(1).(*BatchNorm2d).RunningMean, 0.25)
	Constant(src.At(1).(*BatchNorm2d).RunningVar, 3)

	sd := StateDict(src)
	want := []string{"0.weight", "1.bias", "1.running_mean", "1.running_var", "1.weight", "5.bias", "5.weight"}
	check(t, reflect.DeepEqual(keys(sd), want), "keys %q, want %q", keys(sd), want)
	check(t, !reflect.DeepEqual(bits(t, src), bits(t, dst)), "differently seeded models are identical")
	for k, v := range sd {
		check(t, v.Device() == testdevice.Device(t), "%s: state dict copy on %v, want the module's %v", k, v.Device(), testdevice.Device(t))
	}

	// Identity of the destination tensors must survive the load.
	before := map[string]*tensor.Tensor{}
	for _, e := range entries(dst) {
		before[e.name] = e.t
	}
	noErr(t, LoadStateDict(dst, sd, true))
	check(t, reflect.DeepEqual(bits(t, src), bits(t, dst)), "loaded model differs from its state dict")
	for _, e := range entries(dst) {
		check(t, before[e.name] == e.t, "%s: LoadStateDict replaced the tensor instead of copying into it", e.name)
	}

	// The state dict holds copies: changing it or the module afterwards
	// does not affect the other.
	Constant(sd["0.weight"], 7)
	check(t, at(t, src.At(0).(*Conv2d).Weight.Value, 0, 0, 0, 0) != 7, "StateDict aliases the module")
}

func TestLoadStateDictIntoArenaView(t *testing.T) {
	// An optimizer arena repoints Value to a view of one flat buffer;
	// StateDict and LoadStateDict must follow Value, not a cached tensor.
	l := onDev(t, MustLinear(tensor.NewRNG(1), LinearOptions{In: 3, Out: 2}))
	arena := testdevice.To(t, tensor.Zeros(tensor.F32, 100))
	w := arena.Narrow(0, 10, 6).Reshape(2, 3)
	b := arena.Narrow(0, 40, 2)
	copyMany([]*tensor.Tensor{w, b}, []*tensor.Tensor{l.Weight.Value, l.Bias.Value})
	l.Weight.Value, l.Bias.Value = w, b

	sd := devDict(t, map[string]*tensor.Tensor{
		"weight": tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3),
		"bias":   tensor.FromSlice([]float32{7, 8}),
	})
	noErr(t, LoadStateDict(l, sd, true))
	got := testdevice.F32(t, arena)
	check(t, reflect.DeepEqual(got[10:16], []float32{1, 2, 3, 4, 5, 6}) && reflect.DeepEqual(got[40:42], []float32{7, 8}),
		"load did not write through the arena views: %v", got[:44])
	check(t, at(t, StateDict(l)["bias"], 1) == 8, "StateDict does not read the repointed Value")
	var y *autograd.Var
	autograd.NoGrad(func() { y = l.Forward(autograd.Const(testdevice.To(t, tensor.FromSlice([]float32{1, 0, 0}, 1, 3)))) })
	check(t, reflect.DeepEqual(testdevice.F64(t, y.Value), []float64{1 + 7, 4 + 8}), "Forward does not read the repointed Value: %v", testdevice.F64(t, y.Value))
}

// TestCopyManyOverlaps: copies of a tensor onto itself are skipped, and
// copies that share memory (a source that is another copy's
// destination) run one by one in order, as ConcatMany refuses them.
func TestCopyManyOverlaps(t *testing.T) {
	buf := testdevice.To(t, tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 6))
	a, b, c := buf.Narrow(0, 0, 2), buf.Narrow(0, 2, 2), buf.Narrow(0, 4, 2)
	copyMany([]*tensor.Tensor{a, b, c}, []*tensor.Tensor{a, c, b}) // a onto itself; then b = c, then c = (new) b
	got := testdevice.F32(t, buf)
	check(t, reflect.DeepEqual(got, []float32{1, 2, 5, 6, 5, 6}), "copies in order: %v", got)
	l := onDev(t, MustLinear(tensor.NewRNG(2), LinearOptions{In: 3, Out: 2}))
	want := testdevice.F32(t, l.Weight.Value)
	noErr(t, LoadStateDict(l, map[string]*tensor.Tensor{"weight": l.Weight.Value, "bias": l.Bias.Value}, true))
	check(t, reflect.DeepEqual(testdevice.F32(t, l.Weight.Value), want), "a module loads its own live tensors")
}

func TestLoadStateDictErrors(t *testing.T) {
	good := func() map[string]*tensor.Tensor { return StateDict(onDev(t, newFixtureCNN())) }
	d := func(x *tensor.Tensor) *tensor.Tensor { return testdevice.To(t, x) }
	cases := []struct {
		name   string
		edit   func(sd map[string]*tensor.Tensor)
		strict bool
		ok     bool
		want   []string // substrings of the error
		check  func(e *StateDictError) bool
	}{
		{"missing strict", func(sd map[string]*tensor.Tensor) { delete(sd, "1.running_var") }, true, false,
			[]string{"missing", "1.running_var"}, func(e *StateDictError) bool { return reflect.DeepEqual(e.Missing, []string{"1.running_var"}) }},
		{"missing lax", func(sd map[string]*tensor.Tensor) { delete(sd, "1.running_var") }, false, true, nil, nil},
		{"unexpected strict", func(sd map[string]*tensor.Tensor) {
			sd["1.num_batches_tracked"] = d(tensor.Scalar(tensor.I64, 1))
			sd["extra"] = d(tensor.Zeros(tensor.F32, 1))
		}, true, false,
			[]string{"unexpected", "1.num_batches_tracked", "extra"}, func(e *StateDictError) bool {
				return reflect.DeepEqual(e.Unexpected, []string{"1.num_batches_tracked", "extra"})
			}},
		{"unexpected lax", func(sd map[string]*tensor.Tensor) { sd["extra"] = d(tensor.Zeros(tensor.F32, 1)) }, false, true, nil, nil},
		{"shape", func(sd map[string]*tensor.Tensor) { sd["5.weight"] = d(tensor.Zeros(tensor.F32, 64, 3)) }, false, false,
			[]string{"5.weight", "shape [3 64]", "[64 3]"}, nil},
		{"dtype", func(sd map[string]*tensor.Tensor) { sd["1.bias"] = d(tensor.Zeros(tensor.F64, 4)) }, true, false,
			[]string{"1.bias", "dtype"}, nil},
		{"nil", func(sd map[string]*tensor.Tensor) { sd["0.weight"] = nil }, true, false, []string{"0.weight", "nil"}, nil},
		{"all at once", func(sd map[string]*tensor.Tensor) {
			delete(sd, "0.weight")
			sd["5.bias"] = d(tensor.Zeros(tensor.F32, 4))
			sd["x"] = d(tensor.Zeros(tensor.F32, 4))
		}, true, false, []string{"0.weight", "5.bias", `"x"`}, func(e *StateDictError) bool {
			return len(e.Missing) == 1 && len(e.Unexpected) == 1 && len(e.Mismatched) == 1
		}},
		// A tensor of another device is refused, not copied over (Load
		// copies a file's host tensors; LoadStateDict converts nothing).
		{"device", func(sd map[string]*tensor.Tensor) {
			other := tensor.Sim(7)
			if testdevice.OnDevice(t) {
				other = tensor.CPU
			}
			x, err := sd["1.weight"].ToDevice(other)
			noErr(t, err)
			sd["1.weight"] = x
		}, false, false, []string{"1.weight", "device", testdevice.Device(t).String()}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := onDev(t, newFixtureCNN())
			before := bits(t, m)
			sd := good()
			for _, v := range sd {
				if v.DType() == tensor.F32 {
					Constant(v, 0.5) // every valid entry would change the module
				}
			}
			c.edit(sd)
			err := LoadStateDict(m, sd, c.strict)
			if c.ok {
				noErr(t, err)
				return
			}
			check(t, err != nil, "no error")
			var se *StateDictError
			check(t, errors.As(err, &se), "error %T is not a *StateDictError", err)
			for _, s := range c.want {
				check(t, strings.Contains(err.Error(), s), "error %q does not mention %q", err, s)
			}
			if c.check != nil {
				check(t, c.check(se), "unexpected error detail %+v", se)
			}
			check(t, reflect.DeepEqual(before, bits(t, m)), "a failed load changed the module")
		})
	}
}

// TestCopyMany: copyMany copies a scalar, a vector, a matrix and a
// transposed view each into its destination on the test device (one
// ConcatMany on sim and CUDA, copies on the CPU), bit for bit.
func TestCopyMany(t *testing.T) {
	dev := testdevice.Device(t)
	rng := tensor.NewRNG(4)
	host := []*tensor.Tensor{
		tensor.Scalar(tensor.F32, 2.5), tensor.Normal(rng, tensor.F32, 0, 1, 3),
		tensor.Normal(rng, tensor.F32, 0, 1, 2, 4), tensor.Normal(rng, tensor.F32, 0, 1, 3, 2),
	}
	var srcs, dsts []*tensor.Tensor
	for i, h := range host {
		d, err := h.ToDevice(dev)
		noErr(t, err)
		if i == 3 {
			d = d.Permute(1, 0) // a transposed view [2, 3]
		}
		srcs = append(srcs, d)
		out, err := tensor.EmptyOn(dev, tensor.F32, d.Shape()...)
		noErr(t, err)
		dsts = append(dsts, out)
	}
	copyMany(dsts, srcs)
	host[3] = host[3].Permute(1, 0).Clone()
	for i := range srcs {
		got, err := dsts[i].ToDevice(tensor.CPU)
		noErr(t, err)
		check(t, reflect.DeepEqual(got.Float64s(), host[i].Float64s()), "tensor %d: %v, want %v", i, got.Float64s(), host[i].Float64s())
	}
}
