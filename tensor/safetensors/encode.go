package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/esper-go/esper/tensor"
)

// Encode writes tensors and metadata (which may be nil) to w in the
// safetensors format: tensors in sorted name order with no gaps between
// them, non-contiguous tensors packed, the header padded with spaces to a
// multiple of 8 bytes. The header has "__metadata__" first (omitted when
// empty), then the tensors, each {"data_offsets","dtype","shape"}, with
// sorted keys and no whitespace, the layout of the fixture writer in
// bench/pytorch (whose files re-encode to identical bytes).
//
// Everything is validated before the first byte is written: tensors must
// be non-nil and on the CPU, and no tensor may be named "__metadata__".
func Encode(w io.Writer, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n, t := range tensors {
		switch {
		case n == metadataKey:
			return fmt.Errorf("safetensors: tensor name %q is reserved for metadata", n)
		case t == nil:
			return fmt.Errorf("safetensors: tensor %q is nil", n)
		case !t.Device().IsCPU():
			return fmt.Errorf("safetensors: tensor %q is on %v; copy it to the CPU first", n, t.Device())
		}
		if _, ok := dtypeFromName(t.DType().SafetensorsName()); !ok {
			return fmt.Errorf("safetensors: tensor %q has unsupported dtype %v", n, t.DType())
		}
		names = append(names, n)
	}
	sort.Strings(names)

	hdr, err := encodeHeader(names, tensors, metadata)
	if err != nil {
		return err
	}
	var pre [prefixLen]byte
	binary.LittleEndian.PutUint64(pre[:], uint64(len(hdr)))
	if _, err := w.Write(pre[:]); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	for _, n := range names {
		if err := writeData(w, tensors[n]); err != nil {
			return fmt.Errorf("safetensors: write tensor %q: %w", n, err)
		}
	}
	return nil
}

// encodeHeader builds the padded JSON header.
func encodeHeader(names []string, tensors map[string]*tensor.Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	put := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("safetensors: header: %w", err)
		}
		b.Truncate(b.Len() - 1) // Encode appends a newline
		return nil
	}
	b.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		b.WriteString(`"` + metadataKey + `":`)
		if err := put(metadata); err != nil { // maps encode with sorted keys
			return nil, err
		}
		first = false
	}
	var off int64
	for _, n := range names {
		t := tensors[n]
		if !first {
			b.WriteByte(',')
		}
		first = false
		if err := put(n); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		shape := append([]int{}, t.Shape()...) // [] rather than null for rank 0
		size := int64(t.Nbytes())
		if err := put(entry{DataOffsets: [2]int64{off, off + size}, DType: t.DType().SafetensorsName(), Shape: shape}); err != nil {
			return nil, err
		}
		off += size
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), nil
}

// writeData writes t's elements row-major and little-endian.
func writeData(w io.Writer, t *tensor.Tensor) error {
	if t.Numel() == 0 {
		return nil
	}
	c := t.Contiguous()
	sz := c.DType().Size()
	b := c.Storage().Bytes()[c.Offset()*sz : (c.Offset()+c.Numel())*sz]
	if !littleEndian {
		b = append([]byte(nil), b...)
		swapBytes(b, sz)
	}
	_, err := w.Write(b)
	return err
}
