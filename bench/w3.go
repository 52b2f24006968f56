package bench

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kasmina/blueprint"
	"github.com/esper-go/esper/tensor"
)

// W3Options configures the W3 "kasmina-germinate" workload (PERF.md):
// Requests germinations of Blueprint at Channels channels, Concurrency of
// them in flight at once. Zero values give the PERF.md definition.
type W3Options struct {
	Requests    int    // total germinations (default 256)
	Concurrency int    // workers germinating at once (default 4)
	Channels    int    // width of the slot (default 32)
	Blueprint   string // default "conv_light"
	Warmup      int    // unmeasured germinations per worker (default 4)
	Seed        uint64
	// Progress, when set, is called after each measured request with the
	// number done so far.
	Progress func(done, total int)
}

// W3Result is what RunW3 measured. Latency is per request, from the call
// to the slot until the seed is registered (its parameters are in the
// model's ownership registry and seed masks).
type W3Result struct {
	Requests      int     `json:"requests"`
	Concurrency   int     `json:"concurrency"`
	Blueprint     string  `json:"blueprint"`
	Channels      int     `json:"channels"`
	SeedParams    int     `json:"seed_params"`
	Latency       Latency `json:"latency"`
	WallSeconds   float64 `json:"wall_seconds"`
	PerSecond     float64 `json:"germinations_per_second"`
	AllocsPerReq  float64 `json:"allocs_per_request"`
	BytesPerReq   float64 `json:"bytes_per_request"`
	LifecycleNote string  `json:"lifecycle_note"`
}

// w3Worker is one germination lane: a MorphogeneticModel whose host has a
// slot of the requested width, germinated and cleared over and over.
type w3Worker struct {
	model *kasmina.MorphogeneticModel
	slot  string
}

func newW3Worker(o W3Options, seed uint64) (*w3Worker, error) {
	host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{
		InChannels: 1, Blocks: 2, BaseChannels: o.Channels, RNG: tensor.NewRNG(seed),
	})
	if err != nil {
		return nil, err
	}
	m, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0"}})
	if err != nil {
		return nil, err
	}
	return &w3Worker{model: m, slot: "r0c0"}, nil
}

// germinate is one timed request: build + init + probe inside Germinate,
// then registration in the ownership registry.
func (w *w3Worker) germinate(o W3Options, id int) (params int, err error) {
	if err := w.model.GerminateSeed(w.slot, kasmina.GerminateOptions{
		Blueprint: o.Blueprint,
		SeedID:    fmt.Sprintf("w3-%d", id),
		RNG:       tensor.NewRNG(o.Seed + uint64(id)),
	}); err != nil {
		return 0, err
	}
	masks := w.model.SeedMasks()
	mask, ok := masks[fmt.Sprintf("w3-%d", id)]
	if !ok {
		return 0, errors.New("bench: W3 seed missing from the seed masks")
	}
	tensors := 0
	for _, b := range mask {
		if b {
			tensors++
		}
	}
	if tensors == 0 {
		return 0, errors.New("bench: W3 seed owns no parameters in the registry")
	}
	s, _ := w.model.Slot(w.slot)
	return blueprint.ParamCount(s.Seed()), nil
}

// clear empties the slot again, untimed: prune, then the seven epoch
// ticks of embargo and reset.
func (w *w3Worker) clear() error {
	if _, err := w.model.PruneSeed(w.slot, "w3_reset", "policy"); err != nil {
		return err
	}
	s, _ := w.model.Slot(w.slot)
	for i := 0; i < 16 && s.State() != nil; i++ {
		w.model.StepEpoch()
	}
	if s.State() != nil {
		return errors.New("bench: W3 slot did not return to empty after prune")
	}
	return nil
}

// RunW3 runs the W3 germination workload.
func RunW3(o W3Options) (W3Result, error) {
	if o.Requests == 0 {
		o.Requests = 256
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.Channels == 0 {
		o.Channels = 32
	}
	if o.Blueprint == "" {
		o.Blueprint = "conv_light"
	}
	if o.Warmup == 0 {
		o.Warmup = 4
	}
	if o.Requests < 0 || o.Concurrency < 0 || o.Channels < 0 || o.Warmup < 0 {
		return W3Result{}, fmt.Errorf("bench: W3 options must not be negative: %+v", o)
	}
	workers := make([]*w3Worker, o.Concurrency)
	for i := range workers {
		w, err := newW3Worker(o, o.Seed+uint64(1000*i))
		if err != nil {
			return W3Result{}, err
		}
		workers[i] = w
		for j := 0; j < o.Warmup; j++ {
			if _, err := w.germinate(o, -1-j); err != nil {
				return W3Result{}, err
			}
			if err := w.clear(); err != nil {
				return W3Result{}, err
			}
		}
	}

	lat := make([]time.Duration, o.Requests)
	params := make([]int, o.Requests)
	next := make(chan int)
	var (
		mu      sync.Mutex
		firstEr error
		done    int
		wg      sync.WaitGroup
		// The per-request allocation figures count what every worker
		// allocated, including the untimed clear.
		ms0, ms1 runtime.MemStats
	)
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				t0 := time.Now()
				p, err := w.germinate(o, id)
				lat[id] = time.Since(t0)
				params[id] = p
				if err == nil {
					err = w.clear()
				}
				mu.Lock()
				if err != nil && firstEr == nil {
					firstEr = err
				}
				done++
				if o.Progress != nil {
					o.Progress(done, o.Requests)
				}
				mu.Unlock()
			}
		}()
	}
	for id := 0; id < o.Requests; id++ {
		next <- id
	}
	close(next)
	wg.Wait()
	wall := time.Since(start)
	runtime.ReadMemStats(&ms1)
	if firstEr != nil {
		return W3Result{}, firstEr
	}
	return W3Result{
		Requests:      o.Requests,
		Concurrency:   o.Concurrency,
		Blueprint:     o.Blueprint,
		Channels:      o.Channels,
		SeedParams:    params[0],
		Latency:       Summarise(lat),
		WallSeconds:   wall.Seconds(),
		PerSecond:     float64(o.Requests) / wall.Seconds(),
		AllocsPerReq:  float64(ms1.Mallocs-ms0.Mallocs) / float64(o.Requests),
		BytesPerReq:   float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(o.Requests),
		LifecycleNote: "timed: Germinate (blueprint build, init, shape probe, G0) + ownership registration; untimed: prune and 7 epoch ticks back to an empty slot",
	}, nil
}
