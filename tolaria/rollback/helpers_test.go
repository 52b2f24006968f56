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

	"github.com/esper-go/esper/tensor"
)

// raw returns t's element bytes in row-major order (a copy for strided
// views, else a view of the storage).
func raw(t *tensor.Tensor) []byte {
	c := t.Contiguous()
	sz := c.DType().Size()
	return c.Storage().Bytes()[c.Offset()*sz : (c.Offset()+c.Numel())*sz]
}

// sameTensors reports the first difference between two tensor maps, by
// name, shape, dtype and bytes; "" when bitwise equal.
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
// Bool, scalar, empty and strided tensors, and every Meta field set.
func mixedState() State {
	bf := tensor.Empty(tensor.BF16, 2, 3)
	copy(bf.U16(), []uint16{0x3f80, 0xbf80, 0x7fc1, 0x0001, 0x8000, 0x7f80})
	strided := tensor.FromSlice([]float64{1, 2, 3, 4, 5, 6}, 2, 3).T() // [3,2] view
	return State{
		Tensors: map[string]*tensor.Tensor{
			"model/w.f32":   f32Bits(0x3f800000, 0x80000000, 0x7fc00123, 0xff800000, 0x00000001),
			"model/w.f64":   tensor.FromSlice([]float64{math.Pi, math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64}, 2, 2),
			"model/w.bf16":  bf,
			"optim/step":    tensor.Scalar(tensor.F64, 7),
			"optim/ids":     tensor.FromSlice([]int64{-1, math.MaxInt64}, 2),
			"model/mask":    tensor.FromSlice([]bool{true, false, true}, 3),
			"model/empty":   tensor.Empty(tensor.F32, 0, 4),
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
// and a zero Meta.
func sized(n int, v float64) State {
	return State{Tensors: map[string]*tensor.Tensor{"w": tensor.Full(tensor.F32, v, n)}}
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
