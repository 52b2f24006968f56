package bench

// W5 as esper bench runs it on the CPU: CNN host training and
// evaluation, eager and captured, beside the PyTorch peer.

import (
	"fmt"
	"io"

	"github.com/esper-go/esper/data"
)

// w5TargetRatio is PERF.md's W5 CPU target: ≥ 1.0× PyTorch CPU.
const w5TargetRatio = 1.0

// benchW5 runs W5, prints its table and verdicts and writes its report.
func benchW5(stdout, stderr io.Writer, c Config) error {
	m := ThisMachine()
	header(stdout, "W5 host-train (CNN host, CPU)", m)
	r, err := RunW5(W5Options{
		Batch: c.Batch, Steps: c.Steps, Warmup: c.Warmup, EvalBatches: c.EvalBatches,
		Captured: c.Capture, DataDir: c.DataDir, RandomData: c.RandomData,
		Progress: progressEvery(stdout),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  data: %s\n", r.DataNote)
	results := map[string]any{"eval": r.Eval}
	if r.EvalCaptured != nil {
		results["eval_captured"] = *r.EvalCaptured
	}
	for _, t := range r.Train {
		results["train_"+t.Mode] = t
		if t.Fallback != "" {
			fmt.Fprintf(stderr, "W5 captured training fell back to eager steps: %s\n", t.Fallback)
		}
	}
	rep := Report{
		Workload: "W5",
		Parameters: map[string]any{
			"model": "kasmina CNNHost: 3 × [Conv2d k3 pad 1 no bias → BatchNorm2d → ReLU → MaxPool2d 2] (32/64/128 channels), global average pool, Linear(128→10)",
			"input": "1×28×28, 10 classes", "batch": r.Batch, "steps": r.Steps, "warmup": r.Warmup,
			"eval_batches": r.EvalBatches, "eval_warmup": r.EvalWarmup, "data": r.Data, "data_note": r.DataNote,
			"loss": "cross-entropy (mean)", "optimizer": "SGD lr=0.01 momentum=0.9", "eval": "evaluation mode, inference mode, forward only (eager, and replayed from a captured graph with --capture)",
			"params": r.Params, "fwd_flop_per_sample": r.FwdFLOPPerSample, "train_flop_per_sample": r.TrainFLOPPerSample,
			"samples_per_second": "batch / mean step (batch) time",
		},
		Machine: m, Device: "cpu", Results: results,
	}
	peerArgs := []string{"--batch", fmt.Sprint(r.Batch), "--steps", fmt.Sprint(r.Steps), "--warmup", fmt.Sprint(r.Warmup),
		"--eval-batches", fmt.Sprint(r.EvalBatches), "--eval-warmup", fmt.Sprint(r.EvalWarmup)}
	if r.Data == "fashion-mnist" {
		dir := c.DataDir
		if dir == "" {
			dir = data.DefaultFashionMNISTDir
		}
		peerArgs = append(peerArgs, "--data-dir", dir)
	} else {
		peerArgs = append(peerArgs, "--random")
	}
	peer, err := runPeer(c, stdout, stderr, &rep, "w5_host_train.py", peerArgs...)
	if err != nil {
		return err
	}
	if peer != nil {
		if got := Figure(peer, "params"); got != float64(r.Params) {
			return fmt.Errorf("W5 peer model has %v parameters, ours %d: the architectures differ", got, r.Params)
		}
		rep.Ratios = map[string]any{}
	}
	peerTrain, peerEval := Figure(peer, "train_samples_per_second"), Figure(peer, "eval_samples_per_second")
	tw := NewTable(stdout, AlignRight)
	fmt.Fprintln(tw, "\tsamples/s\tp50 ms\tp95 ms\teff. GFLOP/s\tallocs/step\tvs pytorch\t")
	for _, t := range r.Train {
		fmt.Fprintf(tw, "train esper %s\t%.0f\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t\n", t.Mode, t.SamplesPerSec, t.Latency.P50us/1e3, t.Latency.P95us/1e3,
			t.GFLOPS, t.AllocsPerStep, Ratio(t.SamplesPerSec, peerTrain))
		if peer != nil {
			rep.Ratios["train_"+t.Mode+"_vs_pytorch"] = t.SamplesPerSec / peerTrain
		}
	}
	if peer != nil {
		fmt.Fprintf(tw, "train pytorch %v\t%.0f\t%.1f\t%.1f\t%.1f\t-\t\t\n", peer["torch_version"], peerTrain,
			Figure(peer, "train_step_latency", "p50_us")/1e3, Figure(peer, "train_step_latency", "p95_us")/1e3, peerTrain*r.TrainFLOPPerSample/1e9)
	}
	evals := []W5EvalResult{r.Eval}
	if r.EvalCaptured != nil {
		evals = append(evals, *r.EvalCaptured)
	}
	for _, e := range evals {
		fmt.Fprintf(tw, "eval esper %s\t%.0f\t%.1f\t%.1f\t%.1f\t-\t%s\t\n", e.Mode, e.SamplesPerSec, e.Latency.P50us/1e3, e.Latency.P95us/1e3,
			e.GFLOPS, Ratio(e.SamplesPerSec, peerEval))
		if peer != nil {
			key := "eval_vs_pytorch"
			if e.Mode != "eager" {
				key = "eval_" + e.Mode + "_vs_pytorch"
			}
			rep.Ratios[key] = e.SamplesPerSec / peerEval
		}
	}
	if peer != nil {
		fmt.Fprintf(tw, "eval pytorch %v\t%.0f\t%.1f\t%.1f\t%.1f\t-\t\t\n", peer["torch_version"], peerEval,
			Figure(peer, "eval_batch_latency", "p50_us")/1e3, Figure(peer, "eval_batch_latency", "p95_us")/1e3, peerEval*r.FwdFLOPPerSample/1e9)
	}
	tw.Flush()
	if peer != nil {
		best := 0.0
		for _, t := range r.Train {
			best = max(best, t.SamplesPerSec)
		}
		fmt.Fprintf(stdout, "best esper training at %.2f× PyTorch %s the PERF.md target of ≥ %.1f×\n", best/peerTrain, Verdict(best/peerTrain >= w5TargetRatio), w5TargetRatio)
		bestEval := 0.0
		for _, e := range evals {
			bestEval = max(bestEval, e.SamplesPerSec)
		}
		fmt.Fprintf(stdout, "best esper evaluation at %.2f× PyTorch %s the PERF.md target of ≥ %.1f×\n", bestEval/peerEval, Verdict(bestEval/peerEval >= w5TargetRatio), w5TargetRatio)
	}
	return SaveReport(stdout, c.JSONDir, rep)
}
