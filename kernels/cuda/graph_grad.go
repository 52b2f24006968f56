//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

var _ kernels.GATMeanGradder = (*Backend)(nil)

// GATMeanGradFits implements kernels.GATMeanGradder: gat_mean_grad_f32's
// shared memory (ggShared) within a block's.
func (b *Backend) GATMeanGradFits(heads, c, f int) bool {
	return ggShared(heads, c, f) <= gatMeanMaxShared
}

// GATMeanGrad implements kernels.GATMeanGradder (F32).
func (b *Backend) GATMeanGrad(dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias []*tensor.Tensor, g *tensor.Tensor,
	hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*tensor.Tensor, heads int, slope float64) {
	must(b.d.GATMeanGrad(dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias, g, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope))
}

// GATMeanGrad is kernels.GATMeanGradder's GATMeanGrad, F32: the wanted
// gradients (and a [H·F] scratch per relation) zeroed in one ZeroMany,
// then gat_mean_grad_f32 over up to ggMaxRels relations a launch (a
// block of 128 threads per node, the relations side by side), then a
// gat_grad_edge_f32 per relation whose attEdge or we gradient is
// wanted. Its sums add with atomics, so their order, and the last bits,
// vary from run to run. Everything is checked before anything launches.
func (d *Device) GATMeanGrad(dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias []*tensor.Tensor, g *tensor.Tensor,
	hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*tensor.Tensor, heads int, slope float64) error {
	const op = "GATMeanGrad"
	_, err := kernels.CheckGATMeanGrad(op, dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias, g, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope)
	if err := checked(err); err != nil {
		return err
	}
	if dt := g.DType(); dt != tensor.F32 {
		return fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	nd, c, r := g.Dim(0), g.Dim(1), len(hs)
	gp, err := d.ptrOf(op, "g", g, tensor.F32)
	if err != nil {
		return err
	}
	rels := make([]ggRel, r)
	var zero []*tensor.Tensor
	var scratch []*tensor.Tensor
	defer func() {
		for _, t := range scratch {
			t.Storage().Free() // after the launches that use it are enqueued, or on an error
		}
	}()
	shared := 0
	for k := range rels {
		f := attr[k].Dim(1)
		sh := ggShared(heads, c, f)
		if sh > gatMeanMaxShared {
			return fmt.Errorf("cuda: %s: relation %d: heads %d, C %d and F %d need %d bytes of shared memory a block, more than %d",
				op, k, heads, c, f, sh, gatMeanMaxShared)
		}
		shared = max(shared, sh)
		ptrs, lds, err := d.gatPtrs(op, g, hs[k], hd[k], attr[k], we[k], attSrc[k], attDst[k], attEdge[k], bias[k], src[k], rowPtr[k], order[k])
		if err != nil {
			return err
		}
		dv, err := d.scratchF32(heads * f)
		if err != nil {
			return err
		}
		scratch = append(scratch, dv)
		zero = append(zero, dv)
		rel := ggRel{lds: int64(lds[1]), ldd: int64(lds[2]), f: int64(f)}
		// hs, hd, attr, we, attSrc, attDst, attEdge, then src, rowPtr, order.
		for j, p := range []cu.DevicePtr{ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7], ptrs[9], ptrs[10], ptrs[11]} {
			rel.ptrs[j] = uint64(p)
		}
		for j, o := range []struct {
			what   string
			t      *tensor.Tensor
			zeroed bool
		}{{"dHs", dHs[k], true}, {"dHd", dHd[k], false}, {"dAttSrc", dAttSrc[k], true}, {"dAttDst", dAttDst[k], true}, {"dBias", dBias[k], true}, {"dv", dv, false}} {
			if o.t == nil || o.t.Numel() == 0 {
				continue
			}
			p, err := d.ptrOf(op, o.what, o.t, tensor.F32)
			if err != nil {
				return err
			}
			rel.ptrs[10+j] = uint64(p)
			if o.zeroed {
				zero = append(zero, o.t)
			}
		}
		for _, o := range []struct {
			what string
			t    *tensor.Tensor
			p    *uint64
		}{{"dAttEdge", dAttEdge[k], &rel.dAttEdge}, {"dWe", dWe[k], &rel.dWe}} {
			if o.t == nil || o.t.Numel() == 0 {
				continue
			}
			p, err := d.ptrOf(op, o.what, o.t, tensor.F32)
			if err != nil {
				return err
			}
			*o.p = uint64(p)
		}
		rels[k] = rel
	}
	fn, err := d.kernel("gat_mean_grad_f32")
	if err != nil {
		return err
	}
	edge, err := d.kernel("gat_grad_edge_f32")
	if err != nil {
		return err
	}
	if err := d.ZeroMany(zero); err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var w [ggWords]uint64
	blocks := min(nd, d.sms*8)
	for start := 0; start < r && nd > 0; start += ggMaxRels {
		part := rels[start:min(r, start+ggMaxRels)]
		ggPack(&w, uint64(gp), int64(nd), int64(heads), int64(c), slope, 1/float64(r), part)
		if err := launchStructShared(fn, [3]int{max(blocks, 1), len(part), 1}, [3]int{128, 1, 1}, shared, d.stream, w[:]); err != nil {
			return err
		}
	}
	for k, rel := range rels {
		if (rel.dAttEdge == 0 && rel.dWe == 0) || rel.f == 0 || nd == 0 {
			if rel.dAttEdge != 0 || rel.dWe != 0 {
				// No edge attributes (F = 0): their gradients are zeros.
				if err := d.ZeroMany(nonNil(dAttEdge[k], dWe[k])); err != nil {
					return err
				}
			}
			continue
		}
		var a args
		a.ptr(cu.DevicePtr(rel.dAttEdge)).ptr(cu.DevicePtr(rel.dWe)).ptr(cu.DevicePtr(rel.ptrs[15])).ptr(cu.DevicePtr(rel.ptrs[6])).ptr(cu.DevicePtr(rel.ptrs[3])).
			i64(int64(heads)).i64(int64(c)).i64(rel.f)
		if err := launchRaw(edge, [3]int{int(grid1D(int64(heads*c), d.sms)), 1, 1}, [3]int{blockSize, 1, 1}, 0, d.stream, &a); err != nil {
			return err
		}
	}
	return nil
}

