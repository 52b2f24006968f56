package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/esper-go/esper/tensor"
)

// ReadFile reads and validates the safetensors file at path. Errors about
// the content are *FormatError values naming path.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	return Decode(f, st.Size(), path)
}

// Parse decodes a safetensors file held in memory; name identifies it in
// errors. The tensors do not alias data.
func Parse(data []byte, name string) (*File, error) {
	return Decode(bytes.NewReader(data), int64(len(data)), name)
}

// Decode reads a safetensors file of exactly size bytes from r; name
// identifies it in errors. Malformed or truncated input gives a
// *FormatError, a failing reader an error wrapping the reader's. On error
// the result is nil: nothing is half loaded.
func Decode(r io.Reader, size int64, name string) (*File, error) {
	d := decoder{r: r, size: size, name: name}
	f, err := d.decode()
	if err != nil {
		return nil, err
	}
	return f, nil
}

// decoder holds the state of one Decode.
type decoder struct {
	r    io.Reader
	size int64
	name string
	pos  int64 // bytes consumed from r
}

// header is one tensor's validated header record.
type header struct {
	name       string
	at         int64 // file offset of the entry's JSON value
	dtype      tensor.DType
	shape      []int
	begin, end int64 // relative to the data section
}

func (d *decoder) errorf(off int64, format string, args ...any) error {
	return &FormatError{File: d.name, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// read fills b from the input, turning a premature end into a
// *FormatError at the position where the input stopped.
func (d *decoder) read(b []byte) error {
	n, err := io.ReadFull(d.r, b)
	d.pos += int64(n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return d.errorf(d.pos, "input ends after %d of %d bytes (truncated file?)", d.pos, d.size)
	default:
		return fmt.Errorf("safetensors: %s: offset %d: %w", d.name, d.pos, err)
	}
}

func (d *decoder) decode() (*File, error) {
	if d.size < prefixLen {
		return nil, d.errorf(0, "file of %d bytes is shorter than the %d-byte header length", d.size, prefixLen)
	}
	var pre [prefixLen]byte
	if err := d.read(pre[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(pre[:])
	if n > uint64(d.size-prefixLen) {
		return nil, d.errorf(prefixLen, "header length %d exceeds file size %d", n, d.size)
	}
	if n > maxHeaderLen {
		return nil, d.errorf(prefixLen, "header length %d exceeds the limit of %d bytes", n, maxHeaderLen)
	}
	hdr := make([]byte, n)
	if err := d.read(hdr); err != nil {
		return nil, err
	}
	dataStart := prefixLen + int64(n)
	dataLen := d.size - dataStart
	heads, meta, err := d.parseHeader(hdr)
	if err != nil {
		return nil, err
	}
	if err := d.checkLayout(heads, dataStart, dataLen); err != nil {
		return nil, err
	}

	f := &File{Tensors: make(map[string]*tensor.Tensor, len(heads)), Metadata: meta}
	for _, h := range heads { // sorted by offset, covering the data without gaps
		t := tensor.Empty(h.dtype, h.shape...)
		b := t.Storage().Bytes()
		if err := d.read(b); err != nil {
			return nil, err
		}
		if h.dtype == tensor.Bool {
			for i, v := range b {
				if v > 1 {
					return nil, d.errorf(dataStart+h.begin+int64(i), "tensor %q: BOOL byte %#02x is neither 0 nor 1", h.name, v)
				}
			}
		}
		if !littleEndian {
			swapBytes(b, h.dtype.Size())
		}
		f.Tensors[h.name] = t
	}
	// The reader must end where the declared size does.
	var extra [1]byte
	if k, _ := io.ReadFull(d.r, extra[:]); k > 0 {
		return nil, d.errorf(d.size, "input continues past the declared size of %d bytes", d.size)
	}
	return f, nil
}

// checkLayout verifies every tensor's byte range: inside the data
// section, of the length its shape and dtype need, and together covering
// the section exactly once. It sorts heads by offset.
func (d *decoder) checkLayout(heads []header, dataStart, dataLen int64) error {
	for _, h := range heads {
		if h.begin < 0 || h.end < h.begin {
			return d.errorf(h.at, "tensor %q: invalid data_offsets [%d, %d]", h.name, h.begin, h.end)
		}
		if h.end > dataLen {
			return d.errorf(h.at, "tensor %q: data_offsets [%d, %d] run past the data section of %d bytes (file offset %d)", h.name, h.begin, h.end, dataLen, dataStart+h.end)
		}
		want, ok := byteLen(h.shape, h.dtype)
		if !ok || want != h.end-h.begin {
			if !ok {
				return d.errorf(h.at, "tensor %q: shape %v of %v is too large", h.name, h.shape, h.dtype)
			}
			return d.errorf(h.at, "tensor %q: %d data bytes, but shape %v of %v needs %d", h.name, h.end-h.begin, h.shape, h.dtype, want)
		}
	}
	sort.SliceStable(heads, func(i, j int) bool {
		if heads[i].begin != heads[j].begin {
			return heads[i].begin < heads[j].begin
		}
		return heads[i].end < heads[j].end
	})
	var next int64
	prev := ""
	for _, h := range heads {
		switch {
		case h.begin < next:
			return d.errorf(dataStart+h.begin, "tensor %q: data [%d, %d] overlaps tensor %q ending at %d", h.name, h.begin, h.end, prev, next)
		case h.begin > next:
			return d.errorf(dataStart+next, "gap of %d unused bytes before tensor %q at data offset %d", h.begin-next, h.name, h.begin)
		}
		next, prev = h.end, h.name
	}
	if next != dataLen {
		return d.errorf(dataStart+next, "%d bytes after the last tensor are not covered by any tensor", dataLen-next)
	}
	return nil
}

// byteLen returns the number of data bytes of shape and dtype, or false
// when it overflows int64.
func byteLen(shape []int, dt tensor.DType) (int64, bool) {
	n := int64(1)
	for _, s := range shape {
		if s == 0 {
			return 0, true
		}
	}
	for _, s := range shape {
		if n > math.MaxInt64/int64(s) {
			return 0, false
		}
		n *= int64(s)
	}
	sz := int64(dt.Size())
	if n > math.MaxInt64/sz {
		return 0, false
	}
	return n * sz, true
}

// parseHeader validates the JSON header (at file offset prefixLen) and
// returns its tensor records in header order and its metadata.
func (d *decoder) parseHeader(hdr []byte) ([]header, map[string]string, error) {
	if !utf8.Valid(hdr) {
		i := 0
		for i < len(hdr) {
			r, w := utf8.DecodeRune(hdr[i:])
			if r == utf8.RuneError && w == 1 {
				break
			}
			i += w
		}
		return nil, nil, d.errorf(prefixLen+int64(i), "header is not valid UTF-8")
	}
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, nil, d.errorf(prefixLen, "header does not start with '{'")
	}
	// Validate the syntax in one pass first: json.Unmarshal reports a
	// syntax error's position consistently (Offset counts the offending
	// byte), where a streaming Decoder's offsets vary by one.
	var whole json.RawMessage
	if err := json.Unmarshal(hdr, &whole); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se) && strings.Contains(se.Error(), "unexpected end"):
			return nil, nil, d.errorf(prefixLen+int64(len(hdr)), "invalid JSON: unexpected end of header")
		case errors.As(err, &se) && se.Offset > 0:
			return nil, nil, d.errorf(prefixLen+se.Offset-1, "invalid JSON: %v", err)
		}
		return nil, nil, d.errorf(prefixLen, "invalid JSON: %v", err)
	}
	top, end, err := d.members(hdr, prefixLen)
	if err != nil {
		return nil, nil, err
	}
	for i := end; i < len(hdr); i++ {
		if hdr[i] != ' ' {
			return nil, nil, d.errorf(prefixLen+int64(i), "header has %q after its JSON object (only space padding is allowed)", hdr[i])
		}
	}
	meta := map[string]string{}
	var heads []header
	for _, m := range top {
		if m.key == metadataKey {
			if isNull(m.value) {
				continue
			}
			mm, _, err := d.members(m.value, m.at)
			if err != nil {
				return nil, nil, err
			}
			for _, kv := range mm {
				var s string
				if isNull(kv.value) || json.Unmarshal(kv.value, &s) != nil {
					return nil, nil, d.errorf(kv.at, "metadata %q: value %s is not a string", kv.key, clip(kv.value))
				}
				meta[kv.key] = s
			}
			continue
		}
		h, err := d.parseEntry(m)
		if err != nil {
			return nil, nil, err
		}
		heads = append(heads, h)
	}
	return heads, meta, nil
}

