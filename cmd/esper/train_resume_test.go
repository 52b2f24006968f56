package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/tolaria/rollback"
)

// tinyTrain are the flags of a sub-second esper train run writing under
// dir (run directories) and dir/ck (checkpoints).
func tinyTrain(dir string, extra ...string) []string {
	return append([]string{"train", "--train-size", "256", "--test-size", "128", "--batch", "64",
		"--base-channels", "2", "--kernel", "1", "--lr", "0.05", "--schedule", "cosine",
		"--run-dir", dir, "--checkpoint", filepath.Join(dir, "ck")}, extra...)
}

// resumeOnly are the flags of a resume of tinyTrain's run: the
// per-invocation ones and --resume, nothing of the run's configuration.
func resumeOnly(dir string, extra ...string) []string {
	return append([]string{"train", "--run-dir", dir, "--checkpoint", filepath.Join(dir, "ck"), "--resume"}, extra...)
}

// runTrain runs esper with args and returns stdout, stderr and the code.
func runTrain(t *testing.T, args []string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func mustRun(t *testing.T, args []string) string {
	t.Helper()
	out, errs, code := runTrain(t, args)
	require.Equal(t, 0, code, "%v\n%s\n%s", args, out, errs)
	return out
}

// summaryRow returns the line of out's summary table that starts with
// name.
func summaryRow(t *testing.T, out, name string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name) {
			return l
		}
	}
	t.Fatalf("no %q row in\n%s", name, out)
	return ""
}

// TestTrainResumeFinishedRun: resuming a run that finished (or crashed
// between its last checkpoint and its summary) prints the run's real
// final result, and the host-alone baseline it asked for: the one kept
// from before, or, when it is missing, a new one.
func TestTrainResumeFinishedRun(t *testing.T) {
	dir := t.TempDir()
	first := mustRun(t, tinyTrain(dir, "--epochs", "3"))
	seeds, alone := summaryRow(t, first, "with seeds"), summaryRow(t, first, "host alone")
	require.NotContains(t, seeds, "0.00%   0.0000")

	again := mustRun(t, resumeOnly(dir))
	require.Contains(t, again, "resumed from the checkpoint of epoch 3")
	require.NotContains(t, again, "epoch   3/3", "nothing is trained again")
	require.Equal(t, seeds, summaryRow(t, again, "with seeds"), "the run's own final figures")
	require.Equal(t, alone, summaryRow(t, again, "host alone"), "the baseline kept from the first run")
	require.Contains(t, again, "as trained before")
	require.Contains(t, again, "points of validation accuracy over the host alone")

	// As after a crash before the baseline: it is missing, so it runs.
	require.NoError(t, os.Remove(filepath.Join(dir, "ck", baselineName)))
	again = mustRun(t, resumeOnly(dir))
	require.Equal(t, seeds, summaryRow(t, again, "with seeds"))
	require.NotContains(t, again, "as trained before")
	base := strings.Fields(summaryRow(t, again, "host alone"))
	want := strings.Fields(alone)
	require.Equal(t, want[:len(want)-1], base[:len(base)-1], "the same baseline (but its s/epoch)")
	require.FileExists(t, filepath.Join(dir, "ck", baselineName))

	// A run started without the baseline gets it when a resume asks.
	dir = t.TempDir()
	first = mustRun(t, tinyTrain(dir, "--epochs", "2", "--baseline=false"))
	require.NotContains(t, first, "host alone")
	again = mustRun(t, resumeOnly(dir, "--baseline"))
	require.Equal(t, summaryRow(t, first, "with seeds"), summaryRow(t, again, "with seeds"))
	summaryRow(t, again, "host alone")
}

