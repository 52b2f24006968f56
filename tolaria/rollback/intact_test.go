package rollback

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// intactStore holds the checkpoints of epochs 1 and 2 (mixedState with
// the epoch in its Meta).
func intactStore(t *testing.T) (st *Store, ckpt1, ckpt2 string) {
	t.Helper()
	dir := t.TempDir()
	st = openStore(t, dir, StoreOptions{})
	for e := 1; e <= 2; e++ {
		s := mixedState(t)
		s.Meta.Epoch = e
		noErr(t, st.Write(e, s))
	}
	return st, filepath.Join(dir, "ckpt-epoch-1.safetensors"), filepath.Join(dir, "ckpt-epoch-2.safetensors")
}

// TestLatestIntactFallsBack: a flipped byte or a truncation in the
// newest checkpoint, or a broken WAL, makes LatestIntact return the
// newest checkpoint that verifies on its own, naming what it skipped.
func TestLatestIntactFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		damage    func(ckpt2, wal string, data []byte) error
		wantEpoch int
		skipped   string // base name of the file skipped
	}{
		{"flipped byte", func(c, _ string, d []byte) error { return os.WriteFile(c, flip(d, len(d)/2), 0o644) }, 1, "ckpt-epoch-2.safetensors"},
		{"flipped last byte", func(c, _ string, d []byte) error { return os.WriteFile(c, flip(d, len(d)-1), 0o644) }, 1, "ckpt-epoch-2.safetensors"},
		{"truncated", func(c, _ string, d []byte) error { return os.WriteFile(c, d[:len(d)-7], 0o644) }, 1, "ckpt-epoch-2.safetensors"},
		{"missing", func(c, _ string, _ []byte) error { return os.Remove(c) }, 1, "ckpt-epoch-2.safetensors"},
		{"broken WAL", func(_, w string, _ []byte) error { return os.WriteFile(w, []byte(`{"wal_version":1,`), 0o644) }, 2, "wal.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, ckpt1, ckpt2 := intactStore(t)
			data, err := os.ReadFile(ckpt2)
			noErr(t, err)
			noErr(t, tc.damage(ckpt2, filepath.Join(st.Dir(), walName), data))

			_, _, err = st.Latest()
			var ce *CorruptError
			check(t, errors.As(err, &ce), "Latest accepted the damage: %v", err)

			in, err := st.LatestIntact()
			noErr(t, err)
			check(t, in.Epoch == tc.wantEpoch && in.State.Meta.Epoch == tc.wantEpoch, "fell back to epoch %d (meta %d), want %d", in.Epoch, in.State.Meta.Epoch, tc.wantEpoch)
			want := mixedState(t)
			check(t, sameTensors(in.State.Tensors, want.Tensors) == "", "fallback state: %s", sameTensors(in.State.Tensors, want.Tensors))
			check(t, len(in.Skipped) == 1 && filepath.Base(in.Skipped[0].File) == tc.skipped, "skipped %v", in.Skipped)
			if tc.wantEpoch == 1 {
				check(t, in.Path == ckpt1, "path %s", in.Path)
			}
		})
	}
}

// TestLatestIntactAnswersLikeLatest: with nothing damaged LatestIntact
// is Latest; with no WAL it is ErrNoCheckpoint; with every checkpoint
// damaged it is Latest's *CorruptError; a file that never got its WAL
// record is not a fallback; a file without its own checksum (an older
// writer) is passed over.
func TestLatestIntactAnswersLikeLatest(t *testing.T) {
	st, ckpt1, ckpt2 := intactStore(t)
	in, err := st.LatestIntact()
	noErr(t, err)
	check(t, in.Epoch == 2 && len(in.Skipped) == 0 && in.Path == ckpt2, "intact store: %+v", in)

	_, err = openStore(t, t.TempDir(), StoreOptions{}).LatestIntact()
	check(t, errors.Is(err, ErrNoCheckpoint), "empty store: %v", err)

	// Both damaged: nothing to fall back to.
	for _, p := range []string{ckpt1, ckpt2} {
		d, err := os.ReadFile(p)
		noErr(t, err)
		noErr(t, os.WriteFile(p, flip(d, len(d)-1), 0o644))
	}
	_, err = st.LatestIntact()
	corruptErr(t, err, ckpt2)
	check(t, strings.Contains(err.Error(), "no older checkpoint verifies") && strings.Contains(err.Error(), "ckpt-epoch-1"), "error %q", err)

	// A newer file without a WAL record is never a fallback.
	st, _, ckpt2 = intactStore(t)
	crash := errors.New("power cut")
	st.beforeWAL = func(string) error { return crash }
	check(t, errors.Is(st.Write(3, sized(t, 4, 3)), crash), "the simulated crash did not abort the write")
	d, err := os.ReadFile(ckpt2)
	noErr(t, err)
	noErr(t, os.WriteFile(ckpt2, d[:len(d)/2], 0o644))
	in, err = st.LatestIntact()
	noErr(t, err)
	check(t, in.Epoch == 1, "fell back to epoch %d, want 1 (3 was never committed)", in.Epoch)

	// An older writer's file (no checksum of its own) cannot be verified.
	dir := t.TempDir()
	st = openStore(t, dir, StoreOptions{})
	var buf strings.Builder
	noErr(t, safetensors.Encode(&buf, map[string]*tensor.Tensor{"x": tensor.Scalar(tensor.F32, 1)},
		map[string]string{metaKeyVersion: formatVersion, metaKeyEpoch: "1", metaKeyMeta: "{}"}))
	noErr(t, os.WriteFile(filepath.Join(dir, "ckpt-epoch-1.safetensors"), []byte(buf.String()), 0o644))
	noErr(t, st.Write(2, sized(t, 4, 2)))
	noErr(t, os.WriteFile(filepath.Join(dir, "ckpt-epoch-2.safetensors"), []byte("x"), 0o644))
	_, err = st.LatestIntact()
	check(t, err != nil && strings.Contains(err.Error(), "no checksum of its own"), "old-format fallback: %v", err)
}