// parseEntry validates one tensor record.
func (d *decoder) parseEntry(m member) (header, error) {
	h := header{name: m.key, at: m.at}
	fields, _, err := d.members(m.value, m.at)
	if err != nil {
		return h, err
	}
	var haveDType, haveShape, haveOffsets bool
	for _, f := range fields {
		if isNull(f.value) {
			return h, d.errorf(f.at, "tensor %q: %q is null", m.key, f.key)
		}
		switch f.key {
		case "dtype":
			var s string
			if json.Unmarshal(f.value, &s) != nil {
				return h, d.errorf(f.at, "tensor %q: dtype %s is not a string", m.key, clip(f.value))
			}
			dt, ok := dtypeFromName(s)
			if !ok {
				return h, d.errorf(f.at, "tensor %q: unsupported dtype %q (want F64, F32, BF16, F16, I32, I64 or BOOL)", m.key, s)
			}
			h.dtype, haveDType = dt, true
		case "shape":
			var dims []int64
			if json.Unmarshal(f.value, &dims) != nil {
				return h, d.errorf(f.at, "tensor %q: shape %s is not a list of integers", m.key, clip(f.value))
			}
			h.shape = make([]int, len(dims))
			for i, v := range dims {
				if v < 0 || v > math.MaxInt {
					return h, d.errorf(f.at, "tensor %q: shape %v has invalid dimension %d", m.key, dims, v)
				}
				h.shape[i] = int(v)
			}
			haveShape = true
		case "data_offsets":
			var offs []int64
			if json.Unmarshal(f.value, &offs) != nil || len(offs) != 2 {
				return h, d.errorf(f.at, "tensor %q: data_offsets %s is not a pair of integers", m.key, clip(f.value))
			}
			h.begin, h.end, haveOffsets = offs[0], offs[1], true
		default:
			return h, d.errorf(f.at, "tensor %q: unknown field %q", m.key, f.key)
		}
	}
	switch {
	case !haveDType:
		return h, d.errorf(m.at, "tensor %q: missing dtype", m.key)
	case !haveShape:
		return h, d.errorf(m.at, "tensor %q: missing shape", m.key)
	case !haveOffsets:
		return h, d.errorf(m.at, "tensor %q: missing data_offsets", m.key)
	}
	return h, nil
}

