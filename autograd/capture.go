package autograd

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// StepFunc is a whole step — forward, backward and optimizer — over its
// inputs. It returns the tensors the caller wants back (a loss, metrics).
//
// To be capturable a StepFunc must do all its work through tensor ops:
// it must not read tensor values on the host (Item, At, F32) and must not
// change Go state the next step depends on, because a replay runs the
// recorded launches only, not the Go code. See capture_footguns_test.go.
type StepFunc func(inputs []*tensor.Tensor) []*tensor.Tensor

// GuardPolicy says what Run does when the inputs do not match any
// captured graph.
type GuardPolicy uint8

const (
	// Recapture warms up and captures a new graph for the new guard key,
	// keeping at most CacheSize graphs (least recently used evicted).
	Recapture GuardPolicy = iota
	// FailOnMismatch returns a *GuardError once a graph exists.
	FailOnMismatch
)

// CaptureOptions configures Capture. The zero value warms up once,
// re-captures on mismatch and caches up to 8 graphs.
type CaptureOptions struct {
	// Warmup is the number of eager calls per guard key before capture
	// (default 1; PyTorch warms up on a side stream for the same reason:
	// lazily created state such as optimizer buffers must exist first).
	Warmup int
	// Policy chooses between re-capturing and failing on a mismatch.
	Policy GuardPolicy
	// CacheSize bounds the number of captured graphs (default 8).
	CacheSize int
	// Version returns the parameter-set version (optim.Arena.Version);
	// a change invalidates the guard. Nil means "never changes".
	Version func() uint64
	// OnFallback is called once when capture fails and the step falls
	// back to eager execution for that guard key (telemetry hook).
	OnFallback func(err error)
	// BoundInputs, when positive, lets replays read their inputs in
	// place. An input set passed again by identity — the same tensor
	// storage, offset, shape and strides for every input as in one of
	// the recent calls under the same parameter version, such as the
	// fixed batch views of a dataset that stays on the device — once its
	// signature has been warmed up, gets a graph of its own captured
	// over those very tensors instead of static buffers, whose replays
	// copy nothing: each sees what the tensors hold when it runs.
	// Up to BoundInputs such graphs are kept beside the CacheSize others,
	// each keeping its tensors' memory alive; once that many exist for
	// the current parameter version, further input sets take the copying
	// path (no graph is evicted for another: cycling through more sets
	// than BoundInputs would capture on every call). Inputs that are new
	// tensors every call never match and take the copying path.
	BoundInputs int
}

// GuardError reports inputs that match no captured graph under
// FailOnMismatch.
type GuardError struct {
	Want, Got string
}

func (e *GuardError) Error() string {
	return fmt.Sprintf("autograd: captured step guard mismatch: captured for %s, called with %s", e.Want, e.Got)
}

// ErrCaptureFailed wraps the reason a capture fell back to eager.
var ErrCaptureFailed = errors.New("autograd: capture failed, running eagerly")

// Captured is a step under capture/replay: eager warm-up calls, one
// capture, then replays. Create it with Capture.
//
// Replays reuse static buffers: Run copies the inputs into the buffers
// captured with the graph, replays the launches, and returns the SAME
// output tensors every time, overwritten by each replay. Copy an output
// (Clone) to keep it past the next Run.
//
// The input copies can be avoided explicitly: Inputs returns the static
// input buffers themselves, and Run copies nothing into a buffer that is
// passed as its own input. A caller that writes each step's data straight
// into them (or whose data never changes) saves one copy per input per
// replay; see Inputs for the rules.
type Captured struct {
	step  StepFunc
	opt   CaptureOptions
	cache []*entry // most recently used first
	bound []*entry // graphs over bound inputs, most recently used first
	last  *entry
	// recent are the identity hashes of the latest input sets that took
	// the copying path (BoundInputs): one seen again gets bound.
	recent     [recentInputs]uint64
	recentNext int
	// Stats for telemetry.
	captures, replays, eagerCalls int
	captureTime                   time.Duration
}

// recentInputs is how many input identities Run remembers for binding.
const recentInputs = 32

type entry struct {
	sig      signature
	bound    bool // inputs are the caller's tensors, read in place
	calls    int
	graph    kernels.Graph
	backend  kernels.Backend
	inputs   []*tensor.Tensor // static input buffers
	outputs  []*tensor.Tensor // static outputs
	fallback bool
}

type signature struct {
	version uint64
	dtypes  []tensor.DType
	devs    []tensor.Device
	shapes  [][]int
}

