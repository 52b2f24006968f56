package nn

import (
	"fmt"
	"sort"
	"strings"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// StateDict returns copies of m's parameters and buffers keyed by their
// state-dict names, like PyTorch's state_dict (whose tensors alias the
// module; these do not, so later training does not change them).
func StateDict(m Module) map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	for _, e := range entries(m) {
		sd[e.name] = cloneTensor(e.t)
	}
	return sd
}

// StateDictError reports why LoadStateDict refused a state dict. Nothing
// was copied.
type StateDictError struct {
	// Missing are names the module has and the dict lacks (strict only).
	Missing []string
	// Unexpected are names in the dict the module does not have (strict
	// only).
	Unexpected []string
	// Mismatched describe entries present in both whose shape, dtype or
	// device differ, or whose dict tensor is nil (in strict and
	// non-strict loads alike, as in PyTorch).
	Mismatched []string
}

// Error lists every problem found, missing and unexpected keys first.
func (e *StateDictError) Error() string {
	var parts []string
	if len(e.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("missing keys %q", e.Missing))
	}
	if len(e.Unexpected) > 0 {
		parts = append(parts, fmt.Sprintf("unexpected keys %q", e.Unexpected))
	}
	parts = append(parts, e.Mismatched...)
	return "nn: load state dict: " + strings.Join(parts, "; ")
}

// LoadStateDict copies sd into m's parameters and buffers in place (the
// tensors keep their identity, so optimizer arena views stay valid),
// converting nothing: every entry must match its destination's shape and
// dtype exactly. Everything is validated before anything is copied, so on
// error m is unchanged; the error is a *StateDictError. With strict set,
// keys the module lacks and module entries the dict lacks are errors too;
// without it they are skipped.
func LoadStateDict(m Module, sd map[string]*tensor.Tensor, strict bool) (err error) {
	if isNilModule(m) {
		return fmt.Errorf("nn: LoadStateDict: nil module")
	}
	dst := entries(m)
	var e StateDictError
	seen := make(map[string]bool, len(dst))
	for _, d := range dst {
		seen[d.name] = true
		src, ok := sd[d.name]
		switch {
		case !ok:
			if strict {
				e.Missing = append(e.Missing, d.name)
			}
		case src == nil:
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s: nil tensor in state dict", d.name))
		case !tensor.SameShape(src.Shape(), d.t.Shape()):
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s: shape %v in module, %v in state dict", d.name, d.t.Shape(), src.Shape()))
		case src.DType() != d.t.DType():
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s: dtype %v in module, %v in state dict", d.name, d.t.DType(), src.DType()))
		case src.Device() != d.t.Device():
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%s: device %v in module, %v in state dict", d.name, d.t.Device(), src.Device()))
		}
	}
	if strict {
		for name := range sd {
			if !seen[name] {
				e.Unexpected = append(e.Unexpected, name)
			}
		}
		sort.Strings(e.Unexpected)
	}
	if len(e.Missing)+len(e.Unexpected)+len(e.Mismatched) > 0 {
		return &e
	}
	defer func() {
		// Validation makes the copies below infallible; a panic here is
		// a bug, reported as an error at this user-input boundary.
		if r := recover(); r != nil {
			err = fmt.Errorf("nn: load state dict: %v", r)
		}
	}()
	for _, d := range dst {
		if src, ok := sd[d.name]; ok && src != d.t {
			copyTensor(d.t, src)
		}
	}
	return nil
}

// entry is one named tensor of a module: a parameter's current Value or
// a buffer.
type entry struct {
	name string
	t    *tensor.Tensor
}

// entries lists m's parameters then buffers. It reads each parameter's
// Value now, so an optimizer that repointed it is respected.
func entries(m Module) []entry {
	ps, bs := m.NamedParameters(), m.NamedBuffers()
	out := make([]entry, 0, len(ps)+len(bs))
	for _, p := range ps {
		out = append(out, entry{p.Name, p.Var.Value})
	}
	for _, b := range bs {
		out = append(out, entry{b.Name, b.Tensor})
	}
	return out
}

// cloneTensor returns a contiguous copy of t on t's device.
func cloneTensor(t *tensor.Tensor) *tensor.Tensor {
	if t.Device().IsCPU() {
		return t.Clone()
	}
	out := tensor.EmptyLike(t)
	kernels.For(t.Device()).Copy(out, t)
	return out
}

// copyTensor copies src into dst, both on the same device.
func copyTensor(dst, src *tensor.Tensor) {
	if dst.Device().IsCPU() {
		tensor.CopyInto(dst, src)
		return
	}
	kernels.For(dst.Device()).Copy(dst, src)
}