// member is one key/value pair of a JSON object.
type member struct {
	key   string
	at    int64 // file offset of the value
	value json.RawMessage
}

// members splits the JSON object b (at file offset base) into its
// members, rejecting duplicate keys, and returns where the object ends
// within b.
func (d *decoder) members(b []byte, base int64) ([]member, int, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	syntax := func(err error) error {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return d.errorf(base+se.Offset, "invalid JSON: %v", err)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return d.errorf(base+int64(len(b)), "invalid JSON: unexpected end of header")
		}
		return d.errorf(base+dec.InputOffset(), "invalid JSON: %v", err)
	}
	start := skipSpace(b, 0, "")
	tok, err := dec.Token()
	if err != nil {
		return nil, 0, syntax(err)
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return nil, 0, d.errorf(base+int64(start), "want a JSON object, found %s", clip(b[start:]))
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		keyAt := skipSpace(b, int(dec.InputOffset()), ",")
		tok, err := dec.Token()
		if err != nil {
			return nil, 0, syntax(err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, 0, d.errorf(base+int64(keyAt), "invalid JSON: object key is not a string")
		}
		if seen[key] {
			return nil, 0, d.errorf(base+int64(keyAt), "duplicate key %q", key)
		}
		seen[key] = true
		valAt := skipSpace(b, int(dec.InputOffset()), ":")
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, 0, syntax(err)
		}
		out = append(out, member{key: key, at: base + int64(valAt), value: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, 0, syntax(err)
	}
	return out, int(dec.InputOffset()), nil
}

// skipSpace returns the first index at or after i in b that is neither
// JSON whitespace nor one of the separators in also.
func skipSpace(b []byte, i int, also string) int {
	for i < len(b) {
		switch c := b[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case bytes.IndexByte([]byte(also), c) >= 0:
		default:
			return i
		}
		i++
	}
	return i
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// clip shortens JSON text for an error message.
func clip(b []byte) string {
	const max = 40
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
