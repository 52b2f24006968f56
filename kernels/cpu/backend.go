package cpu

import (
	"slices"
	"sync"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// T is the tensor type the kernels work on.
type T = kernels.T

// Backend is the CPU implementation of kernels.Backend. The zero value is
// not used; call Default.
type Backend struct {
	mu  sync.Mutex
	rec *graph // non-nil while capturing
}

var def = &Backend{}

func init() { kernels.Register(def) }

// Default returns the process-wide CPU backend.
func Default() *Backend { return def }

// The backend implements kernels.Backend and the optional interfaces of
// its fused kernels (ForeachStepper is the CUDA backend's alone).
var (
	_ kernels.Backend              = (*Backend)(nil)
	_ kernels.LinearBackwardAdder  = (*Backend)(nil)
	_ kernels.LinearActLayerNormer = (*Backend)(nil)
	_ kernels.ConvAffineActer      = (*Backend)(nil)
	_ kernels.ConvAffineActPooler  = (*Backend)(nil)
	_ kernels.BatchNormReluer      = (*Backend)(nil)
	_ kernels.GroupNormReluer      = (*Backend)(nil)
	_ kernels.BatchNormReluPooler  = (*Backend)(nil)
	_ kernels.BatchNormEvalAffiner = (*Backend)(nil)
	_ kernels.GradAccumulator      = (*Backend)(nil)
	_ kernels.ChannelAxpyer        = (*Backend)(nil)
)

// Name implements kernels.Backend.
func (b *Backend) Name() string { return "cpu" }

// Device implements kernels.Backend.
func (b *Backend) Device() tensor.Device { return tensor.CPU }

// launch runs f now, or records it while a capture is in progress.
func (b *Backend) launch(f func()) {
	if r := b.rec; r != nil {
		r.launches = append(r.launches, f)
		return
	}
	f()
}

// Group runs f, and while a capture is in progress records the launches
// f makes as one launch of the graph (run in their order at each
// replay): a device's joined launch, which sim computes call by call
// with these kernels and counts as the device does (Graph.Len).
// Eagerly it runs f.
func (b *Backend) Group(f func()) {
	r := b.rec
	if r == nil {
		f()
		return
	}
	n := len(r.launches)
	f()
	if len(r.launches)-n < 2 {
		return
	}
	fs := slices.Clone(r.launches[n:])
	r.launches = append(r.launches[:n], func() {
		for _, g := range fs {
			g()
		}
	})
}

// launchScratch is launch for kernels with pooled scratch space: run
// eagerly, then release the scratch to the pools; while capturing, record
// run and keep the scratch for the graph's lifetime (release is dropped).
func (b *Backend) launchScratch(run, release func()) {
	if r := b.rec; r != nil {
		r.launches = append(r.launches, run)
		return
	}
	run()
	release()
}
