package nn

import (
	"fmt"
	"reflect"

	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// Save writes m's state dict (parameters and buffers, by state-dict name)
// and metadata to a safetensors file at path. The write is atomic: a
// crash leaves either the old file or the new one, never half of one.
// The file loads in PyTorch with safetensors.torch.load_file.
func Save(path string, m Module, metadata map[string]string) error {
	if isNilModule(m) {
		return fmt.Errorf("nn: save %s: nil module", path)
	}
	sd, err := HostStateDict(m)
	if err != nil {
		return fmt.Errorf("nn: save %s: %w", path, err)
	}
	if err := safetensors.WriteFile(path, sd, metadata); err != nil {
		return fmt.Errorf("nn: save %s: %w", path, err)
	}
	return nil
}

// Load reads a safetensors file written by Save (or by PyTorch with the
// same names) into m, strictly: every parameter and buffer must be in the
// file with its exact shape and dtype, and the file must hold nothing
// else. The whole file is parsed and checked before m changes, so a
// truncated or corrupt file returns an error (a *safetensors.FormatError
// naming the file and byte offset, wrapped) and leaves m untouched, as
// does a mismatched one (a *StateDictError, wrapped).
func Load(path string, m Module) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("nn: load %s: %v", path, r)
		}
	}()
	if isNilModule(m) {
		return fmt.Errorf("nn: load %s: nil module (build the module, then load into it)", path)
	}
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return fmt.Errorf("nn: load: %w", err)
	}
	// The file's tensors are on the host; a module on a device gets
	// device copies of them (after the names, shapes and dtypes agree).
	for _, e := range entries(m) {
		if src, ok := f.Tensors[e.name]; ok && src != nil && src.Device() != e.t.Device() &&
			tensor.SameShape(src.Shape(), e.t.Shape()) && src.DType() == e.t.DType() {
			d, err := src.ToDevice(e.t.Device())
			if err != nil {
				return fmt.Errorf("nn: load %s: %s: %w", path, e.name, err)
			}
			f.Tensors[e.name] = d
		}
	}
	if err := LoadStateDict(m, f.Tensors, true); err != nil {
		return fmt.Errorf("nn: load %s: %w", path, err)
	}
	return nil
}

// isNilModule reports whether m is nil or a nil pointer in a Module.
func isNilModule(m Module) bool {
	if m == nil {
		return true
	}
	v := reflect.ValueOf(m)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
