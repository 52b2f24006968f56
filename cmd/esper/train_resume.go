package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/esper-go/esper/internal/atomicfile"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/tolaria"
	"github.com/esper-go/esper/tolaria/rollback"
)

// What `esper train --resume` keeps of a run, and how it continues it.
//
// Every checkpoint stores the run's configuration (the resolved value of
// every flag but the per-invocation ones below), its run directory and
// the length of its events.jsonl when the checkpoint was written (the
// telemetry is flushed first, so the log is never behind a checkpoint).
// The run directory holds the same configuration in config.json.
//
// `--resume` alone continues the run: every flag left out takes the
// stored value. A flag given with another value than the stored one is
// an error naming it, unless it may change on resume:
//
//   - --epochs, to extend a run (a finished one too); not below the
//     epochs already done. With --schedule cosine the schedule then
//     anneals over the new length.
//   - --baseline, to ask for the host-alone comparison, or drop it.
//   - --capture, which changes how steps run, not what they compute.
//
// The per-invocation flags (--checkpoint, --resume, --run-dir,
// --metrics-addr, --quiet, --device, --data-dir, --tf32) are not stored:
// --tf32's default depends on the device, which a resume may change.
//
// The resumed run continues in its run directory: events.jsonl is cut back
// to the checkpoint it resumes from (what a killed run wrote after it —
// a torn line, the events of the epoch it redoes — goes), and a
// CHECKPOINT_LOADED event marks the resume. A run resumed after its last
// epoch runs nothing and reports its final result; the host-alone
// baseline, when asked for, is kept in the checkpoint directory
// (baseline.json) and run only when missing.

// runKey is the checkpoint's Meta.Extra document of esper train.
const runKey = "esper.train"

// perInvocation are the flags a run does not store: where things are on
// this machine and how this invocation reports.
var perInvocation = map[string]bool{
	"checkpoint": true, "resume": true, "run-dir": true, "metrics-addr": true,
	"quiet": true, "device": true, "data-dir": true, "tf32": true,
}

// mayChangeOnResume are the stored flags a resume may give another value.
var mayChangeOnResume = map[string]bool{"epochs": true, "baseline": true, "capture": true}

// runRecord is esper train's document in every checkpoint.
type runRecord struct {
	Version int `json:"version"`
	// Flags holds the run's configuration: flag name → value, as the
	// command line would give it.
	Flags map[string]string `json:"flags"`
	// RunDir is the run directory (absolute) and EventsBytes the length
	// of its events.jsonl when the checkpoint was written (-1: unknown).
	RunDir      string `json:"run_dir"`
	EventsBytes int64  `json:"events_bytes"`
}

// check refuses a record no esper train writes: another version, an
// events length below -1 (unknown), a run directory that is not an
// absolute path. The flags' values are checked as the command line's
// are, once they are set (see storedHint).
func (r runRecord) check() error {
	switch {
	case r.Version != 1:
		return fmt.Errorf("version = %d is not one this esper reads (1)", r.Version)
	case r.EventsBytes < -1:
		return fmt.Errorf("events_bytes = %d is out of range (want -1, unknown, or a length ≥ 0)", r.EventsBytes)
	case r.RunDir != "" && !filepath.IsAbs(r.RunDir):
		return fmt.Errorf("run_dir = %q is not an absolute path", r.RunDir)
	}
	return nil
}

// storedHint adds to a refusal of the configuration which of the flags
// it names came from the run's stored configuration, since the command
// line did not give them.
func (c *trainConfig) storedHint(err error) error {
	if c.from == nil || len(c.from.stored) == 0 {
		return err
	}
	var from []string
	for _, name := range slices.Sorted(maps.Keys(c.from.stored)) {
		if strings.Contains(err.Error(), "--"+name) {
			from = append(from, c.from.stored[name])
		}
	}
	if len(from) == 0 {
		return err
	}
	return fmt.Errorf("%w (--resume took %s from the run's configuration stored in %s)", err, strings.Join(from, ", "), c.from.in.Path)
}

// configFile is the run directory's config.json: the run's flags and its
// checkpoint directory, if any.
type configFile struct {
	Flags      map[string]string `json:"flags"`
	Checkpoint string            `json:"checkpoint,omitempty"`
}

// resumePoint is the checkpoint a --resume continues from.
type resumePoint struct {
	in    rollback.Intact
	store *rollback.Store
	// run is esper train's record; nil in a checkpoint written before
	// esper train stored one.
	run *runRecord
	// done is the number of epochs the checkpoint holds.
	done int
	// notes are lines for the user (flags changed on purpose).
	notes []string
	// stored are the flags the run's stored configuration set (those
	// the command line left out), as "--name value", by name.
	stored map[string]string
}

