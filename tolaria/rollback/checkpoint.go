package rollback

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/esper-go/esper/internal/atomicfile"
	"github.com/esper-go/esper/tensor/safetensors"
)

// File layout of a Store directory:
//
//	ckpt-epoch-{e}.safetensors   one per retained epoch
//	wal.json                     points at the newest good checkpoint
//
// A checkpoint is a plain safetensors file (it opens with any safetensors
// reader): the State's tensors by name, and in the header's
// "__metadata__" the keys
//
//	"esper.rollback.version"  "1"
//	"esper.rollback.epoch"    the epoch, decimal
//	"esper.rollback.meta"     the State's Meta as JSON
//	"esper.rollback.crc32"    the file's own checksum: CRC-32 (IEEE) of
//	                          the meta value followed by the data section
//	                          (every tensor byte), decimal
//
// The WAL's CRC covers the checkpoint it names; a checkpoint's own
// checksum lets an older one be verified without it (LatestIntact). Files
// written before that key existed load through the WAL as ever.
//
// wal.json is the G1 write-ahead log record:
//
//	{"wal_version":1,"last_checkpoint":"ckpt-epoch-3.safetensors","epoch":3,
//	 "ckpt_crc32":<CRC-32 (IEEE) of the whole checkpoint file>,
//	 "wal_crc32":<CRC-32 (IEEE) of "ckpt-epoch-3.safetensors:3:<ckpt_crc32>">}
//
// with last_checkpoint a file name relative to the directory (G1 stored a
// path; a name keeps the directory movable) and both CRCs as decimal
// unsigned integers, as Python's zlib.crc32 prints them.
const (
	walName       = "wal.json"
	walVersion    = 1
	ckptPrefix    = "ckpt-epoch-"
	ckptSuffix    = ".safetensors"
	tmpMarker     = atomicfile.TempMarker
	formatVersion = "1"

	metaKeyVersion = "esper.rollback.version"
	metaKeyEpoch   = "esper.rollback.epoch"
	metaKeyMeta    = "esper.rollback.meta"
	metaKeyCRC     = "esper.rollback.crc32"
)

// DefaultKeep is how many checkpoints a Store keeps when StoreOptions
// leaves Keep zero.
const DefaultKeep = 2

// ErrNoCheckpoint is returned by Store.Latest when the directory has no
// WAL yet: nothing was ever checkpointed (or the first write crashed
// before its WAL record).
var ErrNoCheckpoint = errors.New("rollback: no checkpoint (no wal.json)")

// CorruptError reports a WAL or checkpoint that failed verification. No
// part of the file was loaded.
type CorruptError struct {
	// File is the path of the offending file.
	File string
	// Offset is the byte position of the problem, or -1 when it has none
	// (a CRC mismatch over the whole file, a missing file).
	Offset int64
	// Reason describes the problem.
	Reason string
	// Err is the underlying error (a *safetensors.FormatError,
	// fs.ErrNotExist, a JSON error), or nil.
	Err error
}

func (e *CorruptError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("rollback: %s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("rollback: %s: offset %d: %s", e.File, e.Offset, e.Reason)
}

// Unwrap returns the underlying error.
func (e *CorruptError) Unwrap() error { return e.Err }

// StoreOptions configure Open. The zero value keeps DefaultKeep
// checkpoints and reads with os.ReadFile.
type StoreOptions struct {
	// Keep is how many checkpoints to retain, ≥ 1; 0 means DefaultKeep.
	Keep int
	// ReadFile reads a whole file (the WAL, then the checkpoint); nil
	// means os.ReadFile. It is the seam for slow or remote storage, and
	// for tests that need a reader that blocks.
	ReadFile func(path string) ([]byte, error)
}

// Store is the slow rollback tier: checkpoints plus a WAL in one
// directory, every file written atomically (temporary file, fsync,
// rename, fsync of the directory). Only one Store (one process) may write
// a directory at a time. Its methods are safe for concurrent use.
type Store struct {
	dir      string
	keep     int
	readFile func(string) ([]byte, error)

	// beforeWAL, when set by a test, runs after the checkpoint is in place
	// and before the WAL is written; an error aborts Write there, as a
	// crash would.
	beforeWAL func(ckptPath string) error

	mu sync.Mutex // serialises Writes; Latest takes no lock
}

// Open returns a Store over dir, creating the directory if needed, and
// removes temporary files that a crashed writer left behind.
func Open(dir string, o StoreOptions) (*Store, error) {
	if o.Keep < 0 {
		return nil, fmt.Errorf("rollback: StoreOptions.Keep = %d must not be negative", o.Keep)
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("rollback: open store: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rollback: open store: %w", err)
	}
	for _, e := range ents {
		if isTemp(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("rollback: open store: remove stale temporary file: %w", err)
			}
		}
	}
	return &Store{dir: dir, keep: o.Keep, readFile: o.ReadFile}, nil
}

