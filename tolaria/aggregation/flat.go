package aggregation

import (
	"fmt"

	"strconv"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// FlatLen is the number of gradient elements of params: the length of
// the flat buffer GradsToFlat fills. It fails on an empty list or a nil
// parameter.
func FlatLen(params []*autograd.Var) (int, error) { return flatLen("FlatLen", params) }

func flatLen(op string, params []*autograd.Var) (int, error) {
	if len(params) == 0 {
		return 0, invalid(op, "empty parameter list")
	}
	n := 0
	for i, p := range params {
		if p == nil || p.Value == nil {
			return 0, invalid(op, "parameter %d is nil", i)
		}
		n += p.Value.Numel()
	}
	return n, nil
}

// GradsToFlat copies the gradients of params into dst, one after the
// other in parameter order (each in row-major order); a parameter without
// a gradient contributes zeros (G1 grads_to_flat). dst must have exactly
// FlatLen(params) elements. Gradients share one float dtype and one
// device (gradients on a device are gathered there and copied to the host
// at once, nn.HostCopies: one host sync); BF16, F16 and F64 gradients are
// converted to float32.
//
// It fails, leaving dst untouched, when params is empty, when no
// parameter has a gradient, when gradients mix dtypes or devices, when a
// gradient's size differs from its parameter's, or when dst has the wrong
// length. Contiguous gradients (the optimizer arena's views) are copied
// without allocating; dst may even be the arena's flat gradient itself
// (see FlatGradView), in which case the copy is a no-op in effect.
func GradsToFlat(params []*autograd.Var, dst []float32) error {
	const op = "GradsToFlat"
	total, err := flatLen(op, params)
	if err != nil {
		return err
	}
	if len(dst) != total {
		return invalid(op, "destination has %d elements, the parameters' gradients have %d", len(dst), total)
	}
	if _, err := gradLayout(op, params, false, true); err != nil {
		return err
	}
	var host []*tensor.Tensor // the gradients copied from a device, at once
	for _, p := range params {
		if p.Grad != nil && !p.Grad.Device().IsCPU() {
			host = make([]*tensor.Tensor, len(params))
			for i, q := range params {
				host[i] = q.Grad
			}
			if host, err = nn.HostCopies(host); err != nil {
				return fmt.Errorf("aggregation: %s: %w", op, err)
			}
			break
		}
	}
	off := 0
	for i, p := range params {
		n := p.Value.Numel()
		seg := dst[off : off+n]
		off += n
		g := p.Grad
		if host != nil {
			g = host[i]
		}
		if g == nil {
			clear(seg)
			continue
		}
		readGrad(seg, g)
	}
	return nil
}

// FlatToGrads writes flat back into the gradients of params, the inverse
// of GradsToFlat: consecutive segments in parameter order, converted to
// each gradient's dtype. A parameter without a gradient gets a new host
// tensor of its own dtype and shape. It fails, changing nothing, when the
// element counts differ, when params is empty, or when gradients mix
// dtypes or devices or live off the host.
func FlatToGrads(flat []float32, params []*autograd.Var) error {
	const op = "FlatToGrads"
	total, err := flatLen(op, params)
	if err != nil {
		return err
	}
	if len(flat) != total {
		return invalid(op, "flat gradient has %d elements, the parameters have %d", len(flat), total)
	}
	if _, err := gradLayout(op, params, true, false); err != nil {
		return err
	}
	off := 0
	for _, p := range params {
		n := p.Value.Numel()
		seg := flat[off : off+n]
		off += n
		if p.Grad == nil {
			dt := p.Value.DType()
			if !dt.IsFloat() {
				dt = tensor.F32
			}
			p.Grad = tensor.Zeros(dt, p.Value.Shape()...)
		}
		writeGrad(p.Grad, seg)
	}
	return nil
}

// FlatGradView returns the gradients of params as one float32 slice
// without copying, when they already lie back to back in one host F32
// storage in parameter order (an optim.Arena with a single F32 bucket
// lays them out so). ok is false otherwise, and the caller flattens with
// GradsToFlat. Writes to the view are writes to the gradients.
func FlatGradView(params []*autograd.Var) (view []float32, ok bool) {
	if len(params) == 0 {
		return nil, false
	}
	var st *tensor.Storage
	start, next := 0, 0
	for i, p := range params {
		if p == nil || p.Value == nil || p.Grad == nil {
			return nil, false
		}
		g := p.Grad
		if g.DType() != tensor.F32 || !g.Device().IsCPU() || !g.IsContiguous() || g.Numel() != p.Value.Numel() {
			return nil, false
		}
		if i == 0 {
			st, start, next = g.Storage(), g.Offset(), g.Offset()
		}
		if g.Storage() != st || g.Offset() != next {
			return nil, false
		}
		next += g.Numel()
	}
	all := tensor.StorageData[float32](st)
	return all[start:next:next], true
}

// gradLayout checks that the existing gradients of params share one
// float dtype and one device and match their parameters in size. It
// returns that dtype. With allowNone, a list without any gradient is
// accepted (FlatToGrads creates them). Without deviceOK the device must
// be the host (FlatToGrads writes them there); GradsToFlat reads
// gradients on a device through explicit copies.
func gradLayout(op string, params []*autograd.Var, allowNone, deviceOK bool) (tensor.DType, error) {
	var dt tensor.DType
	var dev tensor.Device
	first := -1
	for i, p := range params {
		g := p.Grad
		if g == nil {
			continue
		}
		if g.Numel() != p.Value.Numel() {
			return 0, invalid(op, "gradient of parameter %s has %d elements, the parameter %d", paramLabel(p, i), g.Numel(), p.Value.Numel())
		}
		if !g.DType().IsFloat() {
			return 0, invalid(op, "gradient of parameter %s has non-float dtype %v", paramLabel(p, i), g.DType())
		}
		if first < 0 {
			first, dt, dev = i, g.DType(), g.Device()
			if !dev.IsCPU() && !deviceOK {
				return 0, invalid(op, "gradient of parameter %s is on %v; aggregation works on host memory", paramLabel(p, i), dev)
			}
			continue
		}
		if g.DType() != dt {
			return 0, invalid(op, "gradients mix dtypes: parameter %s has %v, parameter %s has %v", paramLabel(p, i), g.DType(), paramLabel(params[first], first), dt)
		}
		if g.Device() != dev {
			return 0, invalid(op, "gradients mix devices: parameter %s is on %v, parameter %s on %v", paramLabel(p, i), g.Device(), paramLabel(params[first], first), dev)
		}
	}
	if first < 0 && !allowNone {
		return 0, invalid(op, "no parameter has a gradient")
	}
	return dt, nil
}

// readGrad copies gradient g (float, host memory) into seg as float32.
func readGrad(seg []float32, g *tensor.Tensor) {
	if !g.IsContiguous() {
		g = g.Contiguous()
	}
	switch g.DType() {
	case tensor.F32:
		copy(seg, g.F32())
	case tensor.F64:
		for i, v := range g.F64() {
			seg[i] = float32(v)
		}
	case tensor.BF16:
		for i, v := range g.U16() {
			seg[i] = tensor.BF16ToF32(v)
		}
	case tensor.F16:
		for i, v := range g.U16() {
			seg[i] = tensor.F16ToF32(v)
		}
	}
}

// writeGrad copies seg into gradient g (host, float), converting from
// float32.
func writeGrad(g *tensor.Tensor, seg []float32) {
	if !g.IsContiguous() {
		tmp := tensor.Empty(g.DType(), g.Shape()...)
		writeGrad(tmp, seg)
		tensor.CopyInto(g, tmp)
		return
	}
	switch g.DType() {
	case tensor.F32:
		copy(g.F32(), seg)
	case tensor.F64:
		d := g.F64()
		for i, v := range seg {
			d[i] = float64(v)
		}
	case tensor.BF16:
		d := g.U16()
		for i, v := range seg {
			d[i] = tensor.F32ToBF16(v)
		}
	case tensor.F16:
		d := g.U16()
		for i, v := range seg {
			d[i] = tensor.F32ToF16(v)
		}
	}
}

// paramLabel names parameter i for error messages.
func paramLabel(p *autograd.Var, i int) string {
	if p.Name != "" {
		return "\"" + p.Name + "\""
	}
	return "#" + strconv.Itoa(i)
}
