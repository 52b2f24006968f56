//go:build cuda

package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/tensor"
)

// ptxFiles are the kernels, compiled by `make ptx` from src/*.cu for
// compute_80 (the driver JIT-compiles them for the device at load, where
// no cubin of cubin.go's stands in).
//
//go:embed ptx/*.ptx
var ptxFiles embed.FS

// Device is one CUDA device as the backend uses it: its primary context,
// one non-blocking stream that every kernel, copy and cuBLAS call of the
// backend is ordered on, the loaded kernels and a caching allocator.
//
// Driver calls need the context current on the calling OS thread; every
// method that makes them runs between enter and its release, which pins
// the goroutine to its thread and makes the context current there.
type Device struct {
	ordinal int
	dev     cu.Device
	ctx     cu.CUContext
	stream  cu.Stream
	name    string
	sms     int
	arch    string // "sm_90" for compute capability 9.0
	// code says where the loaded kernels' machine code came from
	// (KernelCode).
	code string

	mu  sync.Mutex
	fns map[string]cu.Function

	alloc    *Allocator
	zero     cu.DevicePtr // zeroBytes of zeros, never written: ZeroMany's source
	counters cu.DevicePtr // tailCounters int32 zeros: the per-node or per-channel counters of a launch that finishes its own reduction (gat_mean_f32, batch norm's partials), left zeroed by each launch
	// joins counts the joined launches (gather_sum_join_f32,
	// gat_mean_join_f32, linear_act_ln_join_f32, relu_heads_f32): Joins.
	joins atomic.Int64
	// gatWarps counts the launches of the warp GAT kernels
	// (gat_mean_warp_f32, gat_mean_join_warp_f32: ESPER_CUDA_GAT_WARPS).
	gatWarps  atomic.Int64
	blas      *blasHandle // cuBLAS, created on first use (under mu)
	side      *sideLanes  // side streams for concurrent products, made on first use (under mu; side.go)
	capturing bool        // a stream capture is running (under mu)
	mt        mtCache     // multi-tensor tables (multi_tensor.go)
	seqMu     sync.Mutex  // a leaf: nothing is locked under it
	seq       seqState    // the block sequence (sequence.go; under seqMu)
	seqFn     cu.Function // block_seq_f32
	seqOn     atomic.Bool // a block sequence is on (seq.depth > 0)
	seqHeld   atomic.Bool // steps are held back (seq not empty)
}

// Open initialises CUDA device ordinal: retains its primary context,
// creates the backend's stream, loads every embedded kernel module and
// registers the device's memory for tensors on tensor.KindCUDA.
func Open(ordinal int) (*Device, error) {
	if err := convPathFromEnv(); err != nil {
		return nil, err
	}
	if err := switchesFromEnv(); err != nil {
		return nil, err
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: retaining its primary context: %w", ordinal, err)
	}
	d := &Device{ordinal: ordinal, dev: dev, ctx: ctx, fns: map[string]cu.Function{}}
	release := d.enter()
	defer release()
	if d.name, err = dev.Name(); err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	if d.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	major, err := dev.Attribute(cu.ComputeCapabilityMajor)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	minor, err := dev.Attribute(cu.ComputeCapabilityMinor)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	d.arch = fmt.Sprintf("sm_%d%d", major, minor)
	if d.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: device %d: creating a stream: %w", ordinal, err)
	}
	if err := d.loadModules(); err != nil {
		return nil, err
	}
	// block_seq_f32 is looked up once: the flush of a block sequence runs
	// inside enter, where callers may hold d.mu (which kernel takes).
	if d.seqFn, err = d.kernel("block_seq_f32"); err != nil {
		return nil, err
	}
	if d.zero, err = cu.MemAlloc(zeroBytes); err == nil {
		err = cu.MemsetD8(d.zero, 0, zeroBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: a block of zeros: %w", ordinal, err)
	}
	if d.counters, err = cu.MemAlloc(4 * tailCounters); err == nil {
		err = cu.MemsetD8(d.counters, 0, 4*tailCounters)
	}
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: the reductions' counters: %w", ordinal, err)
	}
	// cuMemsetD8 runs on the legacy default stream and may return before
	// it is done; d.stream is non-blocking, so nothing on it would wait
	// for the clears. Wait for them here, once.
	if err := cu.Synchronize(); err != nil {
		return nil, fmt.Errorf("cuda: device %d: clearing the zero block and the counters: %w", ordinal, err)
	}
	d.alloc = newAllocator(d)
	tensor.CountingDriverAllocs(tensor.CUDA(ordinal)) // the allocator reports its cuMemAlloc calls
	tensor.RegisterDeviceMemory(tensor.KindCUDA, memory{d})
	return d, nil
}

