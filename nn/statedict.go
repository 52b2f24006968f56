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
	es := entries(m)
	var dsts, srcs []*tensor.Tensor
	for _, e := range es {
		if e.t.Device().IsCPU() {
			sd[e.name] = e.t.Clone()
			continue
		}
		out := tensor.EmptyLike(e.t)
		sd[e.name] = out
		dsts, srcs = append(dsts, out), append(srcs, e.t)
	}
	copyMany(dsts, srcs)
	return sd
}

// copyMany copies each srcs[i] into dsts[i] (device tensors, one shape
// and dtype each): on a backend that joins concatenations
// (kernels.ConcatManyer) in as few launches as it takes (on CUDA one per
// 32 tensors), else a Copy each. A module's state dict is a few dozen
// small tensors, which would otherwise be as many launches.
func copyMany(dsts, srcs []*tensor.Tensor) {
	for len(dsts) > 0 {
		dev := dsts[0].Device()
		n := 1
		for srcs[0].Device() == dev && n < len(dsts) && dsts[n].Device() == dev && srcs[n].Device() == dev {
			n++
		}
		be := kernels.For(dev)
		var ds, ss []*tensor.Tensor
		for i := range n {
			if sameView(dsts[i], srcs[i]) {
				continue // a tensor onto itself: nothing to copy
			}
			// A concatenation of one source along axis 0 is a copy; a
			// scalar is seen as one element.
			ds, ss = append(ds, atLeast1D(dsts[i])), append(ss, atLeast1D(srcs[i]))
		}
		ones := make([]int, len(ds))
		for i := range ones {
			ones[i] = 1
		}
		cm, ok := be.(kernels.ConcatManyer)
		if ok && len(ds) > 1 {
			// ConcatMany refuses copies that share memory (tied
			// parameters, a source that is another's destination): those
			// go one by one, in order.
			_, err := kernels.CheckConcatMany("ConcatMany", ds, ss, ones, 0)
			ok = err == nil
		}
		if ok && len(ds) > 1 {
			cm.ConcatMany(ds, ss, ones, 0)
		} else {
			for i := range ds {
				be.Copy(ds[i], ss[i])
			}
		}
		dsts, srcs = dsts[n:], srcs[n:]
	}
}

// sameView reports whether a and b are the same elements in the same
// layout (a copy of one onto the other changes nothing).
func sameView(a, b *tensor.Tensor) bool {
	return a == b || (a.Storage().SameMemory(b.Storage()) && a.Offset() == b.Offset() && a.DType() == b.DType() &&
		tensor.SameShape(a.Shape(), b.Shape()) && tensor.SameShape(a.Strides(), b.Strides()))
}

// atLeast1D is t, or a scalar as a one-element vector (a view).
func atLeast1D(t *tensor.Tensor) *tensor.Tensor {
	if t.Rank() == 0 {
		return t.Reshape(1)
	}
	return t
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
	var dsts, srcs []*tensor.Tensor
	for _, d := range dst {
		if src, ok := sd[d.name]; ok && src != d.t {
			if d.t.Device().IsCPU() {
				tensor.CopyInto(d.t, src)
				continue
			}
			dsts, srcs = append(dsts, d.t), append(srcs, src)
		}
	}
	copyMany(dsts, srcs)
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