// Capture wraps step for capture and replay.
func Capture(step StepFunc, opt CaptureOptions) *Captured {
	if opt.Warmup <= 0 {
		opt.Warmup = 1
	}
	if opt.CacheSize <= 0 {
		opt.CacheSize = 8
	}
	return &Captured{step: step, opt: opt}
}

// CaptureStats counts what Run has done.
type CaptureStats struct {
	Captures, Replays, EagerCalls, CachedGraphs int
	// BoundGraphs are the cached graphs over bound inputs (BoundInputs),
	// counted in CachedGraphs too.
	BoundGraphs int
	// CaptureTime is the wall time spent capturing (recording steps into
	// graphs, failed attempts included), not the warm-up's eager calls
	// nor the replays.
	CaptureTime time.Duration
}

// Stats returns the counters.
func (c *Captured) Stats() CaptureStats {
	return CaptureStats{Captures: c.captures, Replays: c.replays, EagerCalls: c.eagerCalls, CachedGraphs: len(c.cache) + len(c.bound),
		BoundGraphs: len(c.bound), CaptureTime: c.captureTime}
}

// Close frees every graph c holds now (those whose backend's graphs are
// kernels.GraphCloser: CUDA's driver graphs), instead of when the Go
// collector finds them, and empties c's caches: a later Run warms up and
// captures again. Call it once c's step will not run for a while (a
// trainer done with its model). On CUDA a graph's device memory then
// goes back to the allocator's cache as soon as the collector has freed
// the tensors that held it, not only once it has also found the graph.
// The figures (Stats) stay. It returns the first error a graph's Close
// gave; every graph is dropped all the same.
func (c *Captured) Close() error {
	var first error
	for _, list := range [][]*entry{c.cache, c.bound} {
		for _, e := range list {
			if gc, ok := e.graph.(kernels.GraphCloser); ok {
				if err := gc.Close(); err != nil && first == nil {
					first = fmt.Errorf("autograd: closing a captured graph: %w", err)
				}
			}
			e.graph = nil
		}
	}
	c.cache, c.bound, c.last = nil, nil, nil
	c.recent, c.recentNext = [recentInputs]uint64{}, 0
	return first
}

// Launches returns the number of launches of the most recently used
// graph (0 when none).
func (c *Captured) Launches() int {
	if c.last == nil || c.last.graph == nil {
		return 0
	}
	return c.last.graph.Len()
}

// ReplayLast replays the most recently used graph once more, on its
// inputs as they stand (nothing is copied into them), overwriting the
// outputs Run last returned: a benchmark's way to time the device's
// share of a step, without the host's. An error when no graph has run
// yet (the warm-up, or a step that fell back to eager execution), or
// when the parameter version (CaptureOptions.Version) changed since it
// ran.
func (c *Captured) ReplayLast() error {
	if c.last == nil || c.last.graph == nil {
		return errors.New("autograd: ReplayLast: no captured graph has run yet")
	}
	if v := c.version(); v != c.last.sig.version {
		// The parameters moved (Version changed): the graph would read
		// where they were.
		return fmt.Errorf("autograd: ReplayLast: the parameter version changed (%d → %d) since the graph last ran", c.last.sig.version, v)
	}
	c.last.graph.Replay()
	c.replays++
	return nil
}

// Inputs returns the static input buffers of the most recently used
// graph, in the order of Run's inputs, or nil when there is none yet
// (before the call that captures it, or when that capture fell back to
// eager). The slice is a fresh copy; the tensors are the graph's own (a
// graph over bound inputs, CaptureOptions.BoundInputs, returns the
// caller's tensors it reads in place).
//
// Run copies each input into its static buffer before a replay unless
// the input IS that buffer, so passing these tensors back to Run
// (Run(c.Inputs()...), or a kept slice of them) replays without any
// input copy. They hold whatever was last copied or written into them:
// the inputs of the capture call, or of the last Run that copied, until
// the caller overwrites them. This is the explicit way to skip the
// copies; Run never skips a copy on its own, since a caller may have
// written new data into the same input tensor since the previous call.
//
// Rules for writing into them: keep their shape, dtype and storage
// (write their elements — tensor.CopyInto on the CPU, a backend Copy or
// a staged host copy on a device — never replace or Free them); on a
// device, order the write on the backend's stream before the next Run and
// after the replay that last read them (kernels.Backend operations are
// ordered so already; a copy on another stream, such as a cuda.Stager's,
// must be ordered with events: Stager.Release and Await); and remember that a step which writes into its
// inputs now writes into these buffers, which Run no longer refreshes.
// Passing them to Run is always correct, also after the guard changed:
// under another graph (a new parameter version, say) they are ordinary
// inputs, copied like any other.
func (c *Captured) Inputs() []*tensor.Tensor {
	if c.last == nil || c.last.graph == nil {
		return nil
	}
	return append([]*tensor.Tensor(nil), c.last.inputs...)
}