// TestTrainResumeFallsBackToAnIntactCheckpoint: with the latest checkpoint
// corrupt (one flipped byte, or truncated), --resume continues from the
// previous one after one warning line naming both, and ends where the
// uninterrupted run ended.
func TestTrainResumeFallsBackToAnIntactCheckpoint(t *testing.T) {
	for _, damage := range []string{"flip", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			first := mustRun(t, tinyTrain(dir, "--epochs", "3", "--baseline=false"))
			latest := filepath.Join(dir, "ck", "ckpt-epoch-3.safetensors")
			data, err := os.ReadFile(latest)
			require.NoError(t, err)
			if damage == "flip" {
				data[len(data)-10] ^= 0x01
			} else {
				data = data[:len(data)-100]
			}
			require.NoError(t, os.WriteFile(latest, data, 0o644))

			out, errs, code := runTrain(t, resumeOnly(dir))
			require.Equal(t, 0, code, "%s\n%s", out, errs)
			var warnings []string
			for _, l := range strings.Split(out+errs, "\n") {
				if strings.HasPrefix(l, "warning:") {
					warnings = append(warnings, l)
				}
			}
			require.Len(t, warnings, 1, out)
			require.Contains(t, warnings[0], "ckpt-epoch-3.safetensors is corrupt")
			require.Contains(t, warnings[0], "previous intact checkpoint, ckpt-epoch-2.safetensors")
			require.Contains(t, out, "resumed from the checkpoint of epoch 2")
			require.Contains(t, out, "epoch   3/3")
			got, want := strings.Fields(summaryRow(t, out, "with seeds")), strings.Fields(summaryRow(t, first, "with seeds"))
			require.Equal(t, want[:len(want)-1], got[:len(got)-1], "the redone epoch ends as the first run did (but its s/epoch)")
		})
	}
}

// logEpochs reads the run's events.jsonl: the epochs of its
// EPOCH_COMPLETED events in order, with "resume@N" where a
// CHECKPOINT_LOADED marks a resume after epoch N; torn reports a torn
// last line.
func logEpochs(t *testing.T, path string) (seq []string, torn bool) {
	t.Helper()
	evs, torn, err := nissa.ReadJSONL(path)
	require.NoError(t, err)
	for _, ev := range evs {
		switch ev.Type {
		case leyline.EventEpochCompleted:
			seq = append(seq, fmt.Sprint(*ev.Epoch))
		case leyline.EventCheckpointLoaded:
			seq = append(seq, fmt.Sprintf("resume@%d", *ev.Epoch))
		}
	}
	return seq, torn
}

// runDirs returns the telemetry directories under dir.
func runDirs(t *testing.T, dir string) []string {
	t.Helper()
	runs, err := filepath.Glob(filepath.Join(dir, "telemetry_*"))
	require.NoError(t, err)
	return runs
}

