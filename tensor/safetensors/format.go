package safetensors

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/esper-go/esper/tensor"
)

// File is the content of a safetensors file.
type File struct {
	// Tensors maps names to contiguous CPU tensors with their own storage.
	Tensors map[string]*tensor.Tensor
	// Metadata is the header's "__metadata__" object (empty when absent).
	Metadata map[string]string
}

// Names returns the tensor names in sorted order.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Tensors))
	for n := range f.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// FormatError reports a malformed or truncated safetensors file.
type FormatError struct {
	// File is the name given to the reader (the path for ReadFile).
	File string
	// Offset is the byte position in the file where the problem is: the
	// header entry for a header problem, the data for a data problem.
	Offset int64
	// Msg describes the problem.
	Msg string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("safetensors: %s: offset %d: %s", e.File, e.Offset, e.Msg)
}

// metadataKey is the reserved header key holding the string metadata.
const metadataKey = "__metadata__"

// maxHeaderLen bounds the JSON header, as the reference implementation
// does (safetensors MAX_HEADER_SIZE), so that a corrupt length cannot
// make a reader allocate gigabytes.
const maxHeaderLen = 100_000_000

// prefixLen is the size of the header length field.
const prefixLen = 8

// entry is one tensor's header record, in the key order the PyTorch
// fixture writer uses (sorted keys).
type entry struct {
	DataOffsets [2]int64 `json:"data_offsets"`
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
}

// dtypeFromName maps a safetensors dtype name to a DType, accepting only
// the upper-case names of the supported dtypes.
func dtypeFromName(s string) (tensor.DType, bool) {
	d, err := tensor.ParseDType(s)
	if err != nil || d.SafetensorsName() != s {
		return tensor.Invalid, false
	}
	return d, true
}

// littleEndian reports whether the host stores numbers little-endian, in
// which case tensor bytes are written and read as they are.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// swapBytes reverses the byte order of every size-byte element of b in
// place (used on big-endian hosts only).
func swapBytes(b []byte, size int) {
	if size == 1 {
		return
	}
	for i := 0; i+size <= len(b); i += size {
		e := b[i : i+size]
		for l, r := 0, size-1; l < r; l, r = l+1, r-1 {
			e[l], e[r] = e[r], e[l]
		}
	}
}
