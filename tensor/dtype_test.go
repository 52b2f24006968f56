package tensor_test

import (
	"strings"
	"testing"

	"github.com/esper-go/esper/tensor"
)

func TestDTypeProperties(t *testing.T) {
	tests := []struct {
		d                      tensor.DType
		name, st               string
		size                   int
		isFloat, isHalf, isInt bool
	}{
		{tensor.F64, "f64", "F64", 8, true, false, false},
		{tensor.F32, "f32", "F32", 4, true, false, false},
		{tensor.BF16, "bf16", "BF16", 2, true, true, false},
		{tensor.F16, "f16", "F16", 2, true, true, false},
		{tensor.I32, "i32", "I32", 4, false, false, true},
		{tensor.I64, "i64", "I64", 8, false, false, true},
		{tensor.Bool, "bool", "BOOL", 1, false, false, false},
	}
	if len(tests) != len(allDTypes) {
		t.Fatalf("table covers %d dtypes, want %d", len(tests), len(allDTypes))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			equal(t, tc.d.String(), tc.name, "String")
			equal(t, tc.d.SafetensorsName(), tc.st, "SafetensorsName")
			equal(t, tc.d.Size(), tc.size, "Size")
			equal(t, tc.d.IsFloat(), tc.isFloat, "IsFloat")
			equal(t, tc.d.IsHalf(), tc.isHalf, "IsHalf")
			equal(t, tc.d.IsInt(), tc.isInt, "IsInt")
			for _, s := range []string{tc.d.String(), tc.d.SafetensorsName()} {
				got, err := tensor.ParseDType(s)
				noErr(t, err)
				equal(t, got, tc.d, "ParseDType(", s, ")")
			}
		})
	}
}

func TestParseDTypeLongNames(t *testing.T) {
	for s, want := range map[string]tensor.DType{
		"float64": tensor.F64, "float32": tensor.F32, "bfloat16": tensor.BF16,
		"float16": tensor.F16, "int32": tensor.I32, "int64": tensor.I64,
	} {
		got, err := tensor.ParseDType(s)
		noErr(t, err)
		equal(t, got, want, s)
	}
}

func TestDTypeInvalid(t *testing.T) {
	equal(t, tensor.Invalid.String(), "invalid")
	equal(t, tensor.DType(200).String(), "dtype(200)")
	equal(t, tensor.Invalid.SafetensorsName(), "INVALID")
	mustPanicWith(t, "tensor: Size of invalid dtype invalid", func() { tensor.Invalid.Size() })

	for _, s := range []string{"", "invalid", "F8_E4M3", "U8", "float", "Float32"} {
		d, err := tensor.ParseDType(s)
		if err == nil || !strings.Contains(err.Error(), "unknown dtype") {
			t.Errorf("ParseDType(%q) error = %v, want unknown dtype", s, err)
		}
		equal(t, d, tensor.Invalid, s)
	}
}