// Dir returns the store's directory.
func (st *Store) Dir() string { return st.dir }

// Path returns the path of the checkpoint file of epoch, whether or not
// it exists.
func (st *Store) Path(epoch int) string { return filepath.Join(st.dir, checkpointName(epoch)) }

// isTemp reports whether name is a temporary file of ours:
// ".{target}.tmp-{random}" for a WAL or checkpoint target.
func isTemp(name string) bool {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return false
	}
	target, _, ok := strings.Cut(rest, tmpMarker)
	if !ok {
		return false
	}
	_, isCkpt := parseCheckpointName(target)
	return target == walName || isCkpt
}

func checkpointName(epoch int) string { return ckptPrefix + strconv.Itoa(epoch) + ckptSuffix }

// parseCheckpointName returns the epoch of a canonical checkpoint name.
func parseCheckpointName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, ckptPrefix)
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, ckptSuffix); !ok {
		return 0, false
	}
	e, err := strconv.Atoi(s)
	if err != nil || e < 0 || strconv.Itoa(e) != s {
		return 0, false
	}
	return e, true
}

// walRecord is wal.json. Pointers tell a missing field from a zero one.
type walRecord struct {
	WALVersion     *int    `json:"wal_version"`
	LastCheckpoint *string `json:"last_checkpoint"`
	Epoch          *int    `json:"epoch"`
	CkptCRC32      *uint32 `json:"ckpt_crc32"`
	WALCRC32       *uint32 `json:"wal_crc32"`
}

// walCRC is the G1 WAL checksum: CRC-32 of "path:epoch:ckpt_crc32".
func walCRC(name string, epoch int, ckptCRC uint32) uint32 {
	return crc32.ChecksumIEEE(fmt.Appendf(nil, "%s:%d:%d", name, epoch, ckptCRC))
}

// Write checkpoints s as epoch: the checkpoint file first, then the WAL
// pointing at it, each atomically, then it deletes the checkpoints that
// fall out of retention: it keeps the new one and the Keep−1 highest
// epochs below it, and deletes the rest, including epochs above the new
// one (left by a timeline abandoned at a rollback). A crash at any point
// leaves the WAL pointing at a complete, verified checkpoint.
//
// Rewriting the epoch the WAL already points at replaces that file before
// the WAL; a crash in between leaves a WAL whose CRC no longer matches,
// which Latest reports as a *CorruptError rather than loading it.
//
// Tensors may lie on any device: those off the CPU are brought over
// first, all of them at once (nn.HostCopies: one host sync per device and
// dtype), and s itself is left as it is. On an error after the WAL was
// written (old checkpoints could not be deleted) the new checkpoint is in
// place and the error says so.
func (st *Store) Write(epoch int, s State) error {
	if epoch < 0 {
		return fmt.Errorf("rollback: checkpoint epoch %d is negative", epoch)
	}
	if err := s.validate(); err != nil {
		return err
	}
	meta, err := s.encodeMeta()
	if err != nil {
		return err
	}
	tensors, err := hostTensors(s.Tensors)
	if err != nil {
		return err
	}
	s.Tensors = tensors
	own, err := contentCRC(meta, s.Tensors)
	if err != nil {
		return fmt.Errorf("rollback: checksum: %w", err)
	}
	md := map[string]string{
		metaKeyVersion: formatVersion,
		metaKeyEpoch:   strconv.Itoa(epoch),
		metaKeyMeta:    string(meta),
		metaKeyCRC:     strconv.FormatUint(uint64(own), 10),
	}
	name := checkpointName(epoch)

	st.mu.Lock()
	defer st.mu.Unlock()
	sum := crc32.NewIEEE()
	err = writeAtomic(st.dir, name, func(w io.Writer) error {
		return safetensors.Encode(io.MultiWriter(w, sum), s.Tensors, md)
	})
	if err != nil {
		return fmt.Errorf("rollback: write checkpoint: %w", err)
	}
	ckptCRC := sum.Sum32()
	if st.beforeWAL != nil {
		if err := st.beforeWAL(filepath.Join(st.dir, name)); err != nil {
			return err
		}
	}
	v, wcrc := walVersion, walCRC(name, epoch, ckptCRC)
	rec, err := json.Marshal(walRecord{WALVersion: &v, LastCheckpoint: &name, Epoch: &epoch, CkptCRC32: &ckptCRC, WALCRC32: &wcrc})
	if err != nil {
		return fmt.Errorf("rollback: encode WAL: %w", err)
	}
	rec = append(rec, '\n')
	if err := writeAtomic(st.dir, walName, func(w io.Writer) error { _, err := w.Write(rec); return err }); err != nil {
		return fmt.Errorf("rollback: write WAL: %w", err)
	}
	if err := st.prune(epoch); err != nil {
		return fmt.Errorf("rollback: epoch %d checkpointed, but removing old checkpoints failed: %w", epoch, err)
	}
	return nil
}