func (c *Captured) version() uint64 {
	if c.opt.Version == nil {
		return 0
	}
	return c.opt.Version()
}

// matches compares inputs with a signature without allocating.
func (s *signature) matches(v uint64, in []*tensor.Tensor) bool {
	if s.version != v || len(s.dtypes) != len(in) {
		return false
	}
	for i, t := range in {
		if t.DType() != s.dtypes[i] || t.Device() != s.devs[i] || !tensor.SameShape(t.Shape(), s.shapes[i]) {
			return false
		}
	}
	return true
}

func newSignature(v uint64, in []*tensor.Tensor) signature {
	s := signature{version: v}
	for _, t := range in {
		s.dtypes = append(s.dtypes, t.DType())
		s.devs = append(s.devs, t.Device())
		s.shapes = append(s.shapes, append([]int(nil), t.Shape()...))
	}
	return s
}

func (s *signature) String() string {
	parts := make([]string, len(s.dtypes))
	for i := range s.dtypes {
		parts[i] = fmt.Sprintf("%v%v@%v", s.dtypes[i], s.shapes[i], s.devs[i])
	}
	return fmt.Sprintf("(%s; params v%d)", strings.Join(parts, ", "), s.version)
}

// Run executes one step: eagerly during warm-up, captured on the call
// after warm-up (the graph is then replayed once to produce this call's
// outputs), replayed afterwards. A replay of a matching step allocates
// nothing, provided the caller passes a slice it keeps (Run(in...)):
// Go builds a fresh slice for a literal argument list on every call.
func (c *Captured) Run(inputs ...*tensor.Tensor) ([]*tensor.Tensor, error) {
	v := c.version()
	e := c.last
	if e == nil || !e.matches(v, inputs) || (!e.bound && c.opt.BoundInputs > 0) {
		var err error
		if e, err = c.lookup(v, inputs); err != nil {
			return nil, err
		}
	}
	e.calls++
	switch {
	case e.fallback || e.calls <= c.opt.Warmup:
		c.eagerCalls++
		return c.step(inputs), nil
	case e.graph == nil:
		start := time.Now()
		err := c.capture(e, inputs)
		c.captureTime += time.Since(start)
		if err != nil {
			e.fallback = true
			if c.opt.OnFallback != nil {
				c.opt.OnFallback(err)
			}
			c.eagerCalls++
			return c.step(inputs), nil
		}
		c.captures++
		fallthrough
	default:
		for i, t := range inputs {
			if !e.bound && t != e.inputs[i] { // else the graph reads t, or the caller filled the buffer itself (Inputs)
				copyStatic(e.backend, e.inputs[i], t)
			}
		}
		e.graph.Replay()
		c.replays++
		return e.outputs, nil
	}
}

// matches reports whether e serves inputs under version v: the
// signature, and for a bound entry the inputs' identity.
func (e *entry) matches(v uint64, inputs []*tensor.Tensor) bool {
	if !e.sig.matches(v, inputs) {
		return false
	}
	if !e.bound {
		return true
	}
	for i, t := range inputs {
		if !sameView(t, e.inputs[i]) {
			return false
		}
	}
	return true
}

// sameView reports whether a and b are the same view of one storage
// (the shapes are compared by the signature).
func sameView(a, b *tensor.Tensor) bool {
	if a == b {
		return true
	}
	// Strides are compared as a shape is (the same []int comparison).
	return a.Storage() == b.Storage() && a.Offset() == b.Offset() && tensor.SameShape(a.Strides(), b.Strides())
}

// identity hashes the parameter version and the inputs' storages,
// offsets, shapes and strides (without allocating).
func identity(version uint64, inputs []*tensor.Tensor) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		h ^= v
		h *= 1099511628211
	}
	mix(version)
	for _, t := range inputs {
		mix(uint64(uintptr(unsafe.Pointer(t.Storage()))))
		mix(uint64(t.Offset()))
		for _, d := range t.Shape() {
			mix(uint64(d))
		}
		for _, d := range t.Strides() {
			mix(uint64(d) + 1<<32)
		}
	}
	return h
}

