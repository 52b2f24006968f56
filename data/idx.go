package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/esper-go/esper/tensor"
)

// IDX limits: a header claiming more is rejected before anything is
// allocated for it.
const (
	maxIDXItems = 1 << 24 // samples per file
	maxIDXSide  = 1 << 12 // rows or columns of an image
)

// IDX element type codes (the third byte of the magic number).
const idxUbyte = 0x08

// FormatError reports a malformed or truncated data file. Offset is the
// byte offset of the problem in the file's IDX content: in the file
// itself for a raw file, in the decompressed stream for a gzip file
// (Compressed is then true).
type FormatError struct {
	File       string
	Offset     int64
	Compressed bool
	Msg        string
	Err        error // underlying error, if any (such as a gzip checksum error)
}

func (e *FormatError) Error() string {
	where := "offset"
	if e.Compressed {
		where = "decompressed offset"
	}
	s := fmt.Sprintf("data: %s: %s %d: %s", e.File, where, e.Offset, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *FormatError) Unwrap() error { return e.Err }

// idxFile is one IDX file being read: a counting reader over the raw or
// decompressed content.
type idxFile struct {
	path string
	gz   bool
	r    io.Reader
	off  int64
}

func (f *idxFile) errorf(off int64, err error, format string, args ...any) *FormatError {
	return &FormatError{File: f.path, Offset: off, Compressed: f.gz, Msg: fmt.Sprintf(format, args...), Err: err}
}

// readFull reads len(p) bytes of what, or fails with a FormatError at the
// offset where the data ran out.
func (f *idxFile) readFull(p []byte, what string) error {
	n, err := io.ReadFull(f.r, p)
	f.off += int64(n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return f.errorf(f.off, nil, "truncated %s: want %d bytes, file ends after %d", what, len(p), n)
	default:
		return f.errorf(f.off, err, "reading %s", what)
	}
}

// readIDX reads an IDX file of unsigned bytes with the given rank and
// returns its dimensions and data. Gzip content is recognised by its
// magic bytes, whatever the file is called. The whole stream is read, so
// trailing garbage and gzip checksum errors are caught.
func readIDX(path string, rank int) (dims []int, data []byte, gz bool, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, false, err
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, 1<<16)
	f := &idxFile{path: path, r: br}
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, false, &FormatError{File: path, Msg: "bad gzip header", Err: err}
		}
		defer zr.Close()
		zr.Multistream(false)
		f.r, f.gz = zr, true
	}
	var hdr [4]byte
	if err := f.readFull(hdr[:], "magic number"); err != nil {
		return nil, nil, false, err
	}
	if hdr[0] != 0 || hdr[1] != 0 {
		return nil, nil, false, f.errorf(0, nil, "bad magic number %#08x: not an IDX file (want 0x0000%02x%02x)", binary.BigEndian.Uint32(hdr[:]), idxUbyte, rank)
	}
	if hdr[2] != idxUbyte {
		return nil, nil, false, f.errorf(2, nil, "element type %#02x, want %#02x (unsigned byte)", hdr[2], idxUbyte)
	}
	if int(hdr[3]) != rank {
		return nil, nil, false, f.errorf(3, nil, "%d dimensions, want %d", hdr[3], rank)
	}
	total := int64(1)
	dims = make([]int, rank)
	for i := range dims {
		at := f.off
		if err := f.readFull(hdr[:], fmt.Sprintf("dimension %d", i)); err != nil {
			return nil, nil, false, err
		}
		d := int64(binary.BigEndian.Uint32(hdr[:]))
		limit := int64(maxIDXSide)
		if i == 0 {
			limit = maxIDXItems
		}
		if d == 0 || d > limit {
			return nil, nil, false, f.errorf(at, nil, "dimension %d is %d (want 1 to %d)", i, d, limit)
		}
		dims[i] = int(d)
		total *= d
	}
	// Grow the buffer as data arrives rather than trusting the header,
	// so a truncated file claiming gigabytes costs what it holds.
	start := f.off
	buf := bytes.NewBuffer(make([]byte, 0, min(total, 64<<20)))
	n, err := io.CopyN(buf, f.r, total)
	f.off += n
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, false, f.errorf(f.off, nil, "truncated: header at offset 4 promises %d data bytes from offset %d, file ends after %d", total, start, n)
		}
		return nil, nil, false, f.errorf(f.off, err, "reading data")
	}
	var one [1]byte
	switch m, err := f.r.Read(one[:]); {
	case m > 0:
		return nil, nil, false, f.errorf(f.off, nil, "trailing bytes after the %d data bytes the header promises", total)
	case err != nil && !errors.Is(err, io.EOF):
		return nil, nil, false, f.errorf(f.off, err, "reading past the data")
	}
	return dims, buf.Bytes(), f.gz, nil
}

// OpenIDX reads an image-classification set from a pair of IDX files of
// unsigned bytes (raw or gzip-compressed): images [N, H, W] and labels
// [N], every label in [0, classes). Pixels p become (p/255 − Mean)/Std
// with norm; the result has one channel. A malformed file is a
// *FormatError; OpenIDX never panics.
func OpenIDX(name, imagesPath, labelsPath string, classes int, norm Normalization) (ds *TensorDataset, err error) {
	defer func() {
		if r := recover(); r != nil {
			ds, err = nil, fmt.Errorf("data: %s: internal error reading %s and %s: %v", name, imagesPath, labelsPath, r)
		}
	}()
	if classes < 1 || classes > 256 {
		return nil, fmt.Errorf("data: %s: %d classes (want 1 to 256)", name, classes)
	}
	if !(norm.Std > 0) {
		return nil, fmt.Errorf("data: %s: normalisation std %v (want > 0)", name, norm.Std)
	}
	idims, pix, _, err := readIDX(imagesPath, 3)
	if err != nil {
		return nil, err
	}
	ldims, labs, gz, err := readIDX(labelsPath, 1)
	if err != nil {
		return nil, err
	}
	if idims[0] != ldims[0] {
		return nil, &FormatError{File: labelsPath, Offset: 4, Compressed: gz, Msg: fmt.Sprintf("%d labels for the %d images of %s", ldims[0], idims[0], imagesPath)}
	}
	y := tensor.Empty(tensor.I64, ldims[0])
	ys := y.I64()
	for i, l := range labs {
		if int(l) >= classes {
			return nil, &FormatError{File: labelsPath, Offset: int64(8 + i), Compressed: gz, Msg: fmt.Sprintf("label %d of sample %d outside [0, %d)", l, i, classes)}
		}
		ys[i] = int64(l)
	}
	x := tensor.Empty(tensor.F32, idims[0], 1, idims[1], idims[2])
	xs := x.F32()
	lut := norm.lut()
	for i, p := range pix {
		xs[i] = lut[p]
	}
	return NewTensorDataset(name, x, y, classes, norm)
}
