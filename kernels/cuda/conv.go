//go:build cuda

package cuda

import (
	"fmt"
	"os"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// 2-D convolution (NCHW) as im2col/col2im kernels (src/conv.cu) around
// cuBLAS: per group g, the strided-batched product over the samples of
// W_g [og, cg·kh·kw] and the columns [cg·kh·kw, ho·wo]. Inputs, weights
// and outputs share one dtype (F32, in the given precision, or BF16 or
// F16 with fp32 accumulation; the bias too). Small fp32 layers, whose
// weights fit in shared memory, run as direct kernels instead
// (conv_direct.go).

// Conv2d implements kernels.Backend.
func (b *Backend) Conv2d(dst, x, w, bias *T, p kernels.Conv2dParams) {
	must(b.d.Conv2d(dst, x, w, bias, p, b.precision()))
}

// Conv2dBackwardInput implements kernels.Backend.
func (b *Backend) Conv2dBackwardInput(dx, dy, w *T, p kernels.Conv2dParams) {
	must(b.d.Conv2dBackwardInput(dx, dy, w, p, b.precision()))
}

// Conv2dBackwardWeight implements kernels.Backend.
func (b *Backend) Conv2dBackwardWeight(dw, x, dy *T, p kernels.Conv2dParams) {
	must(b.d.Conv2dBackwardWeight(dw, x, dy, p, b.precision()))
}

// Conv2dBackwardWeightAdd implements kernels.ParamGradAccumulator.
func (b *Backend) Conv2dBackwardWeightAdd(dw, x, dy *T, p kernels.Conv2dParams) {
	must(b.d.Conv2dBackwardWeightAdd(dw, x, dy, p, b.precision()))
}

// convGeom is struct Conv of src/conv.cu, word for word.
type convGeom struct {
	n, cin, h, w, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw int64
}

func (g *convGeom) words() []uint64 {
	return []uint64{uint64(g.n), uint64(g.cin), uint64(g.h), uint64(g.w), uint64(g.kh), uint64(g.kw), uint64(g.ho),
		uint64(g.wo), uint64(g.sh), uint64(g.sw), uint64(g.ph), uint64(g.pw), uint64(g.dh), uint64(g.dw)}
}

// convPlan is a checked convolution: its geometry and the gemm sizes.
type convPlan struct {
	g              convGeom
	groups         int
	cout, og, kdim int // output channels, per group, rows of a group's columns
	pixels         int // ho·wo
	blasType       int
}

// planConv checks x [N,Cin,H,W], w [Cout,Cin/groups,KH,KW] and y
// [N,Cout,Ho,Wo] against p (kernels.CheckConv2d) and plans the launches.
func planConv(op string, x, w, y *tensor.Tensor, p kernels.Conv2dParams) (convPlan, error) {
	return planConvShapes(op, x.Shape(), w.Shape(), y.Shape(), x.DType(), p)
}

// planConvShapes is planConv on the shapes and x's dtype.
func planConvShapes(op string, xs, ws, ys []int, dt tensor.DType, p kernels.Conv2dParams) (convPlan, error) {
	k, err := kernels.CheckConv2d(op, xs, ws, ys, p)
	if err != nil {
		return convPlan{}, checked(err)
	}
	p = k.P
	c := convPlan{groups: p.Groups, cout: k.Cout, og: k.Og, kdim: k.KDim, pixels: k.Pixels}
	c.g = convGeom{n: int64(k.N), cin: int64(k.Cin), h: int64(k.H), w: int64(k.W), kh: int64(k.KH), kw: int64(k.KW),
		ho: int64(k.Ho), wo: int64(k.Wo), sh: int64(p.StrideH), sw: int64(p.StrideW), ph: int64(p.PadH), pw: int64(p.PadW),
		dh: int64(p.DilationH), dw: int64(p.DilationW)}
	switch dt {
	case tensor.F32:
		c.blasType = dataF32
	case tensor.BF16:
		c.blasType = dataBF16
	case tensor.F16:
		c.blasType = dataF16
	default:
		return convPlan{}, fmt.Errorf("cuda: %s: dtype %v (F32, BF16 and F16 run here)", op, dt)
	}
	return c, nil
}

// colsLen is the element count of the columns of every sample and group.
func (c *convPlan) colsLen() int { return int(c.g.n) * c.groups * c.kdim * c.pixels }

// convOperands checks the three operands (contiguous, x's dtype) and
// returns their addresses in order.
func (d *Device) convOperands(op string, names [3]string, ts [3]*tensor.Tensor) ([3]cu.DevicePtr, error) {
	var out [3]cu.DevicePtr
	for i, t := range ts {
		p, err := d.ptrOf(op, names[i], t, ts[0].DType())
		if err != nil {
			return out, err
		}
		out[i] = p
	}
	return out, nil
}

// convScratch allocates the columns buffer in dtype dt.
func (d *Device) convScratch(dt tensor.DType, n int) (*tensor.Tensor, cu.DevicePtr, error) {
	t, err := tensor.EmptyOn(tensor.CUDA(d.ordinal), dt, max(n, 1))
	if err != nil {
		return nil, 0, err
	}
	return t, cu.DevicePtr(t.Storage().DevicePtr()), nil
}

// Conv2d computes dst [N,Cout,Ho,Wo] from x [N,Cin,H,W] and w
// [Cout,Cin/groups,KH,KW], adding bias [Cout] when non-nil.
func (d *Device) Conv2d(dst, x, w, bias *tensor.Tensor, p kernels.Conv2dParams, prec Precision) error {
	const op = "Conv2d"
	c, err := planConv(op, x, w, dst, p)
	if err != nil {
		return err
	}
	ptrs, err := d.convOperands(op, [3]string{"x", "w", "dst"}, [3]*tensor.Tensor{x, w, dst})
	if err != nil {
		return err
	}
	px, pw, py := ptrs[0], ptrs[1], ptrs[2]
	dt := x.DType()
	var pb cu.DevicePtr
	if bias != nil {
		if err := checked(kernels.CheckConvBias(op, bias, c.cout)); err != nil {
			return err
		}
		if pb, err = d.ptrOf(op, "bias", bias, dt); err != nil {
			return err
		}
	}
	if c.direct(dt) {
		return d.convDirect(op, "conv_direct_f32", &c, int64(c.g.n)*int64(c.groups*c.tiles(c.og))*int64(c.pixels),
			new(args).ptr(py).ptr(px).ptr(pw).ptr(pb).push(c.g.words()...).i32(int32(c.groups)).i32(int32(c.cout)).
				ptr(0).i32(0).ptr(0).i32(0).i32(-1))
	}
	h, err := d.blasHandle()
	if err != nil {
		return err
	}
	cols, pc, err := d.convScratch(dt, c.colsLen())
	if err != nil {
		return err
	}
	defer cols.Storage().Free()
	im2col, _ := floatKernel(op, "im2col", dt)
	release := d.enter()
	defer release()
	var a args
	if err := d.launch1D(im2col, int64(c.colsLen()), a.ptr(pc).ptr(px).push(c.g.words()...)); err != nil {
		return err
	}
	es := int64(dt.Size())
	n, k, P := int(c.g.n), c.kdim, c.pixels
	for g := 0; g < c.groups; g++ {
		pwg := pw + cu.DevicePtr(int64(g*c.og*k)*es)
		pcg := pc + cu.DevicePtr(int64(g*k*P)*es)
		pyg := py + cu.DevicePtr(int64(g*c.og*P)*es)
		if err := h.gemmRowMajor(false, false, c.og, P, k, pwg, k, 0, pcg, P, int64(c.groups*k*P), pyg, P, int64(c.cout*P), n, c.blasType, prec); err != nil {
			return err
		}
	}
	if bias == nil {
		return nil
	}
	biasK, _ := floatKernel(op, "bias_nchw", dt)
	total := int64(dst.Numel())
	var b args
	return d.launch1D(biasK, total, b.ptr(py).ptr(pb).i64(int64(c.cout)).i64(int64(P)).i64(total))
}

// Conv2dBackwardInput computes dx (overwritten) from dy and w.
func (d *Device) Conv2dBackwardInput(dx, dy, w *tensor.Tensor, p kernels.Conv2dParams, prec Precision) error {
	const op = "Conv2dBackwardInput"
	c, err := planConv(op, dx, w, dy, p)
	if err != nil {
		return err
	}
	ptrs, err := d.convOperands(op, [3]string{"dx", "w", "dy"}, [3]*tensor.Tensor{dx, w, dy})
	if err != nil {
		return err
	}
	pdx, pw, pdy := ptrs[0], ptrs[1], ptrs[2]
	dt := dx.DType()
	if c.direct(dt) {
		cg := int(c.g.cin) / c.groups
		return d.convDirect(op, "conv_direct_dx_f32", &c, int64(c.g.n)*int64(c.groups*c.tiles(cg))*c.g.h*c.g.w,
			new(args).ptr(pdx).ptr(pdy).ptr(pw).push(c.g.words()...).i32(int32(c.groups)).i32(int32(c.cout)))
	}
	h, err := d.blasHandle()
	if err != nil {
		return err
	}
	cols, pc, err := d.convScratch(dt, c.colsLen())
	if err != nil {
		return err
	}
	defer cols.Storage().Free()
	col2im, _ := floatKernel(op, "col2im", dt)
	release := d.enter()
	defer release()
	es := int64(dt.Size())
	n, k, P := int(c.g.n), c.kdim, c.pixels
	for g := 0; g < c.groups; g++ {
		// dcols[n, g] = W_gᵀ · dy[n, g]
		pwg := pw + cu.DevicePtr(int64(g*c.og*k)*es)
		pdyg := pdy + cu.DevicePtr(int64(g*c.og*P)*es)
		pcg := pc + cu.DevicePtr(int64(g*k*P)*es)
		if err := h.gemmRowMajor(true, false, k, P, c.og, pwg, k, 0, pdyg, P, int64(c.cout*P), pcg, P, int64(c.groups*k*P), n, c.blasType, prec); err != nil {
			return err
		}
	}
	var a args
	return d.launch1D(col2im, int64(dx.Numel()), a.ptr(pdx).ptr(pc).push(c.g.words()...))
}

// Conv2dBackwardWeight computes dw (overwritten) from x and dy: per
// sample products into a scratch buffer, summed over the samples in
// order (deterministic).
func (d *Device) Conv2dBackwardWeight(dw, x, dy *tensor.Tensor, p kernels.Conv2dParams, prec Precision) error {
	return d.conv2dBackwardWeight("Conv2dBackwardWeight", dw, x, dy, p, prec, false)
}

// Conv2dBackwardWeightAdd is Conv2dBackwardWeight adding into dw
// (kernels.ParamGradAccumulator): the sum over the samples is added in
// its launch.
func (d *Device) Conv2dBackwardWeightAdd(dw, x, dy *tensor.Tensor, p kernels.Conv2dParams, prec Precision) error {
	return d.conv2dBackwardWeight("Conv2dBackwardWeightAdd", dw, x, dy, p, prec, true)
}

// conv2dBackwardWeight is Conv2dBackwardWeight, adding into dw with acc.
func (d *Device) conv2dBackwardWeight(op string, dw, x, dy *tensor.Tensor, p kernels.Conv2dParams, prec Precision, acc bool) error {
	c, err := planConv(op, x, dw, dy, p)
	if err != nil {
		return err
	}
	ptrs, err := d.convOperands(op, [3]string{"x", "dw", "dy"}, [3]*tensor.Tensor{x, dw, dy})
	if err != nil {
		return err
	}
	px, pdw, pdy := ptrs[0], ptrs[1], ptrs[2]
	dt := x.DType()
	n, k, P := int(c.g.n), c.kdim, c.pixels
	per, pp, err := d.convScratch(dt, n*c.cout*k)
	if err != nil {
		return err
	}
	defer per.Storage().Free()
	sum, _ := floatKernel(op, "sum_batches", dt)
	release := d.enter()
	defer release()
	if lanes, shmem, ok := c.directDW(dt); ok {
		fn, err := d.kernel("conv_direct_dw_f32")
		if err != nil {
			return err
		}
		chunks := directDWChunks(n, c.cout*k, d.sms, lanes)
		// The launch adds the samples itself (its tail) where its chunks
		// fit the device's counters, else sum_batches does.
		var counters cu.DevicePtr
		if chunks > 0 && chunks <= tailCounters {
			counters = d.counters
		}
		var a args
		a.ptr(pp).ptr(px).ptr(pdy).push(c.g.words()...).i32(int32(c.groups)).i32(int32(c.cout)).i32(int32(lanes))
		a.ptr(pdw).i32(b2i(acc)).ptr(counters)
		if chunks > 0 { // else sum_batches writes the empty sum (or adds it)
			if err := launchRaw(fn, [3]int{n, chunks, 1}, [3]int{directThreads, 1, 1}, shmem, d.stream, &a); err != nil {
				return err
			}
		}
		if counters != 0 {
			return nil
		}
		return d.sumBatches(sum, pdw, pp, n, int64(c.cout*k), acc)
	}
	h, err := d.blasHandle()
	if err != nil {
		return err
	}
	cols, pc, err := d.convScratch(dt, c.colsLen())
	if err != nil {
		return err
	}
	defer cols.Storage().Free()
	im2col, _ := floatKernel(op, "im2col", dt)
	var a args
	if err := d.launch1D(im2col, int64(c.colsLen()), a.ptr(pc).ptr(px).push(c.g.words()...)); err != nil {
		return err
	}
	es := int64(dt.Size())
	for g := 0; g < c.groups; g++ {
		// per[n, g] = dy[n, g] · cols[n, g]ᵀ
		pdyg := pdy + cu.DevicePtr(int64(g*c.og*P)*es)
		pcg := pc + cu.DevicePtr(int64(g*k*P)*es)
		ppg := pp + cu.DevicePtr(int64(g*c.og*k)*es)
		if err := h.gemmRowMajor(false, true, c.og, k, P, pdyg, P, int64(c.cout*P), pcg, P, int64(c.groups*k*P), ppg, k, int64(c.cout*k), n, c.blasType, prec); err != nil {
			return err
		}
	}
	return d.sumBatches(sum, pdw, pp, n, int64(c.cout*k), acc)
}

// sumBatches launches kernel sum (sum_batches): dw = Σ over the n
// per-sample gradients [n, m] at pp, in order (added to dw with acc).
func (d *Device) sumBatches(sum string, pdw, pp cu.DevicePtr, n int, m int64, acc bool) error {
	if m <= 0 {
		return nil
	}
	fn, err := d.kernel(sum)
	if err != nil {
		return err
	}
	var s args
	s.ptr(pdw).ptr(pp).i64(int64(n)).i64(m).i32(b2i(acc))
	// Blocks of 32 columns by sumRows rows (SUM_ROWS in src/conv.cu).
	return launchRaw(fn, [3]int{int((m + 31) / 32), 1, 1}, [3]int{32, sumRows, 1}, 0, d.stream, &s)
}

// directConvOff keeps the direct kernels off: im2col and cuBLAS take
// every convolution. It is the default, since on an H200 (2026-11-27) the
// direct kernels were the slower path for W4's layers: W4's bare loop ran
// 116 env-epochs/s with them and 188 without, conv_direct_dw_f32 taking
// 133 µs a launch (bench/baselines/gpu-nvidia-h200/2026-11-27). Tests
// compare both paths, and ESPER_CUDA_CONV=direct turns them on for a
// process (convPathFromEnv, at Open), so that a GPU run can time a
// workload both ways in one sitting.
var directConvOff = true

// convPathFromEnv applies ESPER_CUDA_CONV: "" (the default, or a test's
// setting, stays), "im2col" (columns and cuBLAS for every layer) or
// "direct" (the direct kernels where a layer fits them); any other value
// is an error naming it.
func convPathFromEnv() error {
	switch v := os.Getenv("ESPER_CUDA_CONV"); v {
	case "": // the default; a test's setting stays
	case "im2col":
		directConvOff = true
	case "direct":
		directConvOff = false
	default:
		return fmt.Errorf("cuda: ESPER_CUDA_CONV=%q: want direct or im2col", v)
	}
	return nil
}

// direct reports whether the forward and input-gradient convolutions of
// c in dtype dt run as direct kernels.
func (c *convPlan) direct(dt tensor.DType) bool {
	if directConvOff || dt != tensor.F32 || c.cout*c.kdim > directWeights {
		return false
	}
	// Below 2^30, as fits32 (src/conv.cu) asks: the kernels step through
	// their work in 32-bit ints, and a grid-stride step past an element
	// count just under 2^31 would wrap negative.
	const lim = 1 << 30
	g := c.g
	return g.n*g.cin*g.h*g.w < lim && g.n*int64(c.cout)*g.ho*g.wo < lim
}

// directDW reports whether c's weight gradient in dtype dt runs as
// conv_direct_dw_f32, with how many lanes sum each output (a power of two
// up to 32, about eight pixels each) and the block's shared memory.
func (c *convPlan) directDW(dt tensor.DType) (lanes, shmem int, ok bool) {
	g := c.g
	floats := int64(c.cout)*g.ho*g.wo + g.cin*g.h*g.w
	if !c.direct(dt) || floats > directSample {
		return 0, 0, false
	}
	return directLanes(c.pixels), int(floats) * 4, true
}

// tiles is the number of directTile channel tiles over ch channels.
func (c *convPlan) tiles(ch int) int { return (ch + directTile - 1) / directTile }

// convDirect launches direct kernel name over total threads' work, with
// c's weights in shared memory.
func (d *Device) convDirect(op, name string, c *convPlan, total int64, a *args) error {
	if total <= 0 {
		return nil
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	blocks := min((total+directThreads-1)/directThreads, int64(d.sms)*4)
	if err := launchRaw(fn, [3]int{int(blocks), 1, 1}, [3]int{directThreads, 1, 1}, c.cout*c.kdim*4, d.stream, a); err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	return nil
}
