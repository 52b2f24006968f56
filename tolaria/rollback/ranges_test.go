package rollback

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// writeSigned writes the checkpoint of epoch with meta as its
// esper.rollback.meta, and a WAL naming it, both with valid checksums,
// as a hostile or broken writer could: the checksums prove the bytes are
// the ones written, not that they make sense.
func writeSigned(t *testing.T, dir string, epoch int, meta string) string {
	t.Helper()
	tensors := map[string]*tensor.Tensor{"w": tensor.Full(tensor.F32, 1, 4)}
	own, err := contentCRC([]byte(meta), tensors)
	noErr(t, err)
	var buf bytes.Buffer
	noErr(t, safetensors.Encode(&buf, tensors, map[string]string{
		metaKeyVersion: formatVersion, metaKeyEpoch: strconv.Itoa(epoch), metaKeyMeta: meta,
		metaKeyCRC: strconv.FormatUint(uint64(own), 10),
	}))
	name := checkpointName(epoch)
	noErr(t, os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644))
	writeWAL(t, dir, name, epoch, crc32IEEE(buf.Bytes()), nil)
	return filepath.Join(dir, name)
}

// TestMetaOutOfRangeIsCorrupt (issue 20, point 5): a checkpoint whose
// checksums verify but whose metadata holds a negative epoch or global
// step is refused, naming the file and the field, by Latest and by
// LatestIntact's own-checksum path; Write refuses to write one.
func TestMetaOutOfRangeIsCorrupt(t *testing.T) {
	for _, c := range []struct{ meta, field string }{
		{`{"epoch":-3,"global_step":0}`, "epoch = -3"},
		{`{"epoch":-9223372036854775808,"global_step":0}`, "epoch = -9223372036854775808"},
		{`{"epoch":1,"global_step":-1}`, "global_step = -1"},
	} {
		dir := t.TempDir()
		path := writeSigned(t, dir, 1, c.meta)
		st := openStore(t, dir, StoreOptions{})
		_, _, err := st.Latest()
		corruptErr(t, err, path)
		check(t, strings.Contains(err.Error(), c.field), "Latest: %v does not name %q", err, c.field)
		_, err = st.LatestIntact()
		check(t, err != nil && strings.Contains(err.Error(), c.field), "LatestIntact: %v", err)
		noErr(t, os.WriteFile(filepath.Join(dir, walName), []byte("{"), 0o644))
		_, err = st.LatestIntact() // the file's own checksum: the WAL is broken
		check(t, err != nil && strings.Contains(err.Error(), c.field), "LatestIntact without the WAL: %v", err)
	}
	st := openStore(t, t.TempDir(), StoreOptions{})
	s := sized(t, 1, 0)
	s.Meta.Epoch = -1
	check(t, st.Write(1, s) != nil, "a negative Meta.Epoch was written")
	s.Meta.Epoch, s.Meta.GlobalStep = 1, -5
	check(t, st.Write(1, s) != nil, "a negative Meta.GlobalStep was written")
}
