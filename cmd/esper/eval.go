package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/esper-go/esper/internal/runplot"
	"github.com/esper-go/esper/simic/evaluate"
)

// evalCmd is `esper eval`: every controller of --controllers trains one
// run per seed of --seeds, and the paired table, eval.json and eval.png
// come out (simic/evaluate does the work).
func evalCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	controllers := fs.String("controllers", "heuristic,none", "controllers to compare, comma-separated: heuristic, none (the host alone), gnn:POLICY_FILE, gnn-sample:POLICY_FILE")
	seeds := fs.String("seeds", "101-120", "seeds, e.g. 101-120 or 1,5,7-9: each seed is one task instance, data order and host initialisation, shared by every controller")
	var c trainConfig
	c.runFlags(fs)
	governor := fs.Bool("governor", true, "roll back diverging runs, as esper train does")
	capture := fs.Bool("capture", true, "capture and replay the train step")
	out := fs.String("out", "", "directory for eval.json and eval.png (default runs/eval_TIMESTAMP)")
	quiet := fs.Bool("quiet", false, "print only errors and the final table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := c.applyTaskDefaults(set); err != nil {
		return err
	}
	ctls, err := evaluate.ParseControllers(*controllers)
	if err != nil {
		return fmt.Errorf("--controllers: %w", err)
	}
	sd, err := evaluate.ParseSeeds(*seeds)
	if err != nil {
		return fmt.Errorf("--seeds: %w", err)
	}
	if c.schedule != "cosine" && c.schedule != "constant" {
		return fmt.Errorf("--schedule %q: want constant or cosine", c.schedule)
	}
	o := evaluate.Options{
		Controllers: ctls, Seeds: sd,
		Run: evaluate.RunConfig{
			Task: c.task, DataDir: c.dataDir, TrainSize: c.trainSize, TestSize: c.testSize,
			Epochs: c.epochs, Batch: c.batch, Blocks: c.blocks, BaseChannels: c.baseChannels, Kernel: c.kernel,
			LR: c.lr, Cosine: c.schedule == "cosine", Governor: *governor, Capture: *capture,
		},
	}
	if err := o.Check(); err != nil {
		return err
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("runs", "eval_"+time.Now().Format("2006-01-02_150405"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	total := len(ctls) * len(sd)
	if !*quiet {
		fmt.Fprintf(stdout, "esper eval: %d controllers × %d seeds = %d runs of %d epochs (%s task) → %s\n", len(ctls), len(sd), total, c.epochs, c.task, dir)
	}
	left := newETA()
	o.Progress = func(done, total int, r evaluate.Result) {
		if *quiet {
			return
		}
		fmt.Fprintf(stdout, "  [%d/%d] %-12s seed %-5d val acc %6.2f%%  added %6d params  %.1fs  %s\n",
			done, total, r.Controller, r.Seed, r.Accuracy, r.Added, r.Seconds, left.step(total-done))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := evaluate.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if err := rep.WriteJSON(filepath.Join(dir, "eval.json")); err != nil {
		return err
	}
	series := make([]runplot.EvalSeries, len(ctls))
	for i, ctl := range ctls {
		series[i].Controller = ctl.Name
		for s := range sd {
			series[i].Accuracy = append(series[i].Accuracy, rep.Results[s*len(ctls)+i].Accuracy)
		}
	}
	if err := runplot.WriteEval(filepath.Join(dir, "eval.png"), sd, series); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(dir, "eval.json"), filepath.Join(dir, "eval.png"))
	return nil
}
