package bench

// The CPU workloads as `esper bench` runs them: each measures, compares
// with its PyTorch peer when asked, prints its table and its verdicts
// against PERF.md's targets, and writes its JSON report (w*_report.go).

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// Config is what `esper bench` runs, one field per flag. Zero Warmup,
// Steps and Reps mean each workload's own default; DefaultConfig holds
// the defaults of the others.
type Config struct {
	// Compare runs the PyTorch peers from PeerDir in the same run.
	Compare bool
	// PeerDir is the directory of the PyTorch peer scripts.
	PeerDir string
	// JSONDir, when set, receives each workload's <workload>.json.
	JSONDir string
	// Epochs are W1's measured epochs.
	Epochs int
	// Warmup is the unmeasured warm-up iterations of every workload.
	Warmup int
	// Requests and Concurrency are W3's germinations, in all and at once.
	Requests, Concurrency int
	// Batch is W5's batch size and W4's host batch; EvalBatches W5's
	// measured evaluation batches.
	Batch, EvalBatches int
	// Steps are W4's lock-step steps, W5's training steps and W7's
	// optimizer steps.
	Steps int
	// DataDir is W5's Fashion-MNIST directory; RandomData trains W5 on
	// random N(0,1) images instead.
	DataDir    string
	RandomData bool
	// Capture replays captured graphs (W5 times captured steps and
	// forwards too; W4 runs its environments captured).
	Capture bool
	// Size is W6's n; Rounds W6's rounds of Reps engine GEMMs; Reps also
	// W2's forwards per batch size and mode.
	Size, Reps, Rounds int
	// Graphs is W2's large batch.
	Graphs int
	// Params and Tensors are W7's parameters and parameter tensors.
	Params, Tensors int
	// Envs, BaseChannels, TrainSize, ValSize, MaxEpochs and PPORounds
	// shape W4 (PPORounds -1 skips the loop with the PPO update).
	Envs, BaseChannels, TrainSize, ValSize, MaxEpochs, PPORounds int
	// PeerResults (a GPU run) is a directory of gpu_peers.py results to
	// compare with instead of running the peers.
	PeerResults string
	// Set holds the names of the flags given on the command line: a GPU
	// workload keeps its own default for Size and EvalBatches unless
	// they were given.
	Set map[string]bool
}

// DefaultConfig returns esper bench's defaults.
func DefaultConfig() Config {
	return Config{
		PeerDir: "bench/pytorch", Epochs: 2000, Requests: 256, Concurrency: 4, Batch: 128, EvalBatches: 20,
		Capture: true, Size: 1024, Rounds: 10, Graphs: 64, Params: 10_000_000, Tensors: 200,
		Envs: W4DefaultEnvs, BaseChannels: W4DefaultBaseChannels, TrainSize: W4DefaultTrain, ValSize: W4DefaultVal,
		MaxEpochs: W4DefaultMaxEpochs, PPORounds: W4DefaultPPORounds,
	}
}

// cpuWorkloads is what Run("all") runs, in order.
var cpuWorkloads = []string{"W1", "W2", "W3", "W4", "W5", "W6", "W7"}

// Run runs the CPU workload named by workload (W1 to W7, or all for each
// in turn; any case) as esper bench does. With Compare, the peers'
// scripts are checked first. With all, a workload that fails is reported
// on stderr and the others still run; the error joins their errors.
func Run(workload string, c Config, stdout, stderr io.Writer) error {
	w := strings.ToUpper(workload)
	if c.Compare {
		ids := []string{w}
		if w == "ALL" {
			ids = cpuWorkloads
		}
		if err := CheckPeerScripts(c.PeerDir, ids...); err != nil {
			return err
		}
	}
	if w == "ALL" {
		var errs []error
		for i, id := range cpuWorkloads {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			if err := runWorkload(id, c, stdout, stderr); err != nil {
				fmt.Fprintf(stderr, "%s failed: %v\n", id, err)
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
		}
		return errors.Join(errs...)
	}
	return runWorkload(w, c, stdout, stderr)
}

// runWorkload runs one workload by its (upper-case) id.
func runWorkload(id string, c Config, stdout, stderr io.Writer) error {
	switch id {
	case "W1":
		warmup := c.Warmup
		if warmup == 0 {
			warmup = 50
		}
		return benchW1(stdout, stderr, c.Epochs, warmup, c.Compare, c.PeerDir, c.JSONDir)
	case "W2":
		return benchW2(stdout, stderr, c)
	case "W3":
		if c.Compare {
			fmt.Fprintln(stderr, "W3 has no PyTorch peer (PERF.md); running our side only")
		}
		return benchW3(stdout, c.Requests, c.Concurrency, c.JSONDir)
	case "W4":
		return benchW4(stdout, stderr, c)
	case "W5":
		return benchW5(stdout, stderr, c)
	case "W6":
		return benchW6(stdout, stderr, c)
	case "W7":
		return benchW7(stdout, stderr, c)
	}
	return fmt.Errorf("unknown workload %q (available: W1, W2, W3, W4, W5, W6, W7, all)", id)
}
