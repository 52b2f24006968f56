//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

var _ kernels.MatMulsJoiner = (*Backend)(nil)

// MatMulsT implements kernels.MatMulsJoiner.
func (b *Backend) MatMulsT(calls []kernels.MatMulTCall) bool {
	done, err := b.d.MatMulsT(calls, b.precision())
	must(err)
	return done
}

// MatMulsT is kernels.MatMulsJoiner's MatMulsT, F32: every product, up
// to gemmJoin at a time, in one gemm_join_f32 launch (a block per 32×32
// output tile of any of them, each element summing its K products in
// order in fp32; a product of at most gemmJoinSkinny rows a column per
// warp, 32 lanes' partials in k order summed by a butterfly; fp32).
// With ESPER_CUDA_JOINS_TF32=on (off by default: it is slower than
// cuBLAS yet, see switches.go), in the matmul precision High (TF32),
// when every product has more than gemmJoinSkinny rows, they go to
// gemm_join_tf32 instead (a block of four warps per 64×64 tile, TF32
// tensor cores) up to gemmJoinMaxMACsTC each. False, having written
// nothing, with ESPER_CUDA_JOINS=off, an operand of another dtype, or a
// product past the bound (gemmJoinMaxMACs in fp32), which cuBLAS
// computes faster — unless ESPER_CUDA_SIDE_STREAMS=on, where two or
// more such products run through cuBLAS on side streams at once
// (matMulsTOnSides). Everything is checked before anything launches.
func (d *Device) MatMulsT(calls []kernels.MatMulTCall, prec Precision) (bool, error) {
	const op = "MatMulsT"
	dims, err := kernels.CheckMatMulsT(op, calls)
	if err := checked(err); err != nil {
		return false, err
	}
	if joinsOff.Load() {
		return false, nil
	}
	tc := prec == High && tf32JoinsOn.Load() // and every product with outputs has rows to fill tiles
	for i := range calls {
		if m, n := dims[i][0], dims[i][1]; m > 0 && n > 0 {
			tc = tc && m > gemmJoinSkinny
		}
	}
	most := int64(gemmJoinMaxMACs)
	kern, blocks, threads := "gemm_join_f32", gjTiles, 256
	if tc {
		most, kern, blocks, threads = gemmJoinMaxMACsTC, "gemm_join_tf32", gjTilesTC, 128
	}
	big := false // a product past the join's bound: cuBLAS's
	for i, c := range calls {
		m, n, k := dims[i][0], dims[i][1], dims[i][2]
		if c.A.DType() != tensor.F32 {
			return false, nil
		}
		big = big || int64(m)*int64(n)*int64(k) > most
	}
	if big && !sideStreamsOn.Load() {
		return false, nil
	}
	cs := make([]gjCall, 0, len(calls))
	f32 := []tensor.DType{tensor.F32, tensor.F32, tensor.F32}
	for i, c := range calls {
		m, n, k := dims[i][0], dims[i][1], dims[i][2]
		p, err := d.ptrList(fmt.Sprintf("%s: call %d", op, i), []string{"dst", "a", "b"}, []*tensor.Tensor{c.Dst, c.A, c.B}, f32, []bool{false, false, false})
		if err != nil {
			return false, err
		}
		if m > 0 && n > 0 { // else no outputs
			cs = append(cs, gjCall{d: uint64(p[0]), a: uint64(p[1]), b: uint64(p[2]), m: int64(m), n: int64(n), k: int64(k)})
		}
	}
	if len(cs) == 0 {
		return true, nil
	}
	if big {
		return d.matMulsTOnSides(cs, prec)
	}
	fn, err := d.kernel(kern)
	if err != nil {
		return false, err
	}
	release := d.enter()
	defer release()
	var w [gemmJoinWords]uint64
	for start := 0; start < len(cs); start += gemmJoin {
		tiles := gemmJoinPackBy(&w, cs[start:min(len(cs), start+gemmJoin)], blocks)
		d.joins.Add(1)
		if err := launchStruct(fn, [3]int{int(tiles), 1, 1}, [3]int{threads, 1, 1}, d.stream, w[:]); err != nil {
			return false, err
		}
	}
	return true, nil
}

// matMulsTOnSides is MatMulsT for products that cuBLAS computes
// (ESPER_CUDA_SIDE_STREAMS=on): two or more, each with K > 0, run on the
// side streams at once (productsOnSides), each product MatMul's; false,
// having written nothing, for one product, a product with K = 0, or
// side streams not made yet during a capture (the caller's MatMul per
// product then runs them on the device's stream).
func (d *Device) matMulsTOnSides(cs []gjCall, prec Precision) (bool, error) {
	if len(cs) < 2 {
		return false, nil
	}
	for _, c := range cs {
		if c.k == 0 {
			return false, nil
		}
	}
	l, err := d.sideLanes()
	if errors.Is(err, errSideLanesInCapture) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	release := d.enter()
	defer release()
	return true, d.productsOnSides(l, cs, prec)
}