// TestTrainResumeRepairsTheLog: the log is flushed before every
// checkpoint (the checkpoint records its length), and a resumed run
// continues it in the same run directory, cut back to the checkpoint: the
// events a killed run wrote after it (a redone epoch's, a torn line) go,
// every epoch appears once, numbered from 1, and a CHECKPOINT_LOADED
// event says where the resume happened.
func TestTrainResumeRepairsTheLog(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, tinyTrain(dir, "--epochs", "3", "--baseline=false"))
	runs := runDirs(t, dir)
	require.Len(t, runs, 1)
	log := filepath.Join(runs[0], "events.jsonl")

	// The checkpoint of epoch 2 was written after the log held epoch 2.
	st, err := rollback.Open(filepath.Join(dir, "ck"), rollback.StoreOptions{})
	require.NoError(t, err)
	in, err := st.LatestIntact()
	require.NoError(t, err)
	var rec runRecord
	require.NoError(t, json.Unmarshal(in.State.Meta.Extra[runKey], &rec))
	abs, err := filepath.Abs(runs[0])
	require.NoError(t, err)
	require.Equal(t, abs, rec.RunDir)
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), rec.EventsBytes, "the last checkpoint saw the whole log")
	seq, torn := logEpochs(t, log)
	require.Equal(t, []string{"1", "2", "3"}, seq)
	require.False(t, torn)

	// What a kill during epoch 4 leaves: its events (which the resumed
	// run redoes) and a torn line.
	line := func(epoch int) string {
		ev := leyline.NewEvent(leyline.EventEpochCompleted, &leyline.EpochCompletedPayload{InnerEpoch: epoch})
		ev.Epoch = leyline.IntPtr(epoch)
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		return string(b)
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(line(4) + "\n" + line(5)[:40])
	require.NoError(t, err)
	require.NoError(t, f.Close())

	out := mustRun(t, resumeOnly(dir, "--epochs", "5"))
	require.Len(t, runDirs(t, dir), 1, "the resumed run continues its run directory")
	seq, torn = logEpochs(t, log)
	require.False(t, torn)
	require.Equal(t, []string{"1", "2", "3", "resume@3", "4", "5"}, seq)
	evs, _, err := nissa.ReadJSONL(log)
	require.NoError(t, err)
	for _, ev := range evs {
		if ev.Type == leyline.EventCheckpointLoaded {
			require.Contains(t, ev.Message, "cut back to the checkpoint (2 later lines dropped)")
		}
	}
	require.Contains(t, out, "epoch   5/5")
	files, err := filepath.Glob(filepath.Join(dir, "ck", "ckpt-epoch-*.safetensors"))
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "ck", "ckpt-epoch-4.safetensors"), filepath.Join(dir, "ck", "ckpt-epoch-5.safetensors")}, files,
		"checkpoints are named by the epoch's number, as the console shows it")
}

// TestTrainKillChild is the esper train that TestTrainResumeAfterKill
// kills.
func TestTrainKillChild(t *testing.T) {
	dir := os.Getenv("ESPER_TRAIN_KILL_DIR")
	if dir == "" {
		t.Skip("helper process of TestTrainResumeAfterKill")
	}
	run(tinyTrain(dir, "--epochs", "40", "--baseline=false", "--schedule", "constant"), os.Stdout, os.Stderr)
}

// TestTrainResumeAfterKill: esper train killed with SIGKILL after its
// second checkpoint and resumed (to 6 epochs of its 40) leaves a log with
// every epoch once, the resume marked, no torn line, and ends as an
// uninterrupted 6-epoch run does.
func TestTrainResumeAfterKill(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestTrainKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ESPER_TRAIN_KILL_DIR="+dir)
	require.NoError(t, cmd.Start())
	ck := filepath.Join(dir, "ck", "ckpt-epoch-2.safetensors")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(ck); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "no second checkpoint after a minute")
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Kill())
	err := cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child was not killed: %v", err)

	out := mustRun(t, resumeOnly(dir, "--epochs", "6"))
	runs := runDirs(t, dir)
	require.Len(t, runs, 1)
	seq, torn := logEpochs(t, filepath.Join(runs[0], "events.jsonl"))
	require.False(t, torn)
	require.GreaterOrEqual(t, len(seq), 3)
	resumedAt := -1
	for _, s := range seq {
		if strings.HasPrefix(s, "resume@") {
			_, err = fmt.Sscanf(s, "resume@%d", &resumedAt)
		}
	}
	// The kill may land before the WAL names the second checkpoint.
	require.True(t, err == nil && resumedAt >= 1, "no resume event in %v", seq)
	var want []string
	for e := 1; e <= 6; e++ {
		want = append(want, fmt.Sprint(e))
		if e == resumedAt {
			want = append(want, fmt.Sprintf("resume@%d", e))
		}
	}
	require.Equal(t, want, seq)

	// A constant schedule: extending or cutting --epochs changes nothing
	// else (a cosine schedule would anneal over the new length).
	whole := mustRun(t, tinyTrain(t.TempDir(), "--epochs", "6", "--baseline=false", "--schedule", "constant"))
	got, exp := strings.Fields(summaryRow(t, out, "with seeds")), strings.Fields(summaryRow(t, whole, "with seeds"))
	require.Equal(t, exp[:len(exp)-1], got[:len(got)-1], "the resumed run ends as the uninterrupted one")
}