// lookupBound finds the bound entry for inputs, or makes one when they
// were seen recently (BoundInputs); ok false sends them to the copying
// path, after remembering them.
func (c *Captured) lookupBound(v uint64, inputs []*tensor.Tensor) (e *entry, ok bool) {
	for i, e := range c.bound {
		if e.matches(v, inputs) {
			copy(c.bound[1:i+1], c.bound[:i])
			c.bound[0] = e
			c.last = e
			return e, true
		}
	}
	id := identity(v, inputs)
	seen := false
	for _, r := range c.recent {
		seen = seen || (r == id && id != 0)
	}
	if !seen {
		c.recent[c.recentNext] = id
		c.recentNext = (c.recentNext + 1) % recentInputs
		return nil, false
	}
	if len(c.bound) >= c.opt.BoundInputs {
		// Full: drop the graphs of an older parameter version; if none,
		// copy rather than evict a live graph (more input sets than
		// BoundInputs would otherwise capture on every call).
		live := c.bound[:0]
		for _, b := range c.bound {
			if b.sig.version == v {
				live = append(live, b)
			}
		}
		clear(c.bound[len(live):])
		c.bound = live
		if len(c.bound) >= c.opt.BoundInputs {
			return nil, false
		}
	}
	// Bind only once the copying path has warmed this signature up (the
	// lazily made state exists), so that the bound graph is captured at
	// once and binding never delays a capture.
	warm := false
	for _, u := range c.cache {
		warm = warm || (u.sig.matches(v, inputs) && u.calls >= c.opt.Warmup)
	}
	if !warm {
		return nil, false
	}
	e = &entry{sig: newSignature(v, inputs), bound: true, inputs: append([]*tensor.Tensor(nil), inputs...), calls: c.opt.Warmup}
	c.bound = append([]*entry{e}, c.bound...)
	c.last = e
	return e, true
}

// lookup finds or creates the cache entry for the inputs.
func (c *Captured) lookup(v uint64, inputs []*tensor.Tensor) (*entry, error) {
	if c.opt.BoundInputs > 0 {
		if e, ok := c.lookupBound(v, inputs); ok {
			return e, nil
		}
	}
	for i, e := range c.cache {
		if e.sig.matches(v, inputs) {
			copy(c.cache[1:i+1], c.cache[:i])
			c.cache[0] = e
			c.last = e
			return e, nil
		}
	}
	sig := newSignature(v, inputs)
	if c.opt.Policy == FailOnMismatch && len(c.cache) > 0 && c.cache[0].graph != nil {
		return nil, &GuardError{Want: c.cache[0].sig.String(), Got: sig.String()}
	}
	e := &entry{sig: sig}
	c.cache = append([]*entry{e}, c.cache...)
	if len(c.cache) > c.opt.CacheSize {
		c.cache = c.cache[:c.opt.CacheSize]
	}
	c.last = e
	return e, nil
}

// capture records the step over fresh static input buffers.
func (c *Captured) capture(e *entry, inputs []*tensor.Tensor) (err error) {
	if len(inputs) == 0 {
		return fmt.Errorf("%w: a captured step needs at least one input tensor (to pick the device)", ErrCaptureFailed)
	}
	b, err := kernels.Lookup(inputs[0].Device())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCaptureFailed, err)
	}
	e.backend = b
	if !e.bound {
		e.inputs = make([]*tensor.Tensor, len(inputs))
		for i, t := range inputs {
			e.inputs[i] = tensor.EmptyLike(t)
			b.Copy(e.inputs[i], t)
		}
	}
	if err := b.BeginCapture(); err != nil {
		return fmt.Errorf("%w: %v", ErrCaptureFailed, err)
	}
	defer func() {
		if r := recover(); r != nil {
			_, _ = b.EndCapture()
			err = fmt.Errorf("%w: step panicked during capture: %v", ErrCaptureFailed, r)
		}
	}()
	outs := c.step(e.inputs)
	g, err := b.EndCapture()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCaptureFailed, err)
	}
	e.graph, e.outputs = g, outs
	return nil
}

// copyStatic copies an input into its static buffer; contiguous CPU
// tensors of the same dtype take an allocation-free byte copy.
func copyStatic(b kernels.Backend, dst, src *tensor.Tensor) {
	if dst.Device().IsCPU() && src.Device().IsCPU() && dst.DType() == src.DType() && src.IsContiguous() {
		tensor.CopyInto(dst, src)
		return
	}
	b.Copy(dst, src)
}
