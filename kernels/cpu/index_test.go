package cpu

import (
	"math"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

func TestIndexSelectAdd(t *testing.T) {
	for _, d := range floatTypes {
		for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
			src := randT(1, d, 3, 5, 4)
			idx := tensor.FromSlice([]int64{4, 0, 4, 2, 4, 1}).Cast(idt)
			dst := tensor.Empty(d, 3, 6, 4)
			be.IndexSelect(dst, src, 1, idx)
			sv := vals(src)
			iv := idx.Float64s()
			want := make([]float64, 3*6*4)
			for o := 0; o < 3; o++ {
				for k := 0; k < 6; k++ {
					for i := 0; i < 4; i++ {
						want[(o*6+k)*4+i] = sv[(o*5+int(iv[k]))*4+i]
					}
				}
			}
			closeTo(t, name("index_select ", d), vals(dst), want, 0)

			// IndexAdd is the adjoint: accumulate back.
			acc := randT(2, d, 3, 5, 4)
			base := vals(acc)
			be.IndexAdd(acc, 1, idx, dst)
			dv := vals(dst)
			for o := 0; o < 3; o++ {
				for k := 0; k < 6; k++ {
					for i := 0; i < 4; i++ {
						base[(o*5+int(iv[k]))*4+i] += dv[(o*6+k)*4+i]
					}
				}
			}
			closeTo(t, name("index_add ", d), vals(acc), base, tol(d))
		}
	}
	// Embedding lookup of an I64 table (any dtype moves).
	tab := tensor.FromSlice([]int64{1, 2, 3, 4, 5, 6}, 3, 2)
	out := tensor.Empty(tensor.I64, 2, 2)
	be.IndexSelect(out, tab, 0, tensor.FromSlice([]int32{2, 0}))
	require.Equal(t, []int64{5, 6, 1, 2}, out.I64())
}

func TestGatherScatterAdd(t *testing.T) {
	for _, d := range floatTypes {
		src := randT(1, d, 4, 5)
		for axis := 0; axis < 2; axis++ {
			ishape := []int{3, 4}
			size := []int{4, 5}[axis]
			idx := tensor.RandInt(tensor.NewRNG(uint64(axis)), size, ishape...)
			dst := tensor.Empty(d, ishape...)
			be.Gather(dst, src, axis, idx)
			sv, iv := vals(src), idx.I64()
			want := make([]float64, 12)
			for i := 0; i < 3; i++ {
				for j := 0; j < 4; j++ {
					k := int(iv[i*4+j])
					if axis == 0 {
						want[i*4+j] = sv[k*5+j]
					} else {
						want[i*4+j] = sv[i*5+k]
					}
				}
			}
			closeTo(t, name("gather ", d, axis), vals(dst), want, 0)

			// scatter_add_ of a [3,4] src through the same index into [4,5].
			acc := tensor.Zeros(d, 4, 5)
			be.ScatterAdd(acc, axis, idx, dst)
			exp := make([]float64, 20)
			dv := vals(dst)
			for i := 0; i < 3; i++ {
				for j := 0; j < 4; j++ {
					k := int(iv[i*4+j])
					if axis == 0 {
						exp[k*5+j] += dv[i*4+j]
					} else {
						exp[i*5+k] += dv[i*4+j]
					}
				}
			}
			closeTo(t, name("scatter_add ", d, axis), vals(acc), exp, tol(d))
		}
	}
}

func TestIndexOutOfRangePanics(t *testing.T) {
	require.PanicsWithValue(t, "cpu: IndexSelect: index 7 out of range [0, 3)", func() {
		be.IndexSelect(tensor.Empty(tensor.F32, 1, 2), tensor.Empty(tensor.F32, 3, 2), 0, tensor.FromSlice([]int64{7}))
	})
}

