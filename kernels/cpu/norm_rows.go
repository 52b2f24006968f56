package cpu

import "github.com/esper-go/esper/tensor"

// The row kernels of batch norm and ReLU: float32 rows run the AVX2+FMA
// kernels of norm_amd64.s on their multiple-of-8 part and these loops on
// the tail; float64 rows (and builds without the kernels) run the loops
// alone. Sums are taken in float64 either way.

// f32Rows returns the float32 views of rows when F is float32 and the
// assembly kernels are on.
func f32Row[F tensor.Float](x []F) ([]float32, bool) {
	if !normAsm {
		return nil, false
	}
	x32, ok := any(x).([]float32)
	return x32, ok
}

// rowSum returns Σ x[i].
func rowSum[F tensor.Float](x []F) float64 {
	x32, ok := f32Row(x)
	if !ok {
		return sum4(x)
	}
	n8, s := len(x32)&^7, 0.0
	if n8 > 0 {
		s = sumAVX2(&x32[0], n8)
	}
	for _, v := range x32[n8:] {
		s += float64(v)
	}
	return s
}

// rowSqDev returns Σ (x[i] − mu)².
func rowSqDev[F tensor.Float](x []F, mu float64) float64 {
	x32, ok := f32Row(x)
	if !ok {
		return sqDev4(x, mu)
	}
	n8, s := len(x32)&^7, 0.0
	if n8 > 0 {
		s = sqDevAVX2(&x32[0], n8, mu)
	}
	for _, v := range x32[n8:] {
		d := float64(v) - mu
		s += d * d
	}
	return s
}

// reluMask describes the ReLU that followed a batch norm's affine map in
// its forward, so that the backward can tell where the output was
// positive from the input alone, without reading the output: element i
// passed when (x[i] − mu)·a + b > 0, computed exactly as rowAffineAct
// computed it (reluPass). The zero value masks nothing.
type reluMask struct {
	on   bool
	a, b float64 // the forward's scale and shift; mu is the row's mean
}

// affineTail32 is rowAffineAct's output for a float32 element past the
// kernel's blocks of 8 (two roundings, no fused multiply-add), and
// affine64 for any element without the kernels: the forward and the
// backward's mask share them, so they round alike.
func affineTail32(x, mu, a, b float32) float32 {
	v := (x - mu) * a
	return v + b
}

func affine64[F tensor.Float](x F, mu, a, b float64) F { return F((float64(x)-mu)*a + b) }

// reluPass reports whether element x of a row passed the ReLU described
// by m (mean mu): f32 for a float32 tail element of the kernel path.
func reluPass[F tensor.Float](m reluMask, x F, mu float64, f32 bool) bool {
	if !m.on {
		return true
	}
	if f32 {
		return affineTail32(float32(x), float32(mu), float32(m.a), float32(m.b)) > 0
	}
	return affine64(x, mu, m.a, m.b) > 0
}

// rowGradSums returns Σ g[i] and Σ g[i]·(x[i] − mu), g[i] counted only
// where the ReLU m passed (the gradient through a batch norm's ReLU).
func rowGradSums[F tensor.Float](g, x []F, m reluMask, mu float64) (sg, sgd float64) {
	x = x[:len(g)]
	g32, ok := f32Row(g)
	n8 := 0
	if ok {
		if n8 = len(g) &^ 7; n8 > 0 {
			sg, sgd = gradSumsAVX2(&g32[0], &any(x).([]float32)[0], n8, mu, float32(mu), float32(m.a), float32(m.b), m.on)
		}
	}
	for i := n8; i < len(g); i++ {
		if !reluPass(m, x[i], mu, ok) {
			continue
		}
		v := g[i]
		sg += float64(v)
		sgd += float64(v) * (float64(x[i]) - mu)
	}
	return sg, sgd
}

// rowAffineAct sets y[i] = (x[i] − mu)·a + b, then max(·, +0) keeping
// NaN when relu.
func rowAffineAct[F tensor.Float](y, x []F, mu, a, b float64, relu bool) {
	y = y[:len(x)]
	n8 := 0
	if x32, ok := f32Row(x); ok {
		if n8 = len(x) &^ 7; n8 > 0 {
			affineActAVX2(&any(y).([]float32)[0], &x32[0], n8, float32(mu), float32(a), float32(b), relu)
		}
		for i := n8; i < len(x); i++ {
			y[i] = F(affineTail32(x32[i], float32(mu), float32(a), float32(b)))
		}
	} else {
		for i := range x {
			y[i] = affine64(x[i], mu, a, b)
		}
	}
	if relu {
		for i := n8; i < len(x); i++ {
			y[i] = max(y[i], 0)
		}
	}
}

// rowBnDx sets dx[i] = c0 + c1·g[i] + c2·(x[i] − mu), g[i] taken as +0
// where the ReLU m did not pass.
func rowBnDx[F tensor.Float](dx, g, x []F, m reluMask, mu, c1, c2, c0 float64) {
	x, dx = x[:len(g)], dx[:len(g)]
	n8 := 0
	g32, ok := f32Row(g)
	if ok {
		if n8 = len(g) &^ 7; n8 > 0 {
			bnDxAVX2(&any(dx).([]float32)[0], &g32[0], &any(x).([]float32)[0], n8,
				float32(mu), float32(c1), float32(c2), float32(c0), float32(m.a), float32(m.b), m.on)
		}
	}
	for i := n8; i < len(g); i++ {
		gv := float64(g[i])
		if !reluPass(m, x[i], mu, ok) {
			gv = 0
		}
		dx[i] = F(c0 + c1*gv + c2*(float64(x[i])-mu))
	}
}

// rowReluBwd sets dx[i] = g[i] where x[i] > 0, else +0.
func rowReluBwd[F tensor.Float](dx, g, x []F) {
	x, dx = x[:len(g)], dx[:len(g)]
	n8 := 0
	if g32, ok := f32Row(g); ok {
		if n8 = len(g) &^ 7; n8 > 0 {
			reluBwdAVX2(&any(dx).([]float32)[0], &g32[0], &any(x).([]float32)[0], n8)
		}
	}
	for i := n8; i < len(g); i++ {
		dx[i] = maskF(g[i], x[i] > 0)
	}
}