// storedFlags returns the value of every flag a run stores.
func storedFlags(fs *flag.FlagSet) map[string]string {
	out := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if !perInvocation[f.Name] {
			out[f.Name] = f.Value.String()
		}
	})
	return out
}

// loadResume reads the checkpoint --resume continues from (the latest
// intact one) and fills the flags the command line left out with the
// run's stored values, refusing contradictions. set holds the flags the
// command line gave, and gets those filled. No checkpoint yet leaves
// c.from nil.
func (c *trainConfig) loadResume(fs *flag.FlagSet, set map[string]bool) error {
	store, err := rollback.Open(c.checkpoint, rollback.StoreOptions{})
	if err != nil {
		return err
	}
	in, err := store.LatestIntact()
	switch {
	case errors.Is(err, rollback.ErrNoCheckpoint):
		return nil
	case err != nil:
		return fmt.Errorf("--resume: %w", err)
	}
	if err := tolaria.CheckIntact(in); err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	done, err := tolaria.EpochsDone(in.State)
	if err != nil {
		return fmt.Errorf("--resume: %s: %w", in.Path, err)
	}
	from := &resumePoint{in: in, store: store, done: done, stored: map[string]string{}}
	if raw, ok := in.State.Meta.Extra[runKey]; ok {
		var rec runRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("--resume: %s: the run's configuration does not decode: %w", in.Path, err)
		}
		if err := rec.check(); err != nil {
			return fmt.Errorf("--resume: %s: the run's configuration: %w", in.Path, err)
		}
		from.run = &rec
		if err := applyStored(fs, set, rec.Flags, c.checkpoint, from); err != nil {
			return err
		}
	}
	c.from = from
	return nil
}

// applyStored sets every stored flag the command line left out, and
// checks those it gave.
func applyStored(fs *flag.FlagSet, set map[string]bool, stored map[string]string, dir string, from *resumePoint) error {
	var conflicts, was []string
	for _, name := range slices.Sorted(maps.Keys(stored)) {
		f := fs.Lookup(name)
		if f == nil || perInvocation[name] {
			continue // a flag this esper no longer has
		}
		want := stored[name]
		if !set[name] {
			if err := fs.Set(name, want); err != nil {
				return fmt.Errorf("--resume: the run's --%s %q: %w", name, want, err)
			}
			set[name] = true
			from.stored[name] = "--" + name + " " + want
			continue
		}
		got := f.Value.String()
		switch {
		case got == want:
		case mayChangeOnResume[name]:
			note := fmt.Sprintf("--%s %s (the run was started with --%s %s)", name, got, name, want)
			if name == "epochs" && stored["schedule"] == "cosine" {
				note += ": the cosine schedule now anneals over " + got + " epochs"
			}
			from.notes = append(from.notes, note)
		default:
			conflicts = append(conflicts, "--"+name+" "+got)
			was = append(was, "--"+name+" "+want)
		}
	}
	if len(conflicts) > 0 {
		verb, it := "contradicts", "it"
		if len(conflicts) > 1 {
			verb, it = "contradict", "them"
		}
		return fmt.Errorf("%s %s the run in %s, which was started with %s: leave %s out to continue the run (only --epochs, --baseline and --capture may change on resume), or start a new run in another --checkpoint directory",
			strings.Join(conflicts, " and "), verb, dir, strings.Join(was, " "), it)
	}
	return nil
}

// openRunDir returns the run's telemetry directory: for a resume, the
// run's own, its events.jsonl cut back to the checkpoint (what it did is
// returned for the resume event), else a new one under c.runRoot.
func openRunDir(c trainConfig, stdout io.Writer) (*nissa.DirBackend, string, error) {
	if c.from == nil || c.from.run == nil || c.from.run.RunDir == "" {
		d, err := nissa.NewDirBackend(c.runRoot, nissa.DirOptions{})
		return d, "", err
	}
	return continueRunDir(c.runRoot, c.from.run.RunDir, c.from.run.EventsBytes, stdout)
}

// continueRunDir reopens a resumed run's telemetry directory dir, its
// events.jsonl cut back to keep bytes (the length a checkpoint recorded
// after a flush) and to its last whole line, and says what it did for the
// resume event; when dir is gone, a new directory under root takes its
// place (with a note). esper train and esper ppo resume through it.
func continueRunDir(root, dir string, keep int64, stdout io.Writer) (*nissa.DirBackend, string, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(stdout, "note: the run directory %s is gone: the resumed run writes a new one\n", dir)
		d, err := nissa.NewDirBackend(root, nissa.DirOptions{})
		return d, "", err
	}
	d, err := nissa.OpenDirBackend(dir, nissa.DirOptions{})
	if err != nil {
		return nil, "", err
	}
	rep, err := nissa.RepairJSONL(d.Path(), keep)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return d, "events.jsonl was missing", nil
	case err != nil:
		return nil, "", err
	case rep.Short:
		fmt.Fprintf(stdout, "warning: %s is shorter than when the checkpoint was written: some events before it are missing\n", d.Path())
		return d, "events.jsonl was shorter than at the checkpoint", nil
	case rep.Lines > 0:
		return d, fmt.Sprintf("events.jsonl cut back to the checkpoint (%d later lines dropped)", rep.Lines), nil
	}
	return d, "events.jsonl ends at the checkpoint", nil
}

