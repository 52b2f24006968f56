package gpu

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

// TestNeedsEveryWorkload: every GPU workload says which optional
// interfaces of kernels it uses.
func TestNeedsEveryWorkload(t *testing.T) {
	for _, id := range gpuWorkloads {
		if _, ok := needs[id]; !ok {
			t.Errorf("needs has no entry for %s", id)
		}
	}
}

// TestInterfacesMissing: a backend without the optional interfaces a
// workload needs is one clear error naming the interface, before anything
// runs (the sim backend has none of the stream interfaces).
func TestInterfacesMissing(t *testing.T) {
	be, err := device.Open("sim")
	if err != nil {
		t.Fatal(err)
	}
	g := &gpuBench{dev: tensor.Sim(0), be: be}
	err = g.interfaces([]string{"W8"})
	if err == nil || !strings.Contains(err.Error(), "the sim backend of sim:0 has no kernels.DeviceDescriber, which W8 needs") {
		t.Fatalf("interfaces(W8) on sim: %v", err)
	}
}

// TestRunRefusesBeforeOpening: Run checks the device kind and the
// workload before it opens anything.
func TestRunRefusesBeforeOpening(t *testing.T) {
	var out, errb bytes.Buffer
	for _, c := range []struct {
		dev      tensor.Device
		workload string
		msg      string
	}{
		{tensor.Sim(0), "W1", "is not a CUDA device"},
		{tensor.CUDA(0), "W3", "unknown workload"},
	} {
		err := Run(c.dev, c.workload, bench.DefaultConfig(), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Run(%v, %s): %v, want an error saying %q", c.dev, c.workload, err, c.msg)
		}
	}
}

// openSim opens sim:0 and registers its backend.
func openSim(t *testing.T) (tensor.Device, kernels.Backend) {
	t.Helper()
	be, err := device.Open("sim")
	if err != nil {
		t.Fatal(err)
	}
	return tensor.Sim(0), be
}

// TestW1ModesOnSim: the five W1 modes run on the sim device, the trainer
// ones replaying their captured graphs, and each ends where its CPU
// reference does (the sim's kernels are the CPU's: exactly there).
func TestW1ModesOnSim(t *testing.T) {
	dev, _ := openSim(t)
	var progress bytes.Buffer
	s, err := runW1Modes(dev, 4, 3, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"eager", "captured", "trainer-eager", "trainer-captured-per-batch", "trainer-captured"}; !slices.Equal(s.order, want) {
		t.Fatalf("modes %v, want %v", s.order, want)
	}
	if len(s.mismatch) > 0 {
		t.Fatalf("sim differs from the CPU: %v", s.mismatch)
	}
	for _, mode := range s.order {
		r := s.byMode[mode]
		want := s.refBare
		if strings.HasPrefix(mode, "trainer-") {
			want = s.refTrainer
		}
		if r.Final != want {
			t.Errorf("%s ended at %+v on sim, the CPU at %+v (the same kernels: want equal)", mode, r.Final, want)
		}
		if r.Latency.P95us <= 0 || r.HostSyncsPerEpoch <= 0 {
			t.Errorf("%s: p95 %v µs, %v host syncs per epoch: not measured on the device", mode, r.Latency.P95us, r.HostSyncsPerEpoch)
		}
		if !strings.Contains(progress.String(), "ran "+mode+":") {
			t.Errorf("no progress line for %s in %q", mode, progress.String())
		}
	}
	if s.refBare.Epoch != 6 || s.refTrainer.Epoch != 6 {
		t.Errorf("CPU references end at epochs %d and %d, want 6 (3 warm-up + 4, from 0)", s.refBare.Epoch, s.refTrainer.Epoch)
	}
	if n := s.byMode["captured"].Launches; n <= 0 {
		t.Errorf("bare captured epoch has %d graph nodes", n)
	}
}

// TestW1BestPeer: the best peer mode is the lowest p95 among the modes
// that ran; a failed mode's figures are ignored.
func TestW1BestPeer(t *testing.T) {
	mode := func(p95 float64, errMsg string) map[string]any {
		m := map[string]any{"p95_us": p95, "p50_us": p95 / 2}
		if errMsg != "" {
			m["error"] = errMsg
		}
		return m
	}
	for _, c := range []struct {
		name string
		peer map[string]any
		best string
		p95  float64
	}{
		{"all ran", map[string]any{"eager": mode(4664, ""), "reduce-overhead": mode(6285, ""), "cuda-graph": mode(193.4, "")}, "cuda-graph", 193.4},
		{"graph failed", map[string]any{"eager": mode(4664, ""), "reduce-overhead": mode(6285, ""), "cuda-graph": mode(10, "capture failed")}, "eager", 4664},
		{"one ran", map[string]any{"reduce-overhead": mode(6285, "")}, "reduce-overhead", 6285},
		{"none", map[string]any{"eager": mode(0, "boom")}, "", 0},
		{"no peer", nil, "", 0},
	} {
		best, p95 := w1BestPeer(c.peer)
		if best != c.best || p95 != c.p95 {
			t.Errorf("%s: best %q at %v, want %q at %v", c.name, best, p95, c.best, c.p95)
		}
	}
}
