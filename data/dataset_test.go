package data_test

import (
	"strings"
	"testing"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/tensor"
)

func TestNewTensorDatasetValidates(t *testing.T) {
	x := tensor.Empty(tensor.F32, 3, 1, 2, 2)
	y := tensor.FromSlice([]int64{0, 1, 2})
	if _, err := data.NewTensorDataset("ok", x, y, 3, data.Normalization{Std: 1}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		x, y    *tensor.Tensor
		classes int
		msg     string
	}{
		{"nil", nil, y, 3, "nil"},
		{"f64 images", tensor.Empty(tensor.F64, 3, 1, 2, 2), y, 3, "F32"},
		{"rank 3", tensor.Empty(tensor.F32, 3, 2, 2), y, 3, "[N, C, H, W]"},
		{"i32 labels", x, tensor.FromSlice([]int32{0, 1, 2}), 3, "I64"},
		{"count", x, tensor.FromSlice([]int64{0, 1}), 3, "3 images but 2 labels"},
		{"label range", x, tensor.FromSlice([]int64{0, 3, 1}), 3, "label 3 of sample 1"},
		{"negative label", x, tensor.FromSlice([]int64{0, -1, 1}), 3, "label -1"},
		{"no classes", x, y, 0, "0 classes"},
	}
	for _, c := range cases {
		_, err := data.NewTensorDataset("t", c.x, c.y, c.classes, data.Normalization{Std: 1})
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.msg)
		}
	}
}

func TestBatchCopiesAndChecks(t *testing.T) {
	ds := countingSet(t, 10)
	x := tensor.Empty(tensor.F32, 3, 1, 2, 3)
	y := tensor.Empty(tensor.I64, 3)
	ds.Batch([]int{9, 0, 4}, x, y)
	if xs := x.F32(); xs[0] != 9 || xs[6] != 0 || xs[17] != 4 || y.I64()[0] != 9 || y.I64()[2] != 4 {
		t.Fatalf("x %v y %v", xs, y.I64())
	}
	if a := testing.AllocsPerRun(50, func() { ds.Batch([]int{1, 2, 3}, x, y) }); a != 0 && !raceEnabled {
		t.Errorf("Batch allocates %v times", a)
	}
	for name, f := range map[string]func(){
		"index":      func() { ds.Batch([]int{1, 10, 2}, x, y) },
		"rows":       func() { ds.Batch([]int{1, 2}, x, y) },
		"dtype":      func() { ds.Batch([]int{1, 2, 3}, tensor.Empty(tensor.F64, 3, 1, 2, 3), y) },
		"sample":     func() { ds.Batch([]int{1, 2, 3}, tensor.Empty(tensor.F32, 3, 1, 3, 2), y) },
		"non-contig": func() { ds.Batch([]int{1, 2, 3}, tensor.Empty(tensor.F32, 3, 1, 3, 2).Transpose(2, 3), y) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