// resumeEvent marks the resume in the run's telemetry.
func resumeEvent(c trainConfig, logNote string) leyline.TelemetryEvent {
	ev := leyline.NewEvent(leyline.EventCheckpointLoaded, &leyline.CheckpointLoadedPayload{
		Path: c.from.in.Path, Source: "esper train --resume",
	})
	ev.Epoch = leyline.IntPtr(c.from.done)
	msg := fmt.Sprintf("resumed after epoch %d from %s", c.from.done, c.from.in.Path)
	if logNote != "" {
		msg += "; " + logNote
	}
	if len(c.from.in.Skipped) > 0 {
		ev.Severity = leyline.SeverityWarning
		msg += "; " + tolaria.FallbackMessage(c.from.in)
	}
	ev.Message = msg
	return ev
}

// writeConfig writes config.json into the run directory.
func writeConfig(dir string, cf configFile) error {
	b, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(dir, "config.json"), append(b, '\n'))
}

// checkpointRecord is BeforeCheckpoint's document: the configuration, the
// run directory and the length of its (flushed) events.jsonl.
func checkpointRecord(c trainConfig, dirb *nissa.DirBackend) (map[string]json.RawMessage, error) {
	size := int64(-1)
	if fi, err := os.Stat(dirb.Path()); err == nil {
		size = fi.Size()
	}
	dir, err := filepath.Abs(dirb.Dir())
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(runRecord{Version: 1, Flags: c.flags, RunDir: dir, EventsBytes: size})
	return map[string]json.RawMessage{runKey: b}, err
}

// baselineFile is the checkpoint directory's record of the host-alone
// baseline, so that a resumed run does not train it again.
type baselineFile struct {
	// Flags is the configuration of the run it is the baseline of.
	Flags       map[string]string `json:"flags"`
	ValAccuracy float64           `json:"val_accuracy"`
	ValLoss     float64           `json:"val_loss"`
	Parameters  int               `json:"parameters"`
	Epochs      int               `json:"epochs"`
	SecPerEpoch float64           `json:"seconds_per_epoch"`
	RunDir      string            `json:"run_dir"`
}

const baselineName = "baseline.json"

// valid reports whether every number of a baseline record is one a run
// can have produced; a record that is not is ignored, and the baseline
// trained again.
func (bf baselineFile) valid() bool {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	return bf.Epochs > 0 && bf.Epochs <= tolaria.MaxEpochs && bf.Parameters >= 0 &&
		finite(bf.ValAccuracy) && bf.ValAccuracy >= 0 && bf.ValAccuracy <= 100 &&
		finite(bf.ValLoss) && bf.ValLoss >= 0 && finite(bf.SecPerEpoch) && bf.SecPerEpoch >= 0
}

// sameRun reports whether two configurations describe the same run for
// the baseline (which neither --baseline nor --capture changes).
func sameRun(a, b map[string]string) bool {
	strip := func(m map[string]string) map[string]string {
		c := maps.Clone(m)
		delete(c, "baseline")
		delete(c, "capture")
		return c
	}
	return maps.Equal(strip(a), strip(b))
}

// loadBaseline returns the stored baseline of c's run, or nil.
func loadBaseline(c trainConfig) *runResult {
	if c.checkpoint == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(c.checkpoint, baselineName))
	if err != nil {
		return nil
	}
	var bf baselineFile
	if json.Unmarshal(b, &bf) != nil || !sameRun(bf.Flags, c.flags) || !bf.valid() {
		return nil // trained again
	}
	return &runResult{
		summary: tolaria.Summary{Epochs: []tolaria.EpochReport{{Epoch: bf.Epochs - 1, ValAccuracy: bf.ValAccuracy, ValLoss: bf.ValLoss}}},
		params:  bf.Parameters, dir: bf.RunDir, secPerEpoch: bf.SecPerEpoch,
	}
}

// saveBaseline keeps the baseline's result in the checkpoint directory.
func saveBaseline(c trainConfig, base *runResult) error {
	if c.checkpoint == "" {
		return nil
	}
	f := base.summary.Final()
	b, err := json.MarshalIndent(baselineFile{
		Flags: c.flags, ValAccuracy: f.ValAccuracy, ValLoss: f.ValLoss, Parameters: base.params,
		Epochs: len(base.summary.Epochs), SecPerEpoch: base.secPerEpoch, RunDir: base.dir,
	}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(c.checkpoint, baselineName), append(b, '\n'))
}
