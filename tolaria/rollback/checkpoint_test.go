package rollback

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

func openStore(t *testing.T, dir string, o StoreOptions) *Store {
	t.Helper()
	st, err := Open(dir, o)
	noErr(t, err)
	return st
}

// storeWith returns a store holding mixedState as epoch 3, and the paths
// of the checkpoint and the WAL.
func storeWith(t *testing.T) (st *Store, ckpt, wal string) {
	t.Helper()
	dir := t.TempDir()
	st = openStore(t, dir, StoreOptions{})
	noErr(t, st.Write(3, mixedState(t)))
	return st, filepath.Join(dir, "ckpt-epoch-3.safetensors"), filepath.Join(dir, "wal.json")
}

func TestCheckpointRoundTrip(t *testing.T) {
	st, ckpt, walPath := storeWith(t)
	want := mixedState(t)
	got, epoch, err := st.Latest()
	noErr(t, err)
	check(t, epoch == 3, "epoch %d", epoch)
	check(t, sameTensors(got.Tensors, want.Tensors) == "", "round trip: %s", sameTensors(got.Tensors, want.Tensors))
	check(t, reflect.DeepEqual(got.Meta, want.Meta), "meta %+v, want %+v", got.Meta, want.Meta)
	check(t, reflect.DeepEqual(dirNames(t, st.Dir()), []string{"ckpt-epoch-3.safetensors", "wal.json"}), "directory holds %v", dirNames(t, st.Dir()))

	// The checkpoint is a plain safetensors file.
	f, err := safetensors.ReadFile(ckpt)
	noErr(t, err)
	check(t, f.Metadata["esper.rollback.version"] == "1" && f.Metadata["esper.rollback.epoch"] == "3", "metadata %v", f.Metadata)
	check(t, len(f.Tensors) == len(want.Tensors), "file holds %d tensors", len(f.Tensors))

	// The WAL is the G1 record.
	var rec map[string]any
	b, err := os.ReadFile(walPath)
	noErr(t, err)
	noErr(t, json.Unmarshal(b, &rec))
	check(t, rec["wal_version"] == 1.0 && rec["last_checkpoint"] == "ckpt-epoch-3.safetensors" && rec["epoch"] == 3.0, "WAL %s", b)
	data, err := os.ReadFile(ckpt)
	noErr(t, err)
	crc := uint32(rec["ckpt_crc32"].(float64))
	check(t, crc == crc32IEEE(data), "ckpt_crc32 %d is not the file's CRC %d", crc, crc32IEEE(data))
	check(t, uint32(rec["wal_crc32"].(float64)) == crc32IEEE(fmt.Appendf(nil, "ckpt-epoch-3.safetensors:3:%d", crc)), "wal_crc32 is not CRC32(path:epoch:ckpt_crc32)")
}

func TestCheckpointEmptyState(t *testing.T) {
	st := openStore(t, t.TempDir(), StoreOptions{})
	noErr(t, st.Write(0, State{}))
	got, epoch, err := st.Latest()
	noErr(t, err)
	check(t, epoch == 0 && len(got.Tensors) == 0 && reflect.DeepEqual(got.Meta, Meta{}), "got %+v epoch %d", got, epoch)
}

func TestLatestWithoutWAL(t *testing.T) {
	st := openStore(t, t.TempDir(), StoreOptions{})
	_, _, err := st.Latest()
	check(t, errors.Is(err, ErrNoCheckpoint), "empty store gave %v", err)
}

func TestCheckpointCorruption(t *testing.T) {
	_, ckpt, _ := storeWith(t)
	good, err := os.ReadFile(ckpt)
	noErr(t, err)
	hdrEnd := 8 + int(leUint64(good[:8]))

	cases := []struct {
		name   string
		data   []byte
		format bool // the parser locates the damage too
	}{
		{"flip data byte", flip(good, len(good)-1), false},
		{"flip header length", flip(good, 0), true},
		{"flip header JSON", flip(good, 9), true},
		{"flip first data byte", flip(good, hdrEnd), false},
		{"empty", good[:0], true},
		{"truncated in the length", good[:5], true},
		{"truncated in the header", good[:hdrEnd/2], true},
		{"truncated at the data", good[:hdrEnd], true},
		{"truncated in the data", good[:hdrEnd+10], true},
		{"last byte missing", good[:len(good)-1], true},
		{"extra byte", append(append([]byte(nil), good...), 0), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noErr(t, os.WriteFile(ckpt, tc.data, 0o644))
			st := openStore(t, filepath.Dir(ckpt), StoreOptions{})
			s, _, err := st.Latest()
			ce := corruptErr(t, err, ckpt)
			check(t, strings.Contains(ce.Reason, "CRC32 mismatch"), "reason %q", ce.Reason)
			check(t, s.Tensors == nil, "a refused checkpoint returned tensors")
			var fe *safetensors.FormatError
			if tc.format {
				check(t, errors.As(err, &fe) && ce.Offset >= 0, "no parser offset in %v", err)
			}
		})
	}
	noErr(t, os.WriteFile(ckpt, good, 0o644))
}