// Joins is the number of joined launches made so far: launches of
// gather_sum_join_f32, gat_mean_join_f32, linear_act_ln_join_f32 and
// relu_heads_f32, each running several calls' work (GatherSums,
// GATMeansAct, LinearActLayerNorms, ReluHeads). Tests of code that joins
// calls count them with it. None are made with ESPER_CUDA_JOINS=off
// (switches.go).
func (d *Device) Joins() int64 { return d.joins.Load() }

// DeviceCount is the number of CUDA devices the driver sees.
func DeviceCount() (int, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return 0, fmt.Errorf("cuda: counting devices: %w", err)
	}
	return n, nil
}

// Allocator returns the device's caching allocator.
func (d *Device) Allocator() *Allocator { return d.alloc }

// enter pins the calling goroutine to its OS thread and makes the
// device's context current there; call the returned function when done.
// It first launches the steps a block sequence holds back (sequence.go),
// so that whatever the caller puts on the stream comes after them.
func (d *Device) enter() (release func()) {
	release = d.enterQuiet()
	d.flushHeld()
	return release
}

// enterQuiet is enter without launching held-back steps: for the
// allocator, whose cuMemAlloc puts nothing on the stream and must not
// split a sequence (its paths that return memory to the driver launch
// the held-back steps first: Allocator.Alloc).
func (d *Device) enterQuiet() (release func()) {
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		runtime.UnlockOSThread()
		panic(fmt.Sprintf("cuda: making device %d's context current: %v", d.ordinal, err))
	}
	return runtime.UnlockOSThread
}

// loadModules loads every embedded kernel module and indexes its
// kernels by name (kernel names are unique across modules). A module
// loads from its cubin for the device's architecture where mkptx.sh made
// one from the embedded PTX (cubin.go; not with ESPER_CUDA_CUBIN=off),
// else from its PTX, which the driver compiles for the GPU at hand (13.7
// s for all of them, one after another, on a fresh H200 whose compute
// cache was empty). The modules load concurrently, each on a thread of
// its own with the device's context current. Where some load from PTX,
// the smallest of those loads first, alone, so that the driver has its
// JIT compiler loaded before concurrent loads ask for it (loading it
// from several threads at once has been reported to fail). A module
// whose concurrent load fails is loaded again on its own, and only that
// failure is an error; a cubin the driver refuses is not compiled from
// PTX concurrently but in that second, serial pass, from the module's
// PTX. The kernels are indexed in module order whatever the order the
// loads finish in; the first failing module, in that order, is the
// error.
func (d *Device) loadModules() error {
	names, err := fs.Glob(ptxFiles, "ptx/*.ptx")
	if err != nil {
		return err
	}
	sort.Strings(names)
	srcs := make([]string, len(names))
	images := make([][]byte, len(names))
	why := make([]string, len(names))
	sources, serr := cubinSources()
	for i, name := range names {
		b, err := ptxFiles.ReadFile(name)
		if err != nil {
			return err
		}
		srcs[i] = string(b)
		switch {
		case cubinOff.Load():
			why[i] = "ESPER_CUDA_CUBIN=off"
		case serr != nil:
			why[i] = "cubin/SOURCES: " + serr.Error()
		default:
			images[i], why[i] = cubinFor(sources, d.arch, strings.TrimSuffix(path.Base(name), ".ptx"), b)
		}
	}
	first := -1 // the smallest module to compile from PTX, if any
	for i := range names {
		if images[i] == nil && (first < 0 || len(srcs[i]) < len(srcs[first])) {
			first = i
		}
	}
	out := make([]loadedModule, len(names))
	if first >= 0 {
		if out[first] = d.loadModule(names[first], srcs[first], nil, nil); out[first].err != nil {
			return out[first].err
		}
	}
	var wg sync.WaitGroup
	for i := range names {
		if i == first {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = d.loadModule(names[i], srcs[i], images[i], nil)
		}()
	}
	wg.Wait()
	var fromCubin int
	var fromPTX []ptxModule
	for i, l := range out {
		if l.err != nil { // on its own: the PTX where the cubin was refused
			image, refused := images[i], l.cubinErr
			if refused != nil {
				image = nil
			}
			if l = d.loadModule(names[i], srcs[i], image, refused); l.err != nil {
				return l.err
			}
		}
		if l.cubinErr != nil {
			why[i] = fmt.Sprintf("the driver refused its %s cubin: %v", d.arch, l.cubinErr)
		}
		if l.fromCubin {
			fromCubin++
		} else {
			fromPTX = append(fromPTX, ptxModule{strings.TrimSuffix(path.Base(names[i]), ".ptx"), why[i]})
		}
		for j, k := range l.kernels {
			if _, dup := d.fns[k]; dup {
				return fmt.Errorf("cuda: kernel %s defined twice (second in %s)", k, names[i])
			}
			d.fns[k] = l.fns[j]
		}
	}
	d.code = codeSummary(d.arch, fromCubin, fromPTX)
	return nil
}

