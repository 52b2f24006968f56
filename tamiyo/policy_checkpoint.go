package tamiyo

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"

	"github.com/esper-go/esper/internal/atomicfile"
	"github.com/esper-go/esper/internal/strictjson"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// A policy checkpoint is one safetensors file: the policy's parameters
// by state-dict name, and under the metadata key PolicyHeaderKey a JSON
// header
//
//	{"schema_version": 1, "policy_version": "tamiyo_gnn_v1",
//	 "options": {"hidden": 256, "gat_hidden": 128, "gat_heads": 4,
//	             "head_hidden": 128, "blueprint_embedding": 4,
//	             "dropout": 0.2, "dtype": "F32", "seed": 0},
//	 "slots": ["r0c0", "r0c1", "r0c2"],
//	 "tensors_crc32": 1234567890}
//
// The options say which network the weights belong to; the slots are the
// slot configuration (in slot-head order) the policy was trained for: the
// network itself serves any slot count, but its decisions only mean what
// they were trained to mean on that configuration. tensors_crc32 is the
// IEEE CRC-32 of every tensor's name and little-endian bytes in name
// order, so a flipped bit in the data is caught (safetensors itself only
// checks the layout). The file loads in PyTorch with
// safetensors.torch.load_file.

// PolicyCheckpointVersion is the header schema version SavePolicy writes
// and the only one LoadPolicy accepts.
const PolicyCheckpointVersion = 1

// PolicyHeaderKey is the safetensors metadata key of the JSON header.
const PolicyHeaderKey = "esper.tamiyo.policy"

// ErrCheckpointMismatch is wrapped when a policy checkpoint was written
// for another schema version, other policy options or another slot
// configuration than the loader asks for.
var ErrCheckpointMismatch = errors.New("policy checkpoint does not match")

// ErrCheckpointCorrupt is wrapped when a policy checkpoint cannot be read
// as one: truncated or malformed file, missing or malformed header,
// checksum mismatch, or tensors that do not fit the declared network.
var ErrCheckpointCorrupt = errors.New("corrupt policy checkpoint")

// PolicyHeader is a policy checkpoint's JSON header.
type PolicyHeader struct {
	// SchemaVersion is the header format (PolicyCheckpointVersion).
	SchemaVersion int
	// PolicyVersion names the network family (PolicyVersion).
	PolicyVersion string
	// Options are the policy's options, defaults filled in (NoDropout
	// folded into Dropout = 0).
	Options PolicyOptions
	// Slots is the slot configuration the policy was trained for, in
	// slot-head order.
	Slots []string
	// TensorsCRC32 is the checksum of the tensors.
	TensorsCRC32 uint32
}

// headerJSON is PolicyHeader's file form; pointers tell a missing field
// from a zero one.
type headerJSON struct {
	SchemaVersion *int         `json:"schema_version"`
	PolicyVersion string       `json:"policy_version"`
	Options       *optionsJSON `json:"options"`
	Slots         []string     `json:"slots"`
	TensorsCRC32  *uint32      `json:"tensors_crc32"`
}

type optionsJSON struct {
	Hidden             int     `json:"hidden"`
	GATHidden          int     `json:"gat_hidden"`
	GATHeads           int     `json:"gat_heads"`
	HeadHidden         int     `json:"head_hidden"`
	BlueprintEmbedding int     `json:"blueprint_embedding"`
	Dropout            float64 `json:"dropout"`
	DType              string  `json:"dtype"`
	Seed               uint64  `json:"seed"`
}

func toOptionsJSON(o PolicyOptions) *optionsJSON {
	return &optionsJSON{
		Hidden: o.Hidden, GATHidden: o.GATHidden, GATHeads: o.GATHeads, HeadHidden: o.HeadHidden,
		BlueprintEmbedding: o.BlueprintEmbedding, Dropout: o.Dropout, DType: o.DType.String(), Seed: o.Seed,
	}
}

func (j *optionsJSON) options() (PolicyOptions, error) {
	dt, err := tensor.ParseDType(j.DType)
	if err != nil {
		return PolicyOptions{}, err
	}
	o := PolicyOptions{
		Hidden: j.Hidden, GATHidden: j.GATHidden, GATHeads: j.GATHeads, HeadHidden: j.HeadHidden,
		BlueprintEmbedding: j.BlueprintEmbedding, Dropout: j.Dropout, NoDropout: j.Dropout == 0, DType: dt, Seed: j.Seed,
	}
	return o.withDefaults()
}