// A checkpoint whose CRC matches but whose content is not ours (another
// writer, a re-encoded file) is still verified before use.
func TestCheckpointForeignContent(t *testing.T) {
	st, ckpt, _ := storeWith(t)
	for _, tc := range []struct {
		name string
		md   map[string]string
		want string
	}{
		{"no version", map[string]string{"esper.rollback.epoch": "3", "esper.rollback.meta": "{}"}, "esper.rollback.version"},
		{"wrong epoch", map[string]string{"esper.rollback.version": "1", "esper.rollback.epoch": "4", "esper.rollback.meta": "{}"}, "epoch"},
		{"bad meta", map[string]string{"esper.rollback.version": "1", "esper.rollback.epoch": "3", "esper.rollback.meta": "{"}, "esper.rollback.meta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			noErr(t, safetensors.Encode(&buf, map[string]*tensor.Tensor{"x": tensor.Scalar(tensor.F32, 1)}, tc.md))
			data := []byte(buf.String())
			noErr(t, os.WriteFile(ckpt, data, 0o644))
			writeWAL(t, st.Dir(), "ckpt-epoch-3.safetensors", 3, crc32IEEE(data), nil)
			_, _, err := st.Latest()
			ce := corruptErr(t, err, ckpt)
			check(t, strings.Contains(ce.Reason, tc.want), "reason %q does not mention %q", ce.Reason, tc.want)
		})
	}
}

func TestWALCorruption(t *testing.T) {
	st, ckpt, walPath := storeWith(t)
	good, err := os.ReadFile(walPath)
	noErr(t, err)
	data, err := os.ReadFile(ckpt)
	noErr(t, err)
	crc := crc32IEEE(data)
	name := "ckpt-epoch-3.safetensors"

	t.Run("flipped digit", func(t *testing.T) {
		s := strings.Replace(string(good), fmt.Sprint(crc), fmt.Sprint(crc^1), 1)
		noErr(t, os.WriteFile(walPath, []byte(s), 0o644))
		ce := corruptErr(t, second(st.Latest()), walPath)
		check(t, strings.Contains(ce.Reason, "WAL CRC32 mismatch"), "reason %q", ce.Reason)
	})
	for _, n := range []int{0, 1, 10, len(good) / 2, len(good) - 3} {
		t.Run(fmt.Sprintf("truncated at %d", n), func(t *testing.T) {
			noErr(t, os.WriteFile(walPath, good[:n], 0o644))
			ce := corruptErr(t, second(st.Latest()), walPath)
			check(t, ce.Offset >= 0 && ce.Offset <= int64(n), "offset %d for a WAL of %d bytes", ce.Offset, n)
		})
	}
	for _, tc := range []struct{ name, body, want string }{
		{"garbage", "not json", "not valid JSON"},
		{"trailing data", strings.TrimSpace(string(good)) + "{}", "after its JSON"},
		{"unknown field", `{"wal_version":1,"extra":1}`, "decode"},
		{"missing field", `{"wal_version":1}`, "lacks a field"},
		{"wrong type", `{"wal_version":"1"}`, "wrong type"},
		{"negative crc", `{"wal_version":1,"ckpt_crc32":-1}`, "wrong type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noErr(t, os.WriteFile(walPath, []byte(tc.body), 0o644))
			ce := corruptErr(t, second(st.Latest()), walPath)
			check(t, strings.Contains(ce.Reason, tc.want), "reason %q does not say %q", ce.Reason, tc.want)
		})
	}
	t.Run("wrong version", func(t *testing.T) {
		v := 2
		writeWAL(t, st.Dir(), name, 3, crc, &v)
		ce := corruptErr(t, second(st.Latest()), walPath)
		check(t, strings.Contains(ce.Reason, "wal_version"), "reason %q", ce.Reason)
	})
	t.Run("path outside the directory", func(t *testing.T) {
		writeWAL(t, st.Dir(), "../"+name, 3, crc, nil)
		ce := corruptErr(t, second(st.Latest()), walPath)
		check(t, strings.Contains(ce.Reason, "names checkpoint"), "reason %q", ce.Reason)
	})
	t.Run("checkpoint of another epoch", func(t *testing.T) {
		writeWAL(t, st.Dir(), name, 4, crc, nil)
		ce := corruptErr(t, second(st.Latest()), walPath)
		check(t, strings.Contains(ce.Reason, "names checkpoint"), "reason %q", ce.Reason)
	})
	t.Run("missing checkpoint", func(t *testing.T) {
		noErr(t, os.WriteFile(walPath, good, 0o644))
		noErr(t, os.Rename(ckpt, ckpt+".moved"))
		defer os.Rename(ckpt+".moved", ckpt)
		err := second(st.Latest())
		corruptErr(t, err, ckpt)
		check(t, errors.Is(err, fs.ErrNotExist), "missing checkpoint error %v does not wrap fs.ErrNotExist", err)
	})

	noErr(t, os.WriteFile(walPath, good, 0o644))
	_, epoch, err := st.Latest()
	check(t, err == nil && epoch == 3, "restored WAL: epoch %d, %v", epoch, err)
}

