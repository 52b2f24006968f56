package cpu

import (
	"math"
	"runtime"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// refGroupStats normalises blocks: x viewed as [blocks, size] with the
// affine parameter of element j of block b given by ch(b, j).
func refLayerNorm(x, w, b []float64, n int, eps float64) []float64 {
	y := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		var mu, v float64
		for _, e := range row {
			mu += e
		}
		mu /= float64(n)
		for _, e := range row {
			v += (e - mu) * (e - mu)
		}
		v /= float64(n)
		for j, e := range row {
			y[r*n+j] = (e-mu)/math.Sqrt(v+eps)*w[j] + b[j]
		}
	}
	return y
}

func TestLayerNorm(t *testing.T) {
	const eps = 1e-5
	for _, d := range floatTypes {
		for _, sh := range [][]int{{4, 3, 10}, {1, 1}, {5, 7}} {
			n := sh[len(sh)-1]
			m := tensor.Numel(sh) / n
			x := randT(1, d, sh...)
			w := randT(2, d, n)
			b := randT(3, d, n)
			sd := tensor.F32
			if d == tensor.F64 {
				sd = tensor.F64
			}
			y, mean, rstd := tensor.Empty(d, sh...), tensor.Empty(sd, m), tensor.Empty(sd, m)
			be.LayerNorm(y, mean, rstd, x, w, b, n, eps)
			closeTo(t, name("ln ", d, sh), vals(y), refLayerNorm(vals(x), vals(w), vals(b), n, eps), tol(d))

			dy := randT(4, d, sh...)
			dx, dw, db := tensor.Empty(d, sh...), tensor.Empty(d, n), tensor.Empty(d, n)
			be.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, n)
			x64, w64, b64 := asF64(x), asF64(w), asF64(b)
			f := func() []float64 { return refLayerNorm(x64.F64(), w64.F64(), b64.F64(), n, eps) }
			rt := max(tol(d), 1e-6)
			closeTo(t, name("ln dx ", d, sh), vals(dx), numGrad(x64, vals(dy), f), rt)
			closeTo(t, name("ln dw ", d, sh), vals(dw), numGrad(w64, vals(dy), f), rt)
			closeTo(t, name("ln db ", d, sh), vals(db), numGrad(b64, vals(dy), f), rt)
		}
	}
}

// refChannelNorm normalises x [N,C,HW] with statistics over the blocks
// chosen by key(n, c) and per-channel affine.
func refGroupNorm(x, w, b []float64, n, c, hw, groups int, eps float64) []float64 {
	y := make([]float64, len(x))
	cg := c / groups
	for i := 0; i < n; i++ {
		for g := 0; g < groups; g++ {
			blk := x[(i*c+g*cg)*hw : (i*c+(g+1)*cg)*hw]
			var mu, v float64
			for _, e := range blk {
				mu += e
			}
			mu /= float64(len(blk))
			for _, e := range blk {
				v += (e - mu) * (e - mu)
			}
			v /= float64(len(blk))
			for j, e := range blk {
				ch := g*cg + j/hw
				y[(i*c+g*cg)*hw+j] = (e-mu)/math.Sqrt(v+eps)*w[ch] + b[ch]
			}
		}
	}
	return y
}

func TestGroupNorm(t *testing.T) {
	const eps = 1e-5
	for _, d := range floatTypes {
		for _, c := range []struct{ n, ch, h, w, g int }{{3, 6, 4, 4, 2}, {2, 4, 3, 1, 4}, {1, 3, 5, 2, 1}} {
			sh := []int{c.n, c.ch, c.h, c.w}
			hw := c.h * c.w
			x, w, b := randT(1, d, sh...), randT(2, d, c.ch), randT(3, d, c.ch)
			sd := tensor.F32
			if d == tensor.F64 {
				sd = tensor.F64
			}
			y, mean, rstd := tensor.Empty(d, sh...), tensor.Empty(sd, c.n*c.g), tensor.Empty(sd, c.n*c.g)
			be.GroupNorm(y, mean, rstd, x, w, b, c.g, eps)
			closeTo(t, name("gn ", d, c), vals(y), refGroupNorm(vals(x), vals(w), vals(b), c.n, c.ch, hw, c.g, eps), tol(d))
			dy := randT(4, d, sh...)
			dx, dw, db := tensor.Empty(d, sh...), tensor.Empty(d, c.ch), tensor.Empty(d, c.ch)
			be.GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w, c.g)
			x64, w64, b64 := asF64(x), asF64(w), asF64(b)
			f := func() []float64 { return refGroupNorm(x64.F64(), w64.F64(), b64.F64(), c.n, c.ch, hw, c.g, eps) }
			rt := max(tol(d), 1e-6)
			closeTo(t, name("gn dx ", d, c), vals(dx), numGrad(x64, vals(dy), f), rt)
			closeTo(t, name("gn dw ", d, c), vals(dw), numGrad(w64, vals(dy), f), rt)
			closeTo(t, name("gn db ", d, c), vals(db), numGrad(b64, vals(dy), f), rt)
		}
	}
}

