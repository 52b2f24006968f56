package bench

// W7 as esper bench runs it on the CPU: SGD and AdamW steps over the
// flat arena against the copy bandwidth and the PyTorch peer.

import (
	"fmt"
	"io"
)

// w7TargetFraction is PERF.md's W7 CPU target: ≥ 60% of the measured
// copy bandwidth.
const w7TargetFraction = 0.60

// benchW7 runs W7, prints its table and verdicts and writes its report.
func benchW7(stdout, stderr io.Writer, c Config) error {
	m := ThisMachine()
	header(stdout, "W7 foreach-optim (fp32, CPU)", m)
	r, err := RunW7(W7Options{
		Params: c.Params, Tensors: c.Tensors, Steps: c.Steps, Warmup: c.Warmup,
		Progress: func(phase string) {
			switch phase {
			case "copy":
				fmt.Fprintf(stdout, "  copy bandwidth (40 MB buffer) ...\n")
			default:
				fmt.Fprintf(stdout, "  %s steps over %d parameters in %d tensors ...\n", phase, c.Params, c.Tensors)
			}
		},
	})
	if err != nil {
		return err
	}
	rep := Report{
		Workload: "W7",
		Parameters: map[string]any{
			"params": r.Params, "tensors": r.Tensors, "shapes": r.Shapes, "steps": r.Steps, "warmup": r.Warmup,
			"sgd":             "optim.SGD lr=0.01 momentum=0.9 (flat arena, one fused kernel per step)",
			"adamw":           "optim.AdamW lr=1e-3 betas=(0.9,0.999) eps=1e-8 weight_decay=0.01 (flat arena, fused)",
			"bytes_per_param": map[string]any{"sgd_momentum": W7SGDBytesPerParam, "adamw": W7AdamWBytesPerParam},
			"copy":            "Go copy of a float32 buffer, read+write bytes over the median time; also split over GOMAXPROCS goroutines",
			"copy_bytes":      r.CopyBytes,
		},
		Machine: m, Device: "cpu",
		Results: map[string]any{
			"sgd_momentum": r.SGD, "adamw": r.AdamW,
			"copy_gbps": r.CopyGBps, "parallel_copy_gbps": r.ParallelCopyGBps, "copy_latency": r.CopyLatency,
		},
		Ratios: map[string]any{
			"sgd_fraction_of_copy": r.SGD.FractionOfCopy, "adamw_fraction_of_copy": r.AdamW.FractionOfCopy,
			"sgd_fraction_of_parallel_copy": r.SGD.FractionOfParallelCopy, "adamw_fraction_of_parallel_copy": r.AdamW.FractionOfParallelCopy,
		},
	}
	peer, err := runPeer(c, stdout, stderr, &rep, "w7_foreach_optim.py",
		"--shapes", W7ShapesArg(r.Shapes), "--steps", fmt.Sprint(r.Steps), "--warmup", fmt.Sprint(r.Warmup),
		"--copy-bytes", fmt.Sprint(r.CopyBytes))
	if err != nil {
		return err
	}
	if peer != nil {
		if got := Figure(peer, "params"); got != float64(r.Params) {
			return fmt.Errorf("W7 peer ran %v parameters, we ran %d", got, r.Params)
		}
	}
	tw := NewTable(stdout, AlignRight)
	fmt.Fprintln(tw, "\tp50 ms\tp95 ms\tMB/step\tGB/s\t% of copy\tallocs/step\tesper speedup p50\t")
	for _, o := range []struct {
		ours W7OptimResult
		key  string
	}{{r.SGD, "sgd_momentum"}, {r.AdamW, "adamw"}} {
		fmt.Fprintf(tw, "esper %s\t%.2f\t%.2f\t%.0f\t%.1f\t%.0f%%\t%.1f\t\t\n", o.ours.Optimizer, o.ours.Latency.P50us/1e3, o.ours.Latency.P95us/1e3,
			float64(o.ours.BytesPerStep)/1e6, o.ours.GBps, 100*o.ours.FractionOfCopy, o.ours.AllocsPerStep)
		if peer == nil {
			continue
		}
		pp50 := Figure(peer, o.key, "step_latency", "p50_us")
		variant := "default"
		if f, _ := peer[o.key].(map[string]any)["foreach"].(bool); f {
			variant = "foreach"
		}
		fmt.Fprintf(tw, "pytorch %s (%s)\t%.2f\t%.2f\t%.0f\t%.1f\t%.0f%%\t-\t%s\t\n", o.ours.Optimizer, variant, pp50/1e3,
			Figure(peer, o.key, "step_latency", "p95_us")/1e3, Figure(peer, o.key, "bytes_per_step")/1e6, Figure(peer, o.key, "gbps"),
			100*Figure(peer, o.key, "fraction_of_copy"), Ratio(pp50, o.ours.Latency.P50us))
		rep.Ratios[o.key+"_speedup_p50"] = pp50 / o.ours.Latency.P50us
		rep.Ratios[o.key+"_speedup_p95"] = Figure(peer, o.key, "step_latency", "p95_us") / o.ours.Latency.P95us
	}
	tw.Flush()
	fmt.Fprintf(stdout, "copy bandwidth (read+write, %d MB): Go copy %.1f GB/s, Go copy on %d goroutines %.1f GB/s",
		r.CopyBytes/1_000_000, r.CopyGBps, m.GOMAXPROCS, r.ParallelCopyGBps)
	if peer != nil {
		fmt.Fprintf(stdout, ", torch copy_ %.1f GB/s", Figure(peer, "copy_gbps"))
	}
	fmt.Fprintln(stdout)
	for _, o := range []W7OptimResult{r.SGD, r.AdamW} {
		fmt.Fprintf(stdout, "%s at %.0f%% of Go copy bandwidth (%.0f%% of the parallel copy) %s the PERF.md target of ≥ %.0f%%\n",
			o.Optimizer, 100*o.FractionOfCopy, 100*o.FractionOfParallelCopy, Verdict(o.FractionOfCopy >= w7TargetFraction), 100*w7TargetFraction)
	}
	if r.SGD.FractionOfCopy > 1 || r.AdamW.FractionOfCopy > 1 {
		fmt.Fprintln(stdout, "(above 100%: on this machine Go's copy moves fewer bytes per second than the optimizer's in-place update, so it is no bandwidth ceiling here; read the fraction as a relative figure)")
	}
	return SaveReport(stdout, c.JSONDir, rep)
}