// TestCrashBeforeWAL: a checkpoint that made it to disk without its WAL
// record is never used; the previous good one is.
func TestCrashBeforeWAL(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir, StoreOptions{Keep: 5})
	first := sized(t, 10, 1)
	first.Meta.Epoch = 1
	noErr(t, st.Write(1, first))

	crash := errors.New("power cut")
	st.beforeWAL = func(string) error { return crash }
	check(t, errors.Is(st.Write(2, sized(t, 10, 2)), crash), "the simulated crash did not abort the write")
	st.beforeWAL = nil
	_, err := os.Stat(filepath.Join(dir, "ckpt-epoch-2.safetensors"))
	noErr(t, err) // the new checkpoint is on disk, the WAL does not know it

	// A half-written file of a later epoch, written by hand, is ignored too.
	noErr(t, os.WriteFile(filepath.Join(dir, "ckpt-epoch-3.safetensors"), []byte("half a file"), 0o644))

	st = openStore(t, dir, StoreOptions{Keep: 5}) // "after the restart"
	got, epoch, err := st.Latest()
	noErr(t, err)
	check(t, epoch == 1 && sameTensors(got.Tensors, first.Tensors) == "" && got.Meta.Epoch == 1, "Latest returned epoch %d, not the last good checkpoint", epoch)

	// The next successful write supersedes the orphans.
	noErr(t, st.Write(3, sized(t, 10, 3)))
	got, epoch, err = st.Latest()
	noErr(t, err)
	check(t, epoch == 3 && w0(t, got) == 3, "epoch %d after rewriting", epoch)
}

func TestAtomicWrites(t *testing.T) {
	dir := t.TempDir()
	// Temporary files a crashed writer left behind, and one that is not ours.
	stale := []string{".ckpt-epoch-5.safetensors.tmp-123", ".wal.json.tmp-456"}
	for _, n := range append(stale, ".notes.tmp-1") {
		noErr(t, os.WriteFile(filepath.Join(dir, n), []byte("partial"), 0o644))
	}
	st := openStore(t, dir, StoreOptions{})
	check(t, reflect.DeepEqual(dirNames(t, dir), []string{".notes.tmp-1"}), "Open left %v", dirNames(t, dir))

	for e := 0; e < 3; e++ {
		noErr(t, st.Write(e, sized(t, 100, float64(e))))
	}
	// A temporary file appearing later (another crash) is ignored by Latest.
	noErr(t, os.WriteFile(filepath.Join(dir, stale[1]), []byte(`{"wal_version":1`), 0o644))
	_, epoch, err := st.Latest()
	check(t, err == nil && epoch == 2, "Latest with a stale temp WAL: %d, %v", epoch, err)
	noErr(t, os.Remove(filepath.Join(dir, stale[1])))
	check(t, reflect.DeepEqual(dirNames(t, dir), []string{".notes.tmp-1", "ckpt-epoch-1.safetensors", "ckpt-epoch-2.safetensors", "wal.json"}), "directory holds %v", dirNames(t, dir))

	// A write that fails midway removes its temporary file and leaves the
	// target as it was.
	before, err := os.ReadFile(filepath.Join(dir, "wal.json"))
	noErr(t, err)
	err = writeAtomic(dir, "wal.json", func(w io.Writer) error {
		w.Write([]byte("half"))
		return errors.New("disk full")
	})
	check(t, err != nil, "failing fill succeeded")
	after, err := os.ReadFile(filepath.Join(dir, "wal.json"))
	noErr(t, err)
	check(t, string(before) == string(after), "a failed write changed the target")
	check(t, len(dirNames(t, dir)) == 4, "a failed write left %v", dirNames(t, dir))

	// A state that cannot be written is refused before touching the disk.
	bad := sized(t, 1, 0)
	bad.Meta.Extra = map[string]json.RawMessage{"x": json.RawMessage("{")}
	check(t, st.Write(3, bad) != nil, "invalid meta accepted")
	check(t, st.Write(-1, sized(t, 1, 0)) != nil, "negative epoch accepted")
	check(t, st.Write(3, State{Tensors: map[string]*tensor.Tensor{"__metadata__": tensor.Scalar(tensor.F32, 0)}}) != nil, "reserved name accepted")
	check(t, len(dirNames(t, dir)) == 4, "refused writes left %v", dirNames(t, dir))
}