// refBatchNorm returns y (training: batch stats) and the batch mean and
// biased variance per channel.
func refBatchNorm(x, w, b []float64, n, c, hw int, eps float64, mean, vr []float64) []float64 {
	y := make([]float64, len(x))
	for ch := 0; ch < c; ch++ {
		mu, v := 0.0, 0.0
		if mean == nil {
			for i := 0; i < n; i++ {
				for _, e := range x[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					mu += e
				}
			}
			mu /= float64(n * hw)
			for i := 0; i < n; i++ {
				for _, e := range x[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					v += (e - mu) * (e - mu)
				}
			}
			v /= float64(n * hw)
		} else {
			mu, v = mean[ch], vr[ch]
		}
		for i := 0; i < n; i++ {
			for j := (i*c + ch) * hw; j < (i*c+ch+1)*hw; j++ {
				y[j] = (x[j]-mu)/math.Sqrt(v+eps)*w[ch] + b[ch]
			}
		}
	}
	return y
}

func TestBatchNorm(t *testing.T) {
	const eps, mom = 1e-5, 0.1
	for _, d := range floatTypes {
		for _, c := range []struct{ n, ch, h, w int }{{4, 3, 5, 5}, {2, 1, 1, 7}, {5, 2, 1, 1}} {
			sh := []int{c.n, c.ch, c.h, c.w}
			hw := c.h * c.w
			cnt := float64(c.n * hw)
			x, w, b := randT(1, d, sh...), randT(2, d, c.ch), randT(3, d, c.ch)
			sd := tensor.F32
			if d == tensor.F64 {
				sd = tensor.F64
			}
			rm, rv := tensor.Full(sd, 0.5, c.ch), tensor.Full(sd, 2, c.ch)
			y, sm, sr := tensor.Empty(d, sh...), tensor.Empty(sd, c.ch), tensor.Empty(sd, c.ch)
			be.BatchNorm(y, sm, sr, x, w, b, rm, rv, true, mom, eps)
			closeTo(t, name("bn ", d, c), vals(y), refBatchNorm(vals(x), vals(w), vals(b), c.n, c.ch, hw, eps, nil, nil), tol(d))
			// Running statistics: unbiased variance.
			xv := vals(x)
			wantM, wantV := make([]float64, c.ch), make([]float64, c.ch)
			for ch := 0; ch < c.ch; ch++ {
				var mu, v float64
				for i := 0; i < c.n; i++ {
					for _, e := range xv[(i*c.ch+ch)*hw : (i*c.ch+ch+1)*hw] {
						mu += e
					}
				}
				mu /= cnt
				for i := 0; i < c.n; i++ {
					for _, e := range xv[(i*c.ch+ch)*hw : (i*c.ch+ch+1)*hw] {
						v += (e - mu) * (e - mu)
					}
				}
				wantM[ch] = 0.9*0.5 + 0.1*mu
				wantV[ch] = 0.9*2 + 0.1*v/(cnt-1)
			}
			closeTo(t, name("bn running mean ", d), vals(rm), wantM, max(tol(d), 1e-6))
			closeTo(t, name("bn running var ", d), vals(rv), wantV, max(tol(d), 1e-6))

			dy := randT(4, d, sh...)
			dx, dw, db := tensor.Empty(d, sh...), tensor.Empty(d, c.ch), tensor.Empty(d, c.ch)
			be.BatchNormBackward(dx, dw, db, dy, x, sm, sr, w, true)
			x64, w64, b64 := asF64(x), asF64(w), asF64(b)
			f := func() []float64 {
				return refBatchNorm(x64.F64(), w64.F64(), b64.F64(), c.n, c.ch, hw, eps, nil, nil)
			}
			rt := max(tol(d), 2e-6)
			closeTo(t, name("bn dx ", d, c), vals(dx), numGrad(x64, vals(dy), f), rt)
			closeTo(t, name("bn dw ", d, c), vals(dw), numGrad(w64, vals(dy), f), rt)
			closeTo(t, name("bn db ", d, c), vals(db), numGrad(b64, vals(dy), f), rt)

			// Evaluation uses the running statistics.
			be.BatchNorm(y, sm, sr, x, w, b, rm, rv, false, mom, eps)
			fe := func() []float64 {
				return refBatchNorm(x64.F64(), w64.F64(), b64.F64(), c.n, c.ch, hw, eps, vals(rm), vals(rv))
			}
			closeTo(t, name("bn eval ", d, c), vals(y), fe(), tol(d))
			be.BatchNormBackward(dx, dw, db, dy, x, sm, sr, w, false)
			closeTo(t, name("bn eval dx ", d, c), vals(dx), numGrad(x64, vals(dy), fe), rt)
			closeTo(t, name("bn eval dw ", d, c), vals(dw), numGrad(w64, vals(dy), fe), rt)
		}
	}
}

func TestBatchNormDeterministic(t *testing.T) {
	x := randT(1, tensor.F32, 64, 8, 30, 30)
	dy := randT(2, tensor.F32, 64, 8, 30, 30)
	run := func(p int) [][]float64 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
		y, sm, sr := tensor.Empty(tensor.F32, 64, 8, 30, 30), tensor.Empty(tensor.F32, 8), tensor.Empty(tensor.F32, 8)
		rm, rv := tensor.Zeros(tensor.F32, 8), tensor.Ones(tensor.F32, 8)
		be.BatchNorm(y, sm, sr, x, nil, nil, rm, rv, true, 0.1, 1e-5)
		dx, dw, db := tensor.Empty(tensor.F32, 64, 8, 30, 30), tensor.Empty(tensor.F32, 8), tensor.Empty(tensor.F32, 8)
		be.BatchNormBackward(dx, dw, db, dy, x, sm, sr, nil, true)
		return [][]float64{vals(y), vals(rv), vals(dx), vals(dw)}
	}
	a, b := run(1), run(2)
	for i := range a {
		same(t, name("bn ", i), a[i], b[i])
	}
}
