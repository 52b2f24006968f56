package rollback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// Intact is the checkpoint LatestIntact found.
type Intact struct {
	// State is the checkpoint's state and Epoch its epoch.
	State State
	Epoch int
	// Path is the checkpoint file.
	Path string
	// Skipped holds what LatestIntact passed over to reach it, newest
	// first: the WAL's checkpoint (or the WAL itself) and any newer file
	// that failed its own checksum. Empty when the WAL's checkpoint
	// verified.
	Skipped []*CorruptError
}

// LatestIntact is Latest with a fallback: when the WAL's checkpoint (or
// the WAL) fails verification, it returns the newest older checkpoint
// file that verifies on its own (its own checksum, format and epoch),
// reporting the corrupt ones in Intact.Skipped. With the WAL unreadable,
// every checkpoint file is a candidate; otherwise only those below the
// WAL's epoch, so that a checkpoint whose WAL record was never written
// (a crash in between) stays unused, as with Latest.
//
// A file written before checkpoints carried their own checksum cannot be
// verified without the WAL and is passed over. When nothing verifies,
// the error wraps Latest's *CorruptError. No WAL at all is
// ErrNoCheckpoint, as with Latest.
func (st *Store) LatestIntact() (Intact, error) {
	s, epoch, err := st.Latest()
	if err == nil {
		return Intact{State: s, Epoch: epoch, Path: filepath.Join(st.dir, checkpointName(epoch))}, nil
	}
	var first *CorruptError
	if !errors.As(err, &first) {
		return Intact{}, err
	}
	below := -1 // every file, when the WAL itself is unreadable
	if data, rerr := st.readFile(filepath.Join(st.dir, walName)); rerr == nil {
		if rec, perr := parseWAL(filepath.Join(st.dir, walName), data); perr == nil {
			below = rec.epoch
		}
	}
	epochs, lerr := st.checkpoints()
	if lerr != nil {
		return Intact{}, errors.Join(err, lerr)
	}
	skipped := []*CorruptError{first}
	for i := len(epochs) - 1; i >= 0; i-- {
		e := epochs[i]
		if below >= 0 && e >= below {
			continue
		}
		path := filepath.Join(st.dir, checkpointName(e))
		s, verr := st.loadSelfVerified(path, e)
		var ce *CorruptError
		switch {
		case verr == nil:
			return Intact{State: s, Epoch: e, Path: path, Skipped: skipped}, nil
		case errors.As(verr, &ce):
			skipped = append(skipped, ce)
		default:
			return Intact{}, errors.Join(err, verr)
		}
	}
	if len(skipped) == 1 {
		return Intact{}, fmt.Errorf("%w (and no older checkpoint to fall back to)", err)
	}
	return Intact{}, fmt.Errorf("%w (and no older checkpoint verifies: %v)", err, errors.Join(asErrors(skipped[1:])...))
}

func asErrors(ces []*CorruptError) []error {
	out := make([]error, len(ces))
	for i, ce := range ces {
		out[i] = ce
	}
	return out
}

// loadSelfVerified reads the checkpoint at path, which should hold epoch,
// and verifies it by its own checksum instead of the WAL's.
func (st *Store) loadSelfVerified(path string, epoch int) (State, error) {
	data, err := st.readFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return State{}, &CorruptError{File: path, Offset: -1, Reason: "the checkpoint vanished", Err: err}
		}
		return State{}, fmt.Errorf("rollback: read checkpoint: %w", err)
	}
	f, err := parseCheckpoint(path, data)
	if err != nil {
		return State{}, err
	}
	want, ok := f.Metadata[metaKeyCRC]
	if !ok {
		return State{}, &CorruptError{File: path, Offset: -1, Reason: "no checksum of its own (written by an older esper): it can only be verified through the WAL"}
	}
	// A file that parses has an 8-byte header length and its header.
	start := 8 + binary.LittleEndian.Uint64(data[:8])
	h := crc32.NewIEEE()
	h.Write([]byte(f.Metadata[metaKeyMeta]))
	h.Write(data[start:])
	if got := strconv.FormatUint(uint64(h.Sum32()), 10); got != want {
		return State{}, &CorruptError{File: path, Offset: -1, Reason: fmt.Sprintf("CRC32 mismatch: content hashes to %s, %s says %s", got, metaKeyCRC, want)}
	}
	return checkpointState(path, f, epoch, "its name says")
}

// contentCRC is a checkpoint's own checksum: CRC-32 of meta followed by
// the safetensors data section of tensors (Encode's layout: every tensor
// in name order, packed), computed without writing the file.
func contentCRC(meta []byte, tensors map[string]*tensor.Tensor) (uint32, error) {
	h := crc32.NewIEEE()
	h.Write(meta)
	if err := safetensors.Encode(&dataSection{w: h}, tensors, nil); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

// dataSection passes on what follows a safetensors stream's header: the
// 8-byte header length and the header are dropped.
type dataSection struct {
	w    hash.Hash32
	pre  [8]byte
	seen int    // prefix bytes seen
	skip uint64 // header bytes still to drop
}

var _ io.Writer = (*dataSection)(nil)

func (d *dataSection) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && d.seen < len(d.pre) {
		d.pre[d.seen] = p[0]
		d.seen++
		p = p[1:]
		if d.seen == len(d.pre) {
			d.skip = binary.LittleEndian.Uint64(d.pre[:])
		}
	}
	k := min(uint64(len(p)), d.skip)
	p, d.skip = p[k:], d.skip-k
	d.w.Write(p) // a hash never fails
	return n, nil
}
