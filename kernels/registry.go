package kernels

import (
	"fmt"
	"sync"

	"github.com/esper-go/esper/tensor"
)

var (
	regMu    sync.RWMutex
	registry = map[tensor.DeviceKind]Backend{}
)

// Register makes b the backend for its device kind. Backends register
// themselves when their package is imported (kernels/cpu always is, by
// autograd), the way image decoders and database drivers do.
func Register(b Backend) {
	regMu.Lock()
	defer regMu.Unlock()
	registry[b.Device().Kind] = b
}

// Lookup returns the backend of d's kind.
func Lookup(d tensor.Device) (Backend, error) {
	regMu.RLock()
	defer regMu.RUnlock()
	b, ok := registry[d.Kind]
	if !ok {
		return nil, fmt.Errorf("kernels: no backend registered for device %v", d)
	}
	return b, nil
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