// prune deletes the checkpoints out of retention once the WAL points at
// epoch current.
func (st *Store) prune(current int) error {
	epochs, err := st.checkpoints()
	if err != nil {
		return err
	}
	kept := 1 // current itself
	var errs []error
	for i := len(epochs) - 1; i >= 0; i-- { // highest first
		e := epochs[i]
		switch {
		case e == current:
			continue
		case e < current && kept < st.keep:
			kept++
			continue
		}
		if err := os.Remove(filepath.Join(st.dir, checkpointName(e))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Checkpoints returns the epochs of the checkpoint files in the
// directory, ascending. Not every one is necessarily valid: only the one
// the WAL names is verified (by Latest).
func (st *Store) Checkpoints() ([]int, error) { return st.checkpoints() }

func (st *Store) checkpoints() ([]int, error) {
	ents, err := os.ReadDir(st.dir)
	if err != nil {
		return nil, fmt.Errorf("rollback: list checkpoints: %w", err)
	}
	var out []int
	for _, e := range ents {
		if ep, ok := parseCheckpointName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, ep)
		}
	}
	sort.Ints(out)
	return out, nil
}

// Latest returns the checkpoint the WAL points at and its epoch, after
// verifying the WAL's own CRC, that it names the checkpoint of its epoch,
// the checkpoint file's CRC and its format. Any failure is a
// *CorruptError naming the file (with the byte offset where one is
// known) and nothing is returned; no WAL at all is ErrNoCheckpoint.
//
// Latest takes no lock, so a read stuck on a slow disk never holds up
// Write. A Write racing with it can delete or replace the checkpoint
// between the two reads; Latest notices that the WAL changed meanwhile
// and starts over (a few times at most) instead of reporting corruption.
func (st *Store) Latest() (State, int, error) {
	const attempts = 3
	walPath := filepath.Join(st.dir, walName)
	var walData []byte
	for try := 1; ; try++ {
		if walData == nil {
			var err error
			if walData, err = st.readWAL(walPath); err != nil {
				return State{}, 0, err
			}
		}
		s, epoch, err := st.load(walPath, walData)
		if err == nil || try == attempts {
			return s, epoch, err
		}
		again, rerr := st.readWAL(walPath)
		if rerr != nil || bytes.Equal(again, walData) {
			return State{}, 0, err // the failure was not a race
		}
		walData = again
	}
}

func (st *Store) readWAL(path string) ([]byte, error) {
	b, err := st.readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, ErrNoCheckpoint
	case err != nil:
		return nil, fmt.Errorf("rollback: read WAL: %w", err)
	}
	return b, nil
}

// load verifies walData and loads the checkpoint it names.
func (st *Store) load(walPath string, walData []byte) (State, int, error) {
	rec, err := parseWAL(walPath, walData)
	if err != nil {
		return State{}, 0, err
	}
	ckptPath := filepath.Join(st.dir, checkpointName(rec.epoch))
	data, err := st.readFile(ckptPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return State{}, 0, &CorruptError{File: ckptPath, Offset: -1, Reason: "the checkpoint the WAL names is missing", Err: err}
		}
		return State{}, 0, fmt.Errorf("rollback: read checkpoint: %w", err)
	}
	s, err := decodeCheckpoint(ckptPath, data, rec)
	if err != nil {
		return State{}, 0, err
	}
	return s, rec.epoch, nil
}

// wal is a verified WAL record.
type wal struct {
	epoch   int
	ckptCRC uint32
}

