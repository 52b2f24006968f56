package tensor

import "fmt"

// DType is the element type of a tensor.
type DType uint8

// The element types. F64 exists for references and gradient checks; BF16
// and F16 are stored as 16-bit values (half the bytes of F32) and computed
// in float32 by the CPU backend.
const (
	Invalid DType = iota
	F64
	F32
	BF16
	F16
	I32
	I64
	Bool
)

var dtypeNames = [...]string{"invalid", "f64", "f32", "bf16", "f16", "i32", "i64", "bool"}

// String returns the short lower-case name ("f32", "bf16", ...).
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes one element occupies in storage.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	case Bool:
		return 1
	}
	panic(fmt.Sprintf("tensor: Size of invalid dtype %v", d))
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F64 || d == F32 || d == BF16 || d == F16 }

// IsHalf reports whether d is a 16-bit floating-point type.
func (d DType) IsHalf() bool { return d == BF16 || d == F16 }

// IsInt reports whether d is an integer type.
func (d DType) IsInt() bool { return d == I32 || d == I64 }

// ParseDType maps a name as printed by String (or a safetensors name such
// as "F32", "BF16", "I64", "BOOL") to a DType.
func ParseDType(s string) (DType, error) {
	switch s {
	case "f64", "F64", "float64":
		return F64, nil
	case "f32", "F32", "float32":
		return F32, nil
	case "bf16", "BF16", "bfloat16":
		return BF16, nil
	case "f16", "F16", "float16":
		return F16, nil
	case "i32", "I32", "int32":
		return I32, nil
	case "i64", "I64", "int64":
		return I64, nil
	case "bool", "BOOL":
		return Bool, nil
	}
	return Invalid, fmt.Errorf("tensor: unknown dtype %q", s)
}

// SafetensorsName is the dtype's name in the safetensors header.
func (d DType) SafetensorsName() string {
	switch d {
	case Bool:
		return "BOOL"
	case F64:
		return "F64"
	case F32:
		return "F32"
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	case I32:
		return "I32"
	case I64:
		return "I64"
	}
	return "INVALID"
}

// Elem is the set of Go element types a tensor's storage can be viewed as.
// BF16 and F16 storage is viewed as uint16 (see BF16Bits, F16Bits).
type Elem interface {
	~float64 | ~float32 | ~uint16 | ~int32 | ~int64 | ~bool
}

// Float is the set of Go types the CPU kernels compute in.
type Float interface{ ~float32 | ~float64 }

// dtypeOf reports which dtypes a Go element type may view.
func dtypeMatches[T Elem](d DType) bool {
	var z T
	switch any(z).(type) {
	case float64:
		return d == F64
	case float32:
		return d == F32
	case uint16:
		return d == BF16 || d == F16
	case int32:
		return d == I32
	case int64:
		return d == I64
	case bool:
		return d == Bool
	}
	return false
}
