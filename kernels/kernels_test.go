package kernels_test

import (
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	_ "github.com/esper-go/esper/kernels/cpu"
	"github.com/esper-go/esper/tensor"
)

func TestRegistry(t *testing.T) {
	b, err := kernels.Lookup(tensor.CPU)
	if err != nil || b.Name() != "cpu" {
		t.Fatalf("Lookup(cpu) = %v, %v", b, err)
	}
	if _, err := kernels.Lookup(tensor.CUDA(0)); err == nil || !strings.Contains(err.Error(), "cuda:0") {
		t.Fatalf("Lookup(cuda:0) without a CUDA backend: err = %v", err)
	}
}

func TestOpNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, op := range kernels.UnaryOps() {
		if seen[op.String()] || strings.HasSuffix(op.String(), "?") {
			t.Fatalf("unary op %d has a missing or repeated name %q", op, op)
		}
		seen[op.String()] = true
	}
	for _, op := range kernels.BinaryOps() {
		if seen[op.String()] || strings.HasSuffix(op.String(), "?") {
			t.Fatalf("binary op %d has a missing or repeated name %q", op, op)
		}
		seen[op.String()] = true
	}
	if !kernels.Eq.IsComparison() || kernels.Add.IsComparison() {
		t.Fatal("IsComparison misclassifies")
	}
}

func TestParamDefaults(t *testing.T) {
	p := kernels.Conv2dParams{}.Norm()
	if p.StrideH != 1 || p.StrideW != 1 || p.DilationH != 1 || p.DilationW != 1 || p.Groups != 1 {
		t.Fatalf("Conv2dParams defaults: %+v", p)
	}
	if got := kernels.ConvOut(28, 3, 1, 1, 1); got != 28 {
		t.Fatalf("ConvOut same padding = %d", got)
	}
	q := kernels.Pool2dParams{KernelH: 2, KernelW: 3}.Norm()
	if q.StrideH != 2 || q.StrideW != 3 {
		t.Fatalf("Pool2dParams stride defaults to the kernel: %+v", q)
	}
}
