package nn

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cnn.safetensors")
	src := onDev(t, newFixtureCNN())
	Constant(src.At(1).(*BatchNorm2d).RunningVar, 2.5)
	noErr(t, Save(path, src, map[string]string{"epoch": "3"}))

	f, err := safetensors.ReadFile(path)
	noErr(t, err)
	check(t, f.Metadata["epoch"] == "3", "metadata %v lost the epoch", f.Metadata)
	check(t, len(f.Tensors) == 7, "file holds %d tensors, want 7", len(f.Tensors))

	dst := onDev(t, NewSequential(
		MustConv2d(tensor.NewRNG(7), Conv2dOptions{InChannels: 1, OutChannels: 4, KernelH: 3, Padding: 1, NoBias: true}),
		MustBatchNorm2d(BatchNorm2dOptions{Channels: 4}),
		&ReLU{}, MustMaxPool2d(Pool2dOptions{Kernel: 2}), &Flatten{},
		MustLinear(tensor.NewRNG(8), LinearOptions{In: 64, Out: 3}),
	))
	check(t, !reflect.DeepEqual(bits(t, src), bits(t, dst)), "differently seeded models are identical")
	noErr(t, Load(path, dst))
	check(t, reflect.DeepEqual(bits(t, src), bits(t, dst)), "Load did not restore the saved state bitwise")
	d, err := Device(dst)
	noErr(t, err)
	check(t, d == testdevice.Device(t), "Load moved the module to %v", d)

	// Overwriting an existing checkpoint is atomic and leaves no temp file.
	noErr(t, Save(path, dst, nil))
	ents, err := os.ReadDir(filepath.Dir(path))
	noErr(t, err)
	check(t, len(ents) == 1, "directory holds %d entries after a re-save", len(ents))

	// A checkpoint of another architecture is refused as a whole.
	other := onDev(t, MustMLP(tensor.NewRNG(9), MLPOptions{Sizes: []int{4, 3}}))
	before := bits(t, other)
	err = Load(path, other)
	var se *StateDictError
	check(t, errors.As(err, &se), "loading a CNN checkpoint into an MLP gave %v", err)
	check(t, strings.Contains(err.Error(), path), "error %q does not name the file", err)
	check(t, reflect.DeepEqual(before, bits(t, other)), "a refused load changed the module")

	err = Load(filepath.Join(t.TempDir(), "absent.safetensors"), other)
	check(t, errors.Is(err, os.ErrNotExist), "loading a missing file gave %v", err)
}

// TestLoadCorrupt checks that truncated and corrupted checkpoints are
// rejected with the file name and offset and change nothing.
func TestLoadCorrupt(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	noErr(t, Save(good, newFixtureCNN(), map[string]string{"note": "x"}))
	data, err := os.ReadFile(good)
	noErr(t, err)
	hlen := int(binary.LittleEndian.Uint64(data))
	hend := 8 + hlen

	type variant struct {
		name string
		data []byte
	}
	var vs []variant
	for _, n := range []int{0, 1, 7, 8, 9, 8 + hlen/2, hend - 1, hend, hend + 1, hend + 3, (hend + len(data)) / 2, len(data) - 4, len(data) - 1} {
		vs = append(vs, variant{"truncated to " + strconv.Itoa(n), data[:n]})
	}
	for n := 16; n < len(data); n += len(data) / 23 {
		vs = append(vs, variant{"truncated to " + strconv.Itoa(n), data[:n]})
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), data...)) }
	vs = append(vs,
		variant{"header length too large", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b, uint64(len(b))); return b })},
		variant{"header length huge", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b, 1<<62); return b })},
		variant{"header not json", edit(func(b []byte) []byte { b[8] = '#'; return b })},
		variant{"header brace", edit(func(b []byte) []byte { b[hend-1] = 'x'; b[hend-2] = 'x'; return b })},
		variant{"header unknown dtype", edit(func(b []byte) []byte {
			i := strings.Index(string(b[:hend]), `"F32"`)
			copy(b[i:], `"Q32"`)
			return b
		})},
		variant{"header bad offsets", edit(func(b []byte) []byte {
			i := strings.Index(string(b[:hend]), `"data_offsets":[0,`)
			check(t, i >= 0, "no data_offsets [0, in header %s", b[8:hend])
			b[i+len(`"data_offsets":[`)] = '4'
			return b
		})},
	)
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.safetensors")
			noErr(t, os.WriteFile(path, v.data, 0o644))
			m := onDev(t, newFixtureCNN())
			before := bits(t, m)
			err := Load(path, m)
			check(t, err != nil, "Load accepted a corrupt file")
			var fe *safetensors.FormatError
			check(t, errors.As(err, &fe), "error %v (%T) is not a *safetensors.FormatError", err, err)
			check(t, fe.File == path, "FormatError names %q, want %q", fe.File, path)
			check(t, fe.Offset >= 0 && fe.Offset <= int64(len(data)), "FormatError offset %d outside the file", fe.Offset)
			check(t, strings.Contains(err.Error(), path) && strings.Contains(err.Error(), "offset"), "error %q does not name the file and offset", err)
			check(t, reflect.DeepEqual(before, bits(t, m)), "a rejected file changed the module")
		})
	}
}
