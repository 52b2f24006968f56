package tamiyo

import (
	"sync"
	"unsafe"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Pinned uploads: an Inference copies its staged graph into its kept
// device buffers through a kernels.Stager where the device's backend has
// one (CUDA): each buffer's bytes go into a page-locked buffer and from
// there to the device asynchronously — on the device's own stream where
// the Stager copies inline (kernels.InlineStager), else on a copy stream
// that the device's stream waits for — so the host does not wait for the
// device before the forward's replay, as a synchronous copy from
// pageable memory does. Where the backend has no
// Stager, or it fails, the copies are synchronous (and ordered on the
// device's stream), as before.
//
// One Stager serves each device for the life of the process (devicePin):
// it is never closed, so no driver call frees pinned memory from a
// collector's goroutine while another goroutine captures a graph; it is
// made, or replaced by a larger one, only while no capture runs on the
// device (else that call copies synchronously).
//
// Ordering: a copy into a kept buffer must come after the forwards that
// read it. Where the Stager copies on the device's own stream
// (kernels.InlineStager: CUDA), the stream's order sees to it, and a
// forward's copy costs three driver calls. Else each forward releases
// every kept buffer it used once its work is enqueued (Stager.Release:
// the next copy into the buffer waits, on the copy stream, for that
// work), failed forwards included. A Forward also ends by reading its
// outputs back, which waits for the device.

// devicePin is a device's Stager, shared by every Inference on it.
type devicePin struct {
	mu     sync.Mutex
	st     kernels.Stager
	inline kernels.InlineStager // st, where it copies on the device's stream
	bytes  int
	failed bool // no Stager to be had, or one failed: copy synchronously
}

var (
	pinsMu sync.Mutex
	pins   = map[tensor.Device]*devicePin{}
)

// pinMinBytes is the smallest pinned buffer a devicePin makes (two of
// them): a batch-64 policy graph's largest buffer is about 70 KB.
var pinMinBytes = 1 << 20

// stagersFor returns dev's backend as a kernels.Stagers (a variable for
// the tests, which stand one in for sim).
var stagersFor = func(dev tensor.Device) (kernels.Stagers, bool) {
	s, ok := kernels.For(dev).(kernels.Stagers)
	return s, ok
}

// pinFor returns dev's devicePin.
func pinFor(dev tensor.Device) *devicePin {
	pinsMu.Lock()
	defer pinsMu.Unlock()
	p := pins[dev]
	if p == nil {
		p = &devicePin{}
		pins[dev] = p
	}
	return p
}

// pinnedUpload is one Inference's use of its device's Stager: the kept
// buffers the running forward used, released when it is enqueued.
type pinnedUpload struct {
	dev  tensor.Device
	pin  *devicePin // dev's (pinFor), once looked up
	used []*tensor.Tensor
	// last are the kept buffers the latest forward used, released again
	// after a replay of its graph (releaseLast).
	last []*tensor.Tensor
}

// devPin returns u.dev's devicePin.
func (u *pinnedUpload) devPin() *devicePin {
	if u.pin == nil {
		u.pin = pinFor(u.dev)
	}
	return u.pin
}

// reserve makes sure dev's Stager holds n bytes a buffer (pinMinBytes at
// least, twice the old size when it grows) and reports whether there is
// one. Growing waits for the device first (one host sync: the copies
// queued on the old Stager and the forwards their buffers wait for), so
// that no mark of the old one is lost; it, and the first Stager, are
// made only while no capture runs on the device.
func (p *devicePin) reserve(dev tensor.Device, n int) bool {
	if p.failed {
		return false
	}
	if p.st != nil && n <= p.bytes {
		return true
	}
	ss, ok := stagersFor(dev)
	if !ok {
		p.failed = true
		return false
	}
	be := kernels.For(dev)
	if be.Capturing() {
		return false // not now: this call copies synchronously
	}
	if p.st != nil {
		if err := be.Synchronize(); err != nil {
			p.failed = true
			return false
		}
		_ = p.st.Close()
		p.st, p.inline = nil, nil
	}
	n = max(n, 2*p.bytes, pinMinBytes)
	st, err := ss.NewStager(2, n)
	if err != nil {
		p.failed = true // pinned memory refused: copy as before
		return false
	}
	p.st, p.bytes = st, n
	p.inline, _ = st.(kernels.InlineStager)
	return true
}

// stage copies raw (buf's bytes) into buf, a kept device buffer, through
// the device's Stager and reports whether it did; false (nothing done)
// where u is nil, raw is nil or there is no Stager.
func (u *pinnedUpload) stage(buf *tensor.Tensor, raw []byte) bool {
	if u == nil || raw == nil {
		return false
	}
	p := u.devPin()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reserve(u.dev, len(raw)) {
		return false
	}
	var err error
	if p.inline != nil {
		err = p.inline.StageInline(buf, raw)
	} else {
		err = p.st.Stage(buf, raw)
	}
	if err != nil {
		p.failed = true // copy synchronously from now on
		return false
	}
	return true
}

// reserve makes the device's Stager (if it has one) hold n bytes a
// buffer: one growth for a call's largest buffer, not one per buffer
// outgrowing the last.
func (u *pinnedUpload) reserve(n int) {
	if u == nil {
		return
	}
	p := u.devPin()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reserve(u.dev, n)
}

// use records a kept buffer the running forward uses.
func (u *pinnedUpload) use(buf *tensor.Tensor) {
	if u != nil {
		u.used = append(u.used, buf)
	}
}

// release marks the work enqueued so far as the last reader of every
// kept buffer the forward used (where the device has a Stager), and
// keeps their list for releaseLast.
func (u *pinnedUpload) release() {
	if u == nil {
		return
	}
	clear(u.last)
	u.used, u.last = u.last[:0], u.used
	u.mark(u.last)
}

// releaseLast marks the work enqueued so far as the last reader of the
// kept buffers the latest forward used: after Inference.ReplayLast has
// queued its graph again, so that the next forward's copies into them
// wait for the replay too.
func (u *pinnedUpload) releaseLast() {
	if u != nil {
		u.mark(u.last)
	}
}

// mark records the work enqueued so far as the last reader of bufs on
// the device's Stager, if it has one and copies on a stream of its own
// (an InlineStager's copies are ordered by the device's stream).
func (u *pinnedUpload) mark(bufs []*tensor.Tensor) {
	if len(bufs) == 0 {
		return
	}
	p := u.devPin()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == nil || p.failed || p.inline != nil {
		return
	}
	for _, b := range bufs {
		if err := p.st.Release(b); err != nil {
			p.failed = true // copy synchronously from now on
			return
		}
	}
}

// bytesOf views a slice's elements as bytes (aliased).
func bytesOf[T float32 | int64 | bool](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(z)))
}