// SavePolicy writes p's parameters and the header (schema version, p's
// options, slots) to path atomically: a crash leaves the old file or the
// new one, never part of one. A policy on a device is copied to the host
// explicitly, in one copy (one host sync); the file does not record the
// device.
func SavePolicy(path string, p *Policy, slots leyline.SlotConfig) error {
	if p == nil {
		return fmt.Errorf("tamiyo: SavePolicy %s: nil policy", path)
	}
	if slots.Len() == 0 {
		return fmt.Errorf("tamiyo: SavePolicy %s: empty slot configuration", path)
	}
	sd, err := nn.HostStateDict(p)
	if err != nil {
		return fmt.Errorf("tamiyo: SavePolicy %s: %w", path, err)
	}
	ver := PolicyCheckpointVersion
	crc := tensorsCRC(sd)
	hdr, err := json.Marshal(headerJSON{
		SchemaVersion: &ver, PolicyVersion: PolicyVersion, Options: toOptionsJSON(p.opts),
		Slots: slots.IDs(), TensorsCRC32: &crc,
	})
	if err != nil {
		return fmt.Errorf("tamiyo: SavePolicy %s: %w", path, err)
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		return safetensors.Encode(w, sd, map[string]string{PolicyHeaderKey: string(hdr)})
	}, atomicfile.Options{BeforeRename: testHookBeforeRename})
	if err != nil {
		return fmt.Errorf("tamiyo: SavePolicy %s: %w", path, err)
	}
	return nil
}

// testHookBeforeRename, when set by a test, runs before SavePolicy's
// rename; an error aborts the write.
var testHookBeforeRename func(tmp string) error

// ReadPolicyHeader reads and checks a policy checkpoint (layout, header
// and checksum) and returns its header, without building a policy. A
// command line uses it to learn the options a file was written with.
func ReadPolicyHeader(path string) (PolicyHeader, error) {
	_, h, err := readPolicyFile(path)
	return h, err
}

// LoadPolicy builds a policy with options o (defaults filled in) and
// loads the checkpoint at path into it, refusing, with an error wrapping
// ErrCheckpointMismatch, a file of another schema version, of other
// options (every option but Seed, which only seeds a fresh policy's
// initialisation and dropout) or written for another slot configuration
// than slots; and, with an error wrapping ErrCheckpointCorrupt, a file
// that is truncated, malformed, fails its checksum or whose tensors do
// not fit the network. The file is read and checked in full before
// anything is built. The policy is loaded on the host and then moved to
// o.Device (the CPU by default): a file saved from any device loads on
// any device, bit for bit.
func LoadPolicy(path string, o PolicyOptions, slots leyline.SlotConfig) (*Policy, error) {
	if _, err := o.withDefaults(); err != nil {
		return nil, fmt.Errorf("tamiyo: LoadPolicy %s: %w", path, err)
	}
	f, h, err := readPolicyFile(path)
	if err != nil {
		return nil, err
	}
	return loadPolicy(f, h, path, o, slots)
}

// LoadPolicyData is LoadPolicy for a checkpoint held in memory (an
// embedded policy, say); name identifies it in errors.
func LoadPolicyData(data []byte, name string, o PolicyOptions, slots leyline.SlotConfig) (*Policy, error) {
	if _, err := o.withDefaults(); err != nil {
		return nil, fmt.Errorf("tamiyo: LoadPolicy %s: %w", name, err)
	}
	f, err := safetensors.Parse(data, name)
	f, h, err := checkPolicyFile(f, err, name)
	if err != nil {
		return nil, err
	}
	return loadPolicy(f, h, name, o, slots)
}

// ReadPolicyHeaderData is ReadPolicyHeader for a checkpoint held in
// memory.
func ReadPolicyHeaderData(data []byte, name string) (PolicyHeader, error) {
	f, err := safetensors.Parse(data, name)
	_, h, err := checkPolicyFile(f, err, name)
	return h, err
}

// loadPolicy is LoadPolicy's work on a read and checked file.
func loadPolicy(f *safetensors.File, h PolicyHeader, path string, o PolicyOptions, slots leyline.SlotConfig) (*Policy, error) {
	want, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("tamiyo: LoadPolicy %s: %w", path, err)
	}
	mismatch := func(format string, args ...any) error {
		return fmt.Errorf("tamiyo: LoadPolicy %s: %w: %s", path, ErrCheckpointMismatch, fmt.Sprintf(format, args...))
	}
	got := h.Options
	got.Seed, got.NoDropout, got.Device = want.Seed, want.NoDropout, want.Device
	if got != want {
		return nil, mismatch("written with options %s, loading with %s", describeOptions(h.Options), describeOptions(want))
	}
	if !slices.Equal(h.Slots, slots.IDs()) {
		return nil, mismatch("written for slots %v, loading for %v", h.Slots, slots.IDs())
	}
	host := want
	host.Device = tensor.CPU
	p, err := NewPolicy(host)
	if err != nil {
		return nil, fmt.Errorf("tamiyo: LoadPolicy %s: %w", path, err)
	}
	if err := nn.LoadStateDict(p, f.Tensors, true); err != nil {
		return nil, fmt.Errorf("tamiyo: LoadPolicy %s: %w: tensors do not fit the network: %w", path, ErrCheckpointCorrupt, err)
	}
	if !want.Device.IsCPU() {
		if err := p.To(want.Device); err != nil {
			return nil, fmt.Errorf("tamiyo: LoadPolicy %s: %w", path, err)
		}
	}
	return p, nil
}

