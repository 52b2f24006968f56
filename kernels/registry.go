package kernels

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/esper-go/esper/tensor"
)

var (
	regMu sync.Mutex
	// registry maps a device kind to its backend. Register replaces the
	// whole table, so that Lookup, called by every eager op, reads it
	// without a lock.
	registry atomic.Pointer[[256]Backend]
)

// Register makes b the backend for its device kind (one per kind). The
// CPU backend registers itself when kernels/cpu is imported (it always
// is, by autograd), the way image decoders and database drivers do;
// other devices are opened by name with kernels/device.Open ("cuda",
// "cuda:1"), which registers the backend it opens.
func Register(b Backend) {
	regMu.Lock()
	defer regMu.Unlock()
	var next [256]Backend
	if cur := registry.Load(); cur != nil {
		next = *cur
	}
	next[b.Device().Kind] = b
	registry.Store(&next)
}

// Lookup returns the backend of d's kind.
func Lookup(d tensor.Device) (Backend, error) {
	if reg := registry.Load(); reg != nil {
		if b := reg[d.Kind]; b != nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("kernels: no backend registered for device %v", d)
}

// For returns the backend of d's kind and panics when there is none (a
// tensor on an unregistered device cannot exist without one).
func For(d tensor.Device) Backend {
	b, err := Lookup(d)
	if err != nil {
		panic(err)
	}
	return b
}
