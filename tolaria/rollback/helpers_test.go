package rollback

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// raw returns t's element bytes in row-major order (a copy for strided
// views, else a view of the storage; for a tensor on a device, of a host
// copy).
func raw(t *tensor.Tensor) []byte {
	c := hostContiguous(t)
	sz := c.DType().Size()
	return c.Storage().Bytes()[c.Offset()*sz : (c.Offset()+c.Numel())*sz]
}

// hostContiguous returns t's elements as a contiguous host tensor: t
// itself or t.Contiguous() on the CPU; on a device, t made contiguous
// there by its backend, then copied over explicitly (a counted host
// sync). A failed copy panics: the tests' devices (cpu, sim) cannot fail
// one.
func hostContiguous(t *tensor.Tensor) *tensor.Tensor {
	if t.Device().IsCPU() {
		return t.Contiguous()
	}
	if !t.IsContiguous() {
		c := tensor.EmptyLike(t)
		kernels.For(t.Device()).Copy(c, t)
		t = c
	}
	h, err := t.ToDevice(tensor.CPU)
	if err != nil {
		panic(err)
	}
	return h
}

// fill sets every element of t to v where t lies, with its backend.
func fill(t *tensor.Tensor, v float64) { kernels.For(t.Device()).Fill(t, v) }

// w0 is the first element of s's tensor "w", read on the host.
func w0(t *testing.T, s State) float32 { return testdevice.F32(t, s.Tensors["w"])[0] }

// sameTensors reports the first difference between two tensor maps, by
// name, shape, dtype and bytes, wherever the tensors lie; "" when bitwise
// equal.
func sameTensors(a, b map[string]*tensor.Tensor) string {
	if len(a) != len(b) {
		return "different tensor counts: " + strings.Join(names(a), ",") + " vs " + strings.Join(names(b), ",")
	}
	for n, x := range a {
		y, ok := b[n]
		switch {
		case !ok:
			return "missing " + n
		case x.DType() != y.DType():
			return n + ": dtype " + x.DType().String() + " vs " + y.DType().String()
		case !tensor.SameShape(x.Shape(), y.Shape()):
			return n + ": shape " + tensor.ShapeString(x.Shape()) + " vs " + tensor.ShapeString(y.Shape())
		case !bytes.Equal(raw(x), raw(y)):
			return n + ": bytes differ"
		}
	}
	return ""
}

func names(m map[string]*tensor.Tensor) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// f32Bits builds an F32 tensor from raw bit patterns (NaN payloads, -0).
func f32Bits(bits ...uint32) *tensor.Tensor {
	v := make([]float32, len(bits))
	for i, b := range bits {
		v[i] = math.Float32frombits(b)
	}
	return tensor.FromSlice(v, len(v))
}

// mixedState is a state with F32 (odd bit patterns), F64, BF16, I64,
// Bool, scalar, empty and strided tensors on the test device
// (testdevice), and every Meta field set.
func mixedState(t *testing.T) State {
	bf := tensor.Empty(tensor.BF16, 2, 3)
	copy(bf.U16(), []uint16{0x3f80, 0xbf80, 0x7fc1, 0x0001, 0x8000, 0x7f80})
	// A [3,2] view of a [2,3] tensor, made where the tensor lies.
	strided := testdevice.To(t, tensor.FromSlice([]float64{1, 2, 3, 4, 5, 6}, 2, 3)).T()
	on := func(x *tensor.Tensor) *tensor.Tensor { return testdevice.To(t, x) }
	return State{
		Tensors: map[string]*tensor.Tensor{
			"model/w.f32":   on(f32Bits(0x3f800000, 0x80000000, 0x7fc00123, 0xff800000, 0x00000001)),
			"model/w.f64":   on(tensor.FromSlice([]float64{math.Pi, math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64}, 2, 2)),
			"model/w.bf16":  on(bf),
			"optim/step":    on(tensor.Scalar(tensor.F64, 7)),
			"optim/ids":     on(tensor.FromSlice([]int64{-1, math.MaxInt64}, 2)),
			"model/mask":    on(tensor.FromSlice([]bool{true, false, true}, 3)),
			"model/empty":   on(tensor.Empty(tensor.F32, 0, 4)),
			"model/strided": strided,
		},
		Meta: Meta{
			Epoch: 3, GlobalStep: 1234,
			RNG:   []uint64{0, 1, math.MaxUint64, 0x9e3779b97f4a7c15},
			Slots: map[string]json.RawMessage{"r0c1": json.RawMessage(`{"schema_version":1,"slot_id":"r0c1"}`)},
			Extra: map[string]json.RawMessage{"lr_controller": json.RawMessage(`{"lr":0.1}`)},
		},
	}
}

// sized returns a state with one F32 tensor of n elements filled with v
// on the test device, and a zero Meta.
func sized(t *testing.T, n int, v float64) State {
	return State{Tensors: map[string]*tensor.Tensor{"w": testdevice.To(t, tensor.Full(tensor.F32, v, n))}}
}

// zeroMetaLen is the JSON length of a zero Meta, part of every Size.
func zeroMetaLen(t *testing.T) int64 {
	b, err := json.Marshal(Meta{})
	noErr(t, err)
	return int64(len(b))
}

// dirNames lists the entries of dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	noErr(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// corruptErr asserts err is a *CorruptError about file.
func corruptErr(t *testing.T, err error, file string) *CorruptError {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v (%T), want a *CorruptError", err, err)
	}
	if ce.File != file {
		t.Fatalf("CorruptError names %q, want %q (%v)", ce.File, file, err)
	}
	if !strings.Contains(err.Error(), filepath.Base(file)) {
		t.Fatalf("error %q does not name the file", err)
	}
	return ce
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
