package tamiyo

import (
	"runtime"
	"unsafe"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// pinnedUpload copies an Inference's staged graph into its kept device
// buffers through a kernels.Stager where the device's backend has one
// (CUDA): each buffer's bytes go into a page-locked buffer and from
// there on a copy stream that the device's stream waits for, so the host
// does not wait for the device twice per forward before its replay, as
// a synchronous copy from pageable memory does. A buffer staged into is
// released once the forward that reads it is enqueued (release), so
// that the next copy into it waits, on the copy stream, for that
// forward. Where the backend has no Stager, or making one fails, the
// buffers are copied synchronously, as before.
type pinnedUpload struct {
	st     kernels.Stager
	bytes  int  // each pinned buffer's size
	failed bool // no Stager to be had: copy synchronously
	staged []*tensor.Tensor
}

// stagersFor returns dev's backend as a kernels.Stagers (a variable for
// the tests, which stand one in for sim).
var stagersFor = func(dev tensor.Device) (kernels.Stagers, bool) {
	s, ok := kernels.For(dev).(kernels.Stagers)
	return s, ok
}

// newPinnedUpload makes owner's upload; its Stager is closed when owner
// is collected.
func newPinnedUpload(owner *Inference) *pinnedUpload {
	u := &pinnedUpload{}
	runtime.AddCleanup(owner, func(u *pinnedUpload) { u.close() }, u)
	return u
}

// close frees the Stager's pinned buffers and copy stream.
func (u *pinnedUpload) close() {
	if u.st != nil {
		_ = u.st.Close()
		u.st = nil
	}
}

// stage copies host (a CPU tensor of buf's dtype and size) into buf, a
// device buffer, through the Stager and reports whether it did: false
// (nothing done) where u is nil, the dtype is not F32, I64 or Bool, or
// no Stager can be had.
func (u *pinnedUpload) stage(buf, host *tensor.Tensor) (bool, error) {
	if u == nil || u.failed || host.Numel() == 0 {
		return false, nil
	}
	raw := hostBytes(host)
	if raw == nil {
		return false, nil
	}
	if !u.reserve(buf.Device(), len(raw)) {
		return false, nil
	}
	if err := u.st.Stage(buf, raw); err != nil {
		return false, err
	}
	u.staged = append(u.staged, buf)
	return true, nil
}

// reserve makes sure u has a Stager on dev whose pinned buffers hold n
// bytes (a new one, twice as large, when they do not) and reports
// whether it has.
func (u *pinnedUpload) reserve(dev tensor.Device, n int) bool {
	if u == nil || u.failed {
		return false
	}
	if u.st != nil && n <= u.bytes {
		return true
	}
	u.close()
	ss, ok := stagersFor(dev)
	if !ok {
		u.failed = true
		return false
	}
	n = max(n, 2*u.bytes, 64<<10)
	st, err := ss.NewStager(2, n)
	if err != nil {
		u.failed = true // pinned memory refused: copy as before
		return false
	}
	u.st, u.bytes = st, n
	return true
}

// release marks the work enqueued so far as the last reader of every
// buffer staged since the last release.
func (u *pinnedUpload) release() error {
	if u == nil {
		return nil
	}
	defer func() {
		clear(u.staged)
		u.staged = u.staged[:0]
	}()
	for _, b := range u.staged {
		if err := u.st.Release(b); err != nil {
			return err
		}
	}
	return nil
}

// hostBytes is a contiguous CPU tensor's elements as bytes (aliased),
// for the dtypes staging builds buffers of: F32, I64 and Bool; nil for
// another.
func hostBytes(t *tensor.Tensor) []byte {
	if !t.IsContiguous() || t.Numel() == 0 {
		return nil
	}
	switch t.DType() {
	case tensor.F32:
		v := t.F32()
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	case tensor.I64:
		v := t.I64()
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
	case tensor.Bool:
		v := t.Bools()
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
	}
	return nil
}