// parseWAL decodes and verifies wal.json strictly.
func parseWAL(path string, data []byte) (wal, error) {
	bad := func(off int64, err error, format string, args ...any) (wal, error) {
		return wal{}, &CorruptError{File: path, Offset: off, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r walRecord
	if err := dec.Decode(&r); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return bad(int64(len(data)), err, "WAL ends after %d bytes (truncated)", len(data))
		case errors.As(err, &se):
			return bad(se.Offset, err, "WAL is not valid JSON: %v", err)
		case errors.As(err, &te):
			return bad(te.Offset, err, "WAL field has the wrong type: %v", err)
		}
		return bad(dec.InputOffset(), err, "WAL does not decode: %v", err)
	}
	if off := dec.InputOffset(); len(bytes.TrimSpace(data[off:])) != 0 {
		return bad(off, nil, "WAL has data after its JSON object")
	}
	switch {
	case r.WALVersion == nil, r.LastCheckpoint == nil, r.Epoch == nil, r.CkptCRC32 == nil, r.WALCRC32 == nil:
		return bad(-1, nil, "WAL lacks a field (want wal_version, last_checkpoint, epoch, ckpt_crc32, wal_crc32)")
	case *r.WALVersion != walVersion:
		return bad(-1, nil, "unsupported wal_version %d (want %d)", *r.WALVersion, walVersion)
	}
	if got := walCRC(*r.LastCheckpoint, *r.Epoch, *r.CkptCRC32); got != *r.WALCRC32 {
		return bad(-1, nil, "WAL CRC32 mismatch: record hashes to %d, wal_crc32 says %d", got, *r.WALCRC32)
	}
	if *r.Epoch < 0 || *r.LastCheckpoint != checkpointName(*r.Epoch) {
		return bad(-1, nil, "WAL names checkpoint %q for epoch %d (want %q)", *r.LastCheckpoint, *r.Epoch, checkpointName(max(*r.Epoch, 0)))
	}
	return wal{epoch: *r.Epoch, ckptCRC: *r.CkptCRC32}, nil
}

// decodeCheckpoint verifies data against the WAL record and decodes it.
func decodeCheckpoint(path string, data []byte, rec wal) (State, error) {
	if got := crc32.ChecksumIEEE(data); got != rec.ckptCRC {
		ce := &CorruptError{File: path, Offset: -1, Reason: fmt.Sprintf("CRC32 mismatch: file (%d bytes) hashes to %d, the WAL expects %d", len(data), got, rec.ckptCRC)}
		// The parser can often say where the damage is (a truncation, a
		// broken header); the CRC alone cannot.
		var fe *safetensors.FormatError
		if _, err := safetensors.Parse(data, path); errors.As(err, &fe) {
			ce.Offset, ce.Reason, ce.Err = fe.Offset, ce.Reason+"; "+fe.Msg, fe
		}
		return State{}, ce
	}
	f, err := parseCheckpoint(path, data)
	if err != nil {
		return State{}, err
	}
	return checkpointState(path, f, rec.epoch, "the WAL says")
}

// parseCheckpoint parses a checkpoint file's bytes, a malformed one being
// a *CorruptError at the parser's offset.
func parseCheckpoint(path string, data []byte) (*safetensors.File, error) {
	f, err := safetensors.Parse(data, path)
	if err != nil {
		var fe *safetensors.FormatError
		if errors.As(err, &fe) {
			return nil, &CorruptError{File: path, Offset: fe.Offset, Reason: fe.Msg, Err: fe}
		}
		return nil, &CorruptError{File: path, Offset: -1, Reason: err.Error(), Err: err}
	}
	return f, nil
}

// checkpointState checks a parsed checkpoint's format version and epoch
// (the one that, per who, it should hold) and decodes its State.
func checkpointState(path string, f *safetensors.File, epoch int, who string) (State, error) {
	bad := func(format string, args ...any) (State, error) {
		return State{}, &CorruptError{File: path, Offset: -1, Reason: fmt.Sprintf(format, args...)}
	}
	if v := f.Metadata[metaKeyVersion]; v != formatVersion {
		return bad("%s = %q, want %q", metaKeyVersion, v, formatVersion)
	}
	if e := f.Metadata[metaKeyEpoch]; e != strconv.Itoa(epoch) {
		return bad("%s = %q, but %s epoch %d", metaKeyEpoch, e, who, epoch)
	}
	var m Meta
	if err := json.Unmarshal([]byte(f.Metadata[metaKeyMeta]), &m); err != nil {
		return State{}, &CorruptError{File: path, Offset: -1, Reason: fmt.Sprintf("%s does not decode: %v", metaKeyMeta, err), Err: err}
	}
	// A checksum proves the bytes are those written, not that they make
	// sense: a writer (or a hand) can sign anything.
	if err := m.validate(); err != nil {
		return bad("%s: %v", metaKeyMeta, err)
	}
	return State{Tensors: f.Tensors, Meta: m}, nil
}

// writeAtomic writes name in dir atomically (internal/atomicfile): on
// error the temporary file is removed and an existing name is left as it
// was.
func writeAtomic(dir, name string, fill func(io.Writer) error) error {
	return atomicfile.Write(filepath.Join(dir, name), fill, atomicfile.Options{})
}