func TestSegments(t *testing.T) {
	ids := []int64{2, 0, 1, 0, 2, 2, 1, 0, 2} // segment 3 empty
	const S, E, F = 4, 9, 4
	for _, d := range floatTypes {
		src := randT(1, d, E, F)
		sv := vals(src)
		seg := tensor.FromSlice(ids)
		for _, op := range []kernels.ReduceOp{kernels.Sum, kernels.Mean, kernels.Max} {
			dst := tensor.Empty(d, S, F)
			var am *T
			if op == kernels.Max {
				am = tensor.Empty(tensor.I64, S, F)
			}
			be.SegmentReduce(op, dst, am, src, seg.Cast(tensor.I32))
			want := make([]float64, S*F)
			wantAm := make([]int64, S*F)
			for s := 0; s < S; s++ {
				for f := 0; f < F; f++ {
					cnt, acc, best, bi := 0, 0.0, math.Inf(-1), int64(-1)
					for e, id := range ids {
						if int(id) != s {
							continue
						}
						v := sv[e*F+f]
						cnt++
						acc += v
						if v > best {
							best, bi = v, int64(e)
						}
					}
					switch {
					case cnt == 0:
						want[s*F+f] = 0
					case op == kernels.Sum:
						want[s*F+f] = acc
					case op == kernels.Mean:
						want[s*F+f] = acc / float64(cnt)
					default:
						want[s*F+f] = best
					}
					wantAm[s*F+f] = bi
				}
			}
			closeTo(t, name("segment ", op, d), vals(dst), want, tol(d))
			if am != nil {
				if d != tensor.BF16 {
					require.Equal(t, wantAm, am.I64())
				}
				dy := randT(3, d, S, F)
				dsrc := tensor.Empty(d, E, F)
				be.SegmentMaxBackward(dsrc, dy, am)
				wantG := make([]float64, E*F)
				for i, a := range am.I64() {
					if a >= 0 {
						wantG[int(a)*F+i%F] += vals(dy)[i]
					}
				}
				closeTo(t, name("segment max bwd ", d), vals(dsrc), wantG, 0)
			}
		}

		// Softmax within segments, against a reference and finite differences.
		ref := func(x []float64) []float64 {
			y := make([]float64, len(x))
			for s := 0; s < S; s++ {
				for f := 0; f < F; f++ {
					m, sum := math.Inf(-1), 0.0
					for e, id := range ids {
						if int(id) == s {
							m = math.Max(m, x[e*F+f])
						}
					}
					for e, id := range ids {
						if int(id) == s {
							sum += math.Exp(x[e*F+f] - m)
						}
					}
					for e, id := range ids {
						if int(id) == s {
							y[e*F+f] = math.Exp(x[e*F+f]-m) / sum
						}
					}
				}
			}
			return y
		}
		y := tensor.Empty(d, E, F)
		be.SegmentSoftmax(y, src, seg, S)
		closeTo(t, name("segment softmax ", d), vals(y), ref(sv), tol(d))
		dy := randT(5, d, E, F)
		dx := tensor.Empty(d, E, F)
		be.SegmentSoftmaxBackward(dx, y, dy, seg, S)
		x64 := asF64(src)
		closeTo(t, name("segment softmax bwd ", d), vals(dx), numGrad(x64, vals(dy), func() []float64 { return ref(x64.F64()) }), max(tol(d), 1e-7))
	}
}

func TestConcatPad(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.I64} {
		a := randT(1, tensor.F64, 2, 3, 4).Cast(d)
		b := randT(2, tensor.F64, 2, 4, 3).Cast(d).Transpose(1, 2) // [2,3,4] strided
		c := randT(3, tensor.F64, 2, 1, 4).Cast(d)
		dst := tensor.Empty(d, 2, 3, 10)
		be.Concat(dst, []*T{a, b, c.Transpose(1, 2).Contiguous().Reshape(2, 4, 1).Transpose(1, 2).Expand(2, 3, 4).Narrow(2, 0, 2)}, 2)
		// Reference through the tensor package's own views.
		want := []float64{}
		av, bv := a.Float64s(), b.Float64s()
		cv := c.Transpose(1, 2).Contiguous().Reshape(2, 4, 1).Transpose(1, 2).Expand(2, 3, 4).Narrow(2, 0, 2).Float64s()
		for i := 0; i < 2; i++ {
			for j := 0; j < 3; j++ {
				want = append(want, av[(i*3+j)*4:(i*3+j+1)*4]...)
				want = append(want, bv[(i*3+j)*4:(i*3+j+1)*4]...)
				want = append(want, cv[(i*3+j)*2:(i*3+j+1)*2]...)
			}
		}
		closeTo(t, name("concat ", d), vals(dst), want, 0)

		x := randT(4, tensor.F64, 2, 3).Cast(d)
		p := tensor.Empty(d, 3, 7)
		be.Pad(p, x, []int{0, 1, 2, 2}, -1)
		xv := x.Float64s()
		for i := 0; i < 3; i++ {
			for j := 0; j < 7; j++ {
				w := -1.0
				if i < 2 && j >= 2 && j < 5 {
					w = xv[i*3+j-2]
				}
				require.Equal(t, w, p.At(i, j), "pad %v (%d,%d)", d, i, j)
			}
		}
	}
}

func TestDropout(t *testing.T) {
	x := randT(1, tensor.F32, 100000)
	state := tensor.FromSlice([]int64{42, 0})
	y, m := tensor.Empty(tensor.F32, 100000), tensor.Empty(tensor.F32, 100000)
	be.Dropout(y, m, x, state, 0.3)
	require.Equal(t, int64(1), state.I64()[1])
	kept := 0
	for i, v := range m.F32() {
		if v != 0 {
			kept++
			require.InDelta(t, 1/0.7, float64(v), 1e-6)
		}
		require.Equal(t, x.F32()[i]*v, y.F32()[i])
	}
	require.InDelta(t, 0.7, float64(kept)/1e5, 0.01)
	// Same (seed, counter) → same mask; the next counter → a new one.
	m2 := tensor.Empty(tensor.F32, 100000)
	be.Dropout(y, m2, x, tensor.FromSlice([]int64{42, 0}), 0.3)
	require.Equal(t, m.F32(), m2.F32())
	be.Dropout(y, m2, x, state, 0.3)
	require.NotEqual(t, m.F32(), m2.F32())
	be.Dropout(y, nil, x, state, 1)
	for _, v := range y.F32() {
		require.Zero(t, v)
	}
}
