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
	maxIDXBytes = 1 << 32 // data bytes of one file (also at most a fifth of tensor.HostLimit)
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

// idxReader is an IDX file of unsigned bytes whose header has been read
// and checked: its data is read by data, once the caller has checked the
// dimensions against what it expects.
type idxReader struct {
	idxFile
	fh    *os.File
	br    *bufio.Reader
	zr    *gzip.Reader
	dims  []int
	total int64 // data bytes the header promises
}

// openIDX opens an IDX file of unsigned bytes with the given rank and
// reads its header. Gzip content is recognised by its magic bytes,
// whatever the file is called.
func openIDX(path string, rank int) (r *idxReader, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(fh, 1<<16)
	r = &idxReader{idxFile: idxFile{path: path, r: br}, fh: fh, br: br}
	defer func() {
		if err != nil {
			r.Close()
			r = nil
		}
	}()
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return r, &FormatError{File: path, Msg: "bad gzip header", Err: err}
		}
		// One gzip member: a second member or anything else after the
		// first is trailing data (checked in data).
		zr.Multistream(false)
		r.zr, r.idxFile.r, r.gz = zr, zr, true
	}
	f := &r.idxFile
	var hdr [4]byte
	if err := f.readFull(hdr[:], "magic number"); err != nil {
		return r, err
	}
	if hdr[0] != 0 || hdr[1] != 0 {
		return r, f.errorf(0, nil, "bad magic number %#08x: not an IDX file (want 0x0000%02x%02x)", binary.BigEndian.Uint32(hdr[:]), idxUbyte, rank)
	}
	if hdr[2] != idxUbyte {
		return r, f.errorf(2, nil, "element type %#02x, want %#02x (unsigned byte)", hdr[2], idxUbyte)
	}
	if int(hdr[3]) != rank {
		return r, f.errorf(3, nil, "%d dimensions, want %d", hdr[3], rank)
	}
	r.total = 1
	r.dims = make([]int, rank)
	for i := range r.dims {
		at := f.off
		if err := f.readFull(hdr[:], fmt.Sprintf("dimension %d", i)); err != nil {
			return r, err
		}
		d := int64(binary.BigEndian.Uint32(hdr[:]))
		limit := int64(maxIDXSide)
		if i == 0 {
			limit = maxIDXItems
		}
		if d == 0 || d > limit {
			return r, f.errorf(at, nil, "dimension %d is %d (want 1 to %d)", i, d, limit)
		}
		r.dims[i] = int(d)
		r.total *= d
	}
	// The data becomes float32 tensors (4 bytes an element) beside the
	// bytes read: a header may not promise more than the machine holds.
	if limit := min(int64(maxIDXBytes), tensor.HostLimit()/5); r.total > limit {
		return r, f.errorf(4, nil, "dimensions %v promise %d data bytes, more than the %d this reader accepts", r.dims, r.total, limit)
	}
	return r, nil
}

// Close closes the file.
func (r *idxReader) Close() {
	if r.zr != nil {
		r.zr.Close()
	}
	r.fh.Close()
}

// data reads the data bytes the header promises, no more: the buffer
// grows as data arrives, so a truncated file claiming gigabytes costs
// what it holds. The whole stream is read, so trailing data (after the
// data, or after the gzip member) and gzip checksum errors are caught.
func (r *idxReader) data() ([]byte, error) {
	f := &r.idxFile
	start := f.off
	buf := bytes.NewBuffer(make([]byte, 0, min(r.total, 1<<20)))
	n, err := io.CopyN(buf, f.r, r.total)
	f.off += n
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, f.errorf(f.off, nil, "truncated: header at offset 4 promises %d data bytes from offset %d, file ends after %d", r.total, start, n)
		}
		return nil, f.errorf(f.off, err, "reading data")
	}
	var one [1]byte
	switch m, err := f.r.Read(one[:]); {
	case m > 0:
		return nil, f.errorf(f.off, nil, "trailing bytes after the %d data bytes the header promises", r.total)
	case err != nil && !errors.Is(err, io.EOF):
		return nil, f.errorf(f.off, err, "reading past the data")
	}
	if r.zr != nil {
		// The gzip member ended (its checksum checked); nothing may follow
		// it in the file.
		if _, err := r.br.Peek(1); err == nil {
			return nil, f.errorf(f.off, nil, "trailing data after the gzip stream (a second gzip member or garbage)")
		} else if !errors.Is(err, io.EOF) {
			return nil, f.errorf(f.off, err, "reading past the gzip stream")
		}
	}
	return buf.Bytes(), nil
}

// OpenIDX reads an image-classification set from a pair of IDX files of
// unsigned bytes (raw or gzip-compressed): images [N, H, W] and labels
// [N], every label in [0, classes). Pixels p become (p/255 − Mean)/Std
// with norm; the result has one channel. A malformed file is a
// *FormatError; OpenIDX never panics.
func OpenIDX(name, imagesPath, labelsPath string, classes int, norm Normalization) (*TensorDataset, error) {
	return openIDXSized(name, imagesPath, labelsPath, classes, norm, idxShape{})
}

// idxShape is what a known data set's files must hold, checked from the
// headers before any data is read: images of H×W and at most MaxN
// samples (each check skipped when 0).
type idxShape struct{ H, W, MaxN int }

// openIDXSized is OpenIDX with the checks of want.
func openIDXSized(name, imagesPath, labelsPath string, classes int, norm Normalization, want idxShape) (ds *TensorDataset, err error) {
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
	return openIDXSet(name, imagesPath, labelsPath, classes, norm, want)
}

// openIDXSet reads and checks both headers (sizes, want, matching
// counts) before any data.
func openIDXSet(name, imagesPath, labelsPath string, classes int, norm Normalization, want idxShape) (*TensorDataset, error) {
	ir, err := openIDX(imagesPath, 3)
	if err != nil {
		return nil, err
	}
	defer ir.Close()
	lr, err := openIDX(labelsPath, 1)
	if err != nil {
		return nil, err
	}
	defer lr.Close()
	idims, ldims, gz := ir.dims, lr.dims, lr.gz
	if want.H > 0 && (idims[1] != want.H || idims[2] != want.W) {
		return nil, ir.errorf(8, nil, "images are %d×%d, %s's are %d×%d", idims[1], idims[2], name, want.H, want.W)
	}
	if want.MaxN > 0 && idims[0] > want.MaxN {
		return nil, ir.errorf(4, nil, "%d images, %s has at most %d", idims[0], name, want.MaxN)
	}
	if idims[0] != ldims[0] {
		return nil, &FormatError{File: labelsPath, Offset: 4, Compressed: gz, Msg: fmt.Sprintf("%d labels for the %d images of %s", ldims[0], idims[0], imagesPath)}
	}
	pix, err := ir.data()
	if err != nil {
		return nil, err
	}
	labs, err := lr.data()
	if err != nil {
		return nil, err
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