// nonNil returns ts without its nil entries.
func nonNil(ts ...*tensor.Tensor) []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, t := range ts {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

var _ kernels.GatherMeanGradder = (*Backend)(nil)

// GatherMeanGrad implements kernels.GatherMeanGradder (F32).
func (b *Backend) GatherMeanGrad(dx, g, src, rowPtr, order *tensor.Tensor) {
	must(b.d.GatherMeanGrad(dx, g, src, rowPtr, order))
}

// GatherMeanGradAdd implements kernels.GatherMeanGradder (F32).
func (b *Backend) GatherMeanGradAdd(dx, g, src, rowPtr, order *tensor.Tensor) {
	must(b.d.GatherMeanGradAdd(dx, g, src, rowPtr, order))
}

// GatherMeanGrad is kernels.GatherMeanGradder's GatherMeanGrad, F32: dx
// zeroed, then gather_mean_grad_f32, a thread per (destination, column)
// adding its share into its sources' rows with atomics (their order,
// and the last bits, vary from run to run).
func (d *Device) GatherMeanGrad(dx, g, src, rowPtr, order *tensor.Tensor) error {
	return d.gatherMeanGrad("GatherMeanGrad", false, dx, g, src, rowPtr, order)
}

// GatherMeanGradAdd is GatherMeanGrad without the zeroing: the shares
// are added into dx as it stands (one launch).
func (d *Device) GatherMeanGradAdd(dx, g, src, rowPtr, order *tensor.Tensor) error {
	return d.gatherMeanGrad("GatherMeanGradAdd", true, dx, g, src, rowPtr, order)
}

// gatherMeanGrad is GatherMeanGrad, adding into dx when add is set.
func (d *Device) gatherMeanGrad(op string, add bool, dx, g, src, rowPtr, order *tensor.Tensor) error {
	sizes, fw, err := kernels.CheckGatherMeanGrad(op, dx, g, src, rowPtr, order)
	if err := checked(err); err != nil {
		return err
	}
	if dt := g.DType(); dt != tensor.F32 {
		return fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	var ptrs [5]cu.DevicePtr
	for i, o := range []struct {
		what string
		t    *tensor.Tensor
		dt   tensor.DType
	}{{"dx", dx, tensor.F32}, {"g", g, tensor.F32}, {"src", src, tensor.I64}, {"rowPtr", rowPtr, tensor.I64}, {"order", order, tensor.I64}} {
		if i == 4 && o.t == nil {
			continue // order: the identity, a null pointer
		}
		if ptrs[i], err = d.ptrOf(op, o.what, o.t, o.dt); err != nil {
			return err
		}
	}
	fn, err := d.kernel("gather_mean_grad_f32") // before anything launches
	if err != nil {
		return err
	}
	if !add {
		if err := d.ZeroMany([]*tensor.Tensor{dx}); err != nil {
			return err
		}
	}
	if sizes.Edges == 0 || fw == 0 {
		return nil
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).ptr(ptrs[4]).i64(int64(sizes.Dst)).i64(int64(fw))
	n := int64(sizes.Dst * fw)
	return launchRaw(fn, [3]int{int(grid1D(n, d.sms)), 1, 1}, [3]int{blockSize, 1, 1}, 0, d.stream, &a)
}