// KernelCode says where the device's kernels' machine code came from:
// how many modules loaded from cubins for its architecture, and which
// from PTX compiled by the driver, and why (esper bench and esper train
// print it beside the time Open took).
func (d *Device) KernelCode() string { return d.code }

// loadedModule is a loaded kernel module's kernels, or why it did not
// load.
type loadedModule struct {
	kernels   []string
	fns       []cu.Function
	fromCubin bool
	// cubinErr is why the driver refused the module's cubin (loading it,
	// or finding a kernel in it): with err set, its PTX is still to be
	// loaded; without, it was.
	cubinErr error
	err      error
}

// loadModule loads a module on the calling goroutine's thread, with the
// device's context made current there, and looks its kernels up (the
// PTX src names them): from image (a cubin for the device) when there is
// one, else from src (module name). A refused cubin is reported in
// cubinErr with err set (the caller loads the PTX later, on its own);
// refused, when not nil, is an earlier refusal of the cubin, kept in the
// result and in the error should the PTX fail too.
func (d *Device) loadModule(name, src string, image []byte, refused error) (l loadedModule) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l.cubinErr = refused
	fail := func(err error) loadedModule {
		if refused != nil {
			err = fmt.Errorf("%w (after the driver refused its %s cubin: %v)", err, d.arch, refused)
		}
		return loadedModule{cubinErr: l.cubinErr, err: err}
	}
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fail(fmt.Errorf("cuda: loading %s: %w", name, err))
	}
	code := src
	if image != nil {
		code = string(image)
	}
	mod, err := cu.LoadData(code)
	if err != nil {
		if image != nil {
			return loadedModule{cubinErr: err, err: fmt.Errorf("cuda: loading %s from its %s cubin: %w", name, d.arch, err)}
		}
		return fail(fmt.Errorf("cuda: loading %s: %w", name, err))
	}
	l.kernels = kernelNames(src)
	for _, k := range l.kernels {
		fn, err := mod.Function(k)
		if err != nil {
			if image != nil {
				return loadedModule{cubinErr: err, err: fmt.Errorf("cuda: kernel %s in the %s cubin of %s: %w", k, d.arch, name, err)}
			}
			return fail(fmt.Errorf("cuda: kernel %s in %s: %w", k, name, err))
		}
		l.fns = append(l.fns, fn)
	}
	l.fromCubin = image != nil
	return l
}

// kernel returns the loaded kernel name; a missing kernel is an error,
// never a silent CPU fallback (ARCHITECTURE.md).
func (d *Device) kernel(name string) (cu.Function, error) {
	d.mu.Lock()
	fn, ok := d.fns[name]
	d.mu.Unlock()
	if !ok {
		return cu.Function{}, fmt.Errorf("cuda: no kernel %q in the embedded PTX (run make ptx)", name)
	}
	return fn, nil
}

// launch1D launches kernel name over n elements with a grid-stride grid:
// enough blocks to fill every SM several times over, at most one thread
// per element.
func (d *Device) launch1D(name string, n int64, a *args) error {
	if n <= 0 {
		return nil
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	return launchRaw(fn, [3]int{int(grid1D(n, d.sms)), 1, 1}, [3]int{blockSize, 1, 1}, 0, d.stream, a)
}

// Synchronize waits for everything enqueued on the device's stream.
func (d *Device) Synchronize() error {
	release := d.enter()
	defer release()
	return d.stream.Synchronize()
}

// Name returns the device's name as the driver reports it.
func (d *Device) Name() string { return d.name }

// launchRows launches a row kernel: one block per row.
func (d *Device) launchRows(name string, rows int, a *args) error {
	if rows <= 0 {
		return nil
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	return launchRaw(fn, [3]int{rows, 1, 1}, [3]int{rowThreads, 1, 1}, 0, d.stream, a)
}
