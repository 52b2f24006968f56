package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// fixtureDir holds the PyTorch reference files (bench/pytorch/make_fixtures.py).
const fixtureDir = "../../testdata/fixtures"

func TestFixtures(t *testing.T) {
	if _, err := os.Stat(fixtureDir); os.IsNotExist(err) {
		t.Fatal("fixtures missing (committed under testdata/fixtures): " + fixtureDir)
	}
	paths, err := filepath.Glob(filepath.Join(fixtureDir, "*.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no *.safetensors in %s", fixtureDir)
	}
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			f, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Tensors) == 0 {
				t.Error("no tensors")
			}
			for _, k := range []string{"generator", "torch_version"} {
				if f.Metadata[k] == "" {
					t.Errorf("metadata %q missing", k)
				}
			}
			// Encode writes the same layout as the fixture writer, so a
			// fixture re-encodes to identical bytes.
			disk, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := Encode(&b, f.Tensors, f.Metadata); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), disk) {
				t.Errorf("re-encoded file differs from the fixture (%d vs %d bytes)", b.Len(), len(disk))
			}
		})
	}
}

// TestFixtureValues checks values the README gives as literals (not
// drawn from a seed), which pins I64 decoding and shapes against
// PyTorch's writer, and the documented dtypes and ranges of the class
// targets. The fixtures are regenerated now and then, so nothing random
// is pinned here.
func TestFixtureValues(t *testing.T) {
	if _, err := os.Stat(fixtureDir); os.IsNotExist(err) {
		t.Fatal("fixtures missing (committed under testdata/fixtures): " + fixtureDir)
	}
	read := func(file string) *File {
		t.Helper()
		f, err := ReadFile(filepath.Join(fixtureDir, file+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	literals := []struct {
		file, tensor string
		dtype        tensor.DType
		shape        []int
		values       []float64
	}{
		{"layers", "embedding.x", tensor.I64, []int{3, 4}, []float64{1, 3, 3, 0, 10, 3, 7, 1, 5, 5, 5, 2}},
		{"scatter", "input.index", tensor.I64, []int{9}, []float64{2, 0, 1, 0, 2, 2, 1, 0, 2}},
		{"scatter", "index_select.index", tensor.I64, []int{6}, []float64{4, 0, 8, 4, 2, 4}},
		{"scatter", "gather.index", tensor.I64, []int{9, 2}, []float64{0, 3, 1, 1, 2, 0, 3, 3, 0, 0, 2, 1, 1, 3, 0, 2, 3, 2}},
	}
	for _, tc := range literals {
		x, ok := read(tc.file).Tensors[tc.tensor]
		if !ok {
			t.Errorf("%s: no tensor %q", tc.file, tc.tensor)
			continue
		}
		if x.DType() != tc.dtype || !reflect.DeepEqual(x.Shape(), tc.shape) || !reflect.DeepEqual(x.Float64s(), tc.values) {
			t.Errorf("%s %s: %v %v %v, want %v %v %v", tc.file, tc.tensor, x.DType(), x.Shape(), x.Float64s(), tc.dtype, tc.shape, tc.values)
		}
	}
	targets := []struct {
		file    string
		n, nCls int
	}{{"mlp", 5, 4}, {"cnn", 6, 3}, {"loss", 7, 5}}
	for _, tc := range targets {
		f := read(tc.file)
		x := f.Tensors["input.target"]
		if x == nil || x.DType() != tensor.I64 || !reflect.DeepEqual(x.Shape(), []int{tc.n}) {
			t.Errorf("%s input.target: %v, want I64 [%d]", tc.file, x, tc.n)
			continue
		}
		for _, v := range x.I64() {
			if v < 0 || v >= int64(tc.nCls) {
				t.Errorf("%s input.target holds %d, want [0, %d)", tc.file, v, tc.nCls)
			}
		}
	}
	for _, file := range []string{"mlp", "cnn"} {
		if loss := read(file).Tensors["output.loss"]; loss == nil || loss.Rank() != 0 || loss.DType() != tensor.F32 {
			t.Errorf("%s output.loss should be an F32 scalar of rank 0, got %v", file, loss)
		}
	}
}