func describeOptions(o PolicyOptions) string {
	return fmt.Sprintf("{hidden %d, gat_hidden %d, gat_heads %d, head_hidden %d, blueprint_embedding %d, dropout %v, dtype %v}",
		o.Hidden, o.GATHidden, o.GATHeads, o.HeadHidden, o.BlueprintEmbedding, o.Dropout, o.DType)
}

// readPolicyFile reads the safetensors file, decodes the header strictly
// and checks the schema version and the checksum.
func readPolicyFile(path string) (*safetensors.File, PolicyHeader, error) {
	f, err := safetensors.ReadFile(path)
	return checkPolicyFile(f, err, path)
}

// checkPolicyFile decodes the header of f (read from path, with the
// reader's error err) strictly and checks the schema version and the
// checksum.
func checkPolicyFile(f *safetensors.File, err error, path string) (*safetensors.File, PolicyHeader, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("tamiyo: policy checkpoint %s: %w: %s", path, ErrCheckpointCorrupt, fmt.Sprintf(format, args...))
	}
	if err != nil {
		var fe *safetensors.FormatError
		if errors.As(err, &fe) {
			return nil, PolicyHeader{}, fmt.Errorf("tamiyo: policy checkpoint %s: %w: %w", path, ErrCheckpointCorrupt, err)
		}
		return nil, PolicyHeader{}, fmt.Errorf("tamiyo: policy checkpoint: %w", err)
	}
	raw, ok := f.Metadata[PolicyHeaderKey]
	if !ok {
		return nil, PolicyHeader{}, corrupt("no %q header in the safetensors metadata (not a policy checkpoint)", PolicyHeaderKey)
	}
	if err := strictjson.NoDuplicateKeys([]byte(raw)); err != nil {
		return nil, PolicyHeader{}, corrupt("header: %v", err)
	}
	var j headerJSON
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return nil, PolicyHeader{}, corrupt("header: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, PolicyHeader{}, corrupt("header: data after the JSON value")
	}
	switch {
	case j.SchemaVersion == nil:
		return nil, PolicyHeader{}, corrupt("header has no schema_version")
	case *j.SchemaVersion != PolicyCheckpointVersion:
		return nil, PolicyHeader{}, fmt.Errorf("tamiyo: policy checkpoint %s: %w: schema version %d, this build reads version %d",
			path, ErrCheckpointMismatch, *j.SchemaVersion, PolicyCheckpointVersion)
	case j.Options == nil || j.Slots == nil || j.TensorsCRC32 == nil:
		return nil, PolicyHeader{}, corrupt("header lacks options, slots or tensors_crc32")
	}
	o, err := j.Options.options()
	if err != nil {
		return nil, PolicyHeader{}, corrupt("header options: %v", err)
	}
	// The options say what NewPolicy will allocate: it must be what the
	// file holds, checked before anything is built (a header of a few
	// bytes must not make the loader allocate gigabytes).
	want, err := ParameterCount(o)
	if err != nil {
		return nil, PolicyHeader{}, corrupt("header options: %v", err)
	}
	var have int64
	for _, t := range f.Tensors {
		if t != nil {
			have += int64(t.Numel())
		}
	}
	if have != want {
		return nil, PolicyHeader{}, corrupt("header options %s make a network of %d parameters, the file holds %d",
			describeOptions(o), want, have)
	}
	if got := tensorsCRC(f.Tensors); got != *j.TensorsCRC32 {
		return nil, PolicyHeader{}, corrupt("tensor checksum %08x, header says %08x", got, *j.TensorsCRC32)
	}
	return f, PolicyHeader{
		SchemaVersion: *j.SchemaVersion, PolicyVersion: j.PolicyVersion, Options: o,
		Slots: j.Slots, TensorsCRC32: *j.TensorsCRC32,
	}, nil
}

// nativeLittle reports whether the host stores numbers little-endian.
var nativeLittle = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// tensorsCRC is the CRC-32 (IEEE) of every tensor's name, a zero byte and
// its little-endian element bytes, in name order.
func tensorsCRC(ts map[string]*tensor.Tensor) uint32 {
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	h := crc32.NewIEEE()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
		t := ts[n]
		if t == nil || t.Numel() == 0 {
			continue
		}
		c := t.Contiguous()
		sz := c.DType().Size()
		b := c.Storage().Bytes()[c.Offset()*sz : (c.Offset()+c.Numel())*sz]
		if !nativeLittle && sz > 1 {
			b = append([]byte(nil), b...)
			for i := 0; i < len(b); i += sz {
				slices.Reverse(b[i : i+sz])
			}
		}
		h.Write(b)
	}
	return h.Sum32()
}