// TestTrainResumeUsesTheStoredConfiguration: a run's configuration is
// stored with its checkpoints and in its run directory; --resume alone
// continues it (the demo's --kernel 1 included), a flag that contradicts
// it is an error naming the flag, and --epochs may extend it but not
// shorten it.
func TestTrainResumeUsesTheStoredConfiguration(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, tinyTrain(dir, "--epochs", "2", "--baseline=false", "--seed", "3"))
	runs := runDirs(t, dir)
	require.Len(t, runs, 1)
	var cf configFile
	b, err := os.ReadFile(filepath.Join(runs[0], "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cf))
	require.Equal(t, "1", cf.Flags["kernel"])
	require.Equal(t, "0.05", cf.Flags["lr"])
	require.Equal(t, filepath.Join(dir, "ck"), cf.Checkpoint)
	require.NotContains(t, cf.Flags, "run-dir")

	var errb bytes.Buffer
	c, err := parseTrain(resumeOnly(dir)[1:], &errb)
	require.NoError(t, err)
	require.Equal(t, [5]int{1, 2, 2, 256, 2}, [5]int{c.kernel, c.baseChannels, c.blocks, c.trainSize, c.epochs})
	require.Equal(t, 0.05, c.lr)
	require.Equal(t, "cosine", c.schedule)
	require.Equal(t, uint64(3), c.seed)
	require.False(t, c.baseline)
	require.NotNil(t, c.from)
	require.Equal(t, 2, c.from.done)

	c, err = parseTrain(resumeOnly(dir, "--lr", "0.050", "--kernel", "1", "--epochs", "4", "--capture=false")[1:], &errb)
	require.NoError(t, err, "the same values, and the flags that may change")
	require.Equal(t, 4, c.epochs)
	require.False(t, c.capture)
	require.Len(t, c.from.notes, 2)

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--lr", "0.5", "--seed", "7"}, []string{"--lr 0.5 and --seed 7 contradict the run in", "started with --lr 0.05 --seed 3"}},
		{[]string{"--kernel", "3"}, []string{"--kernel 3 contradicts", "--kernel 1"}},
		{[]string{"--task", "fashion-mnist"}, []string{"--task fashion-mnist contradicts"}},
		{[]string{"--controller", "none"}, []string{"--controller none contradicts"}},
		{[]string{"--epochs", "1"}, []string{"has done 2 epochs already", "cannot be shortened"}},
	} {
		_, err := parseTrain(resumeOnly(dir, tc.args...)[1:], &errb)
		require.Error(t, err, "%v", tc.args)
		for _, w := range tc.want {
			require.Contains(t, err.Error(), w, "%v", tc.args)
		}
		out, errs, code := runTrain(t, resumeOnly(dir, tc.args...))
		require.Equal(t, 1, code, "%v: %s", tc.args, out)
		require.Contains(t, errs, tc.want[0])
	}

	// The same run continues from any --run-dir: it keeps its own.
	out := mustRun(t, append(resumeOnly(dir, "--epochs", "3"), "--run-dir", t.TempDir()))
	require.Contains(t, out, "(kernel 1), 3 epochs, lr 0.05 (cosine)")
	require.Contains(t, out, "note: --epochs 3 (the run was started with --epochs 2): the cosine schedule now anneals over 3 epochs")
	require.Contains(t, out, "epoch   3/3")
	require.Contains(t, out, runs[0])

	// Without a checkpoint yet, --resume starts the run as given.
	c, err = parseTrain(tinyTrain(t.TempDir(), "--resume", "--kernel", "3")[1:], &errb)
	require.NoError(t, err)
	require.Nil(t, c.from)
	require.Equal(t, 3, c.kernel)
}
