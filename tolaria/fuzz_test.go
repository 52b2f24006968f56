package tolaria

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/internal/fuzzcheck"
	"github.com/esper-go/esper/tolaria/rollback"
)

// fuzzCheckpoint trains crashOptions' run for two epochs in dir and
// returns the store's latest state.
func fuzzCheckpoint(f *testing.F, dir string) rollback.State {
	o := crashOptions(f, dir)
	o.Epochs = 2
	tr, err := NewTrainer(o)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := tr.Fit(context.Background()); err != nil {
		f.Fatal(err)
	}
	st, _, err := o.Checkpoints.Latest()
	if err != nil {
		f.Fatal(err)
	}
	return st
}

// FuzzResumeMeta resumes a trainer from a checkpoint whose tensors are
// intact and whose JSON part (epoch, steps, generators, slots, the
// trainer's and the controller's documents) is arbitrary: ResumeFrom
// returns an error or resumes, never panics, and allocates in
// proportion to the document.
func FuzzResumeMeta(f *testing.F) {
	st := fuzzCheckpoint(f, f.TempDir())
	good, err := json.Marshal(st.Meta)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"epoch":9223372036854775807,"global_step":-1}`))
	f.Fuzz(func(t *testing.T, meta []byte) {
		var m rollback.Meta
		if json.Unmarshal(meta, &m) != nil {
			return
		}
		tr, err := NewTrainer(crashOptions(t, t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		fuzzcheck.Budget(t, "ResumeFrom", len(meta), fuzzcheck.Linear(len(meta), 64, 8<<20), func() {
			next, err := tr.ResumeFrom(rollback.State{Tensors: st.Tensors, Meta: m})
			if err == nil && (next < 1 || next > 1<<40) {
				t.Fatalf("resumed at epoch index %d", next)
			}
		})
	})
}

// FuzzResumeFile resumes a trainer from a checkpoint directory holding an
// arbitrary file in place of its latest checkpoint (and the WAL that
// named the real one): Resume returns an error or falls back, never
// panics, and allocates in proportion to the file.
func FuzzResumeFile(f *testing.F) {
	dir := f.TempDir()
	fuzzCheckpoint(f, dir)
	latest := filepath.Join(dir, "ckpt-epoch-2.safetensors")
	good, err := os.ReadFile(latest)
	if err != nil {
		f.Fatal(err)
	}
	wal, err := os.ReadFile(filepath.Join(dir, "wal.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, wal)
	f.Add(good[:len(good)/2], wal)
	f.Add(good, []byte(`{}`))
	f.Fuzz(func(t *testing.T, ckpt, walData []byte) {
		d := t.TempDir()
		prev, err := os.ReadFile(filepath.Join(dir, "ckpt-epoch-1.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"ckpt-epoch-1.safetensors": prev, "ckpt-epoch-2.safetensors": ckpt, "wal.json": walData} {
			if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := NewTrainer(crashOptions(t, d))
		if err != nil {
			t.Fatal(err)
		}
		fuzzcheck.Budget(t, "Resume", len(ckpt)+len(walData), fuzzcheck.Linear(len(ckpt)+len(walData)+len(prev), 8, 8<<20), func() {
			_, _ = tr.Resume()
		})
	})
}