func TestRetention(t *testing.T) {
	for _, keep := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("keep %d", keep), func(t *testing.T) {
			st := openStore(t, t.TempDir(), StoreOptions{Keep: keep})
			for e := 0; e < 6; e++ {
				noErr(t, st.Write(e, sized(t, 4, float64(e))))
			}
			k := keep
			if k == 0 {
				k = DefaultKeep
			}
			var want []int
			for e := 6 - k; e < 6; e++ {
				want = append(want, e)
			}
			got, err := st.Checkpoints()
			noErr(t, err)
			check(t, reflect.DeepEqual(got, want), "kept %v, want %v", got, want)
		})
	}

	// After a rollback the trainer rewrites an earlier epoch: the epochs
	// of the abandoned timeline above it go.
	st := openStore(t, t.TempDir(), StoreOptions{Keep: 3})
	for e := 0; e < 6; e++ {
		noErr(t, st.Write(e, sized(t, 4, float64(e))))
	}
	noErr(t, st.Write(4, sized(t, 4, 40)))
	got, err := st.Checkpoints()
	noErr(t, err)
	check(t, reflect.DeepEqual(got, []int{3, 4}), "after rewriting epoch 4 kept %v", got)
	s, epoch, err := st.Latest()
	noErr(t, err)
	check(t, epoch == 4 && w0(t, s) == 40, "Latest after rewrite: epoch %d", epoch)

	_, err = Open(t.TempDir(), StoreOptions{Keep: -1})
	check(t, err != nil, "negative Keep accepted")
}

func TestOpenRejectsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	noErr(t, os.WriteFile(path, nil, 0o644))
	_, err := Open(path, StoreOptions{})
	check(t, err != nil, "Open over a regular file succeeded")
}

// writeWAL writes a WAL record with a correct wal_crc32 (version 1 unless
// given).
func writeWAL(t *testing.T, dir, name string, epoch int, crc uint32, version *int) {
	t.Helper()
	v := walVersion
	if version != nil {
		v = *version
	}
	w := walCRC(name, epoch, crc)
	b, err := json.Marshal(walRecord{WALVersion: &v, LastCheckpoint: &name, Epoch: &epoch, CkptCRC32: &crc, WALCRC32: &w})
	noErr(t, err)
	noErr(t, os.WriteFile(filepath.Join(dir, walName), b, 0o644))
}

func second(_ State, _ int, err error) error { return err }

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x40
	return c
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestWriteFromDevice: a state whose tensors (of several dtypes) lie on
// the test device is written with one host sync (nn.HostCopies gathers
// each dtype on the device and copies them over together), and reads
// back bitwise; the state itself keeps its device tensors.
func TestWriteFromDevice(t *testing.T) {
	dev := testdevice.Device(t)
	s := mixedState(t)
	dtypes := map[tensor.DType]bool{}
	for _, x := range s.Tensors {
		dtypes[x.DType()] = true
	}
	st := openStore(t, t.TempDir(), StoreOptions{})
	before := tensor.HostSyncs(dev)
	noErr(t, st.Write(1, s))
	want := uint64(0)
	if testdevice.OnDevice(t) {
		want = 1
	}
	check(t, len(dtypes) > 1, "the state holds one dtype")
	check(t, tensor.HostSyncs(dev)-before == want, "Write: %d host syncs, want %d (every dtype's gathered copy in one read)", tensor.HostSyncs(dev)-before, want)
	for n, x := range s.Tensors {
		check(t, x.Device() == dev, "Write moved %s to %v", n, x.Device())
	}
	got, _, err := st.Latest()
	noErr(t, err)
	check(t, sameTensors(got.Tensors, s.Tensors) == "", "round trip from %v: %s", dev, sameTensors(got.Tensors, s.Tensors))
}
