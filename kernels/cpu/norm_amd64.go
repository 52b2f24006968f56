//go:build amd64 && !purego

package cpu

// normAsm reports whether the float32 batch-norm and ReLU row kernels run
// in AVX2+FMA assembly (norm_amd64.s); norm_rows.go has the Go loops that
// handle the tails and every other case.
var normAsm = vdotAsm

// sumAVX2 returns Σ x[i] in float64 (n a positive multiple of 8).
//
//go:noescape
func sumAVX2(x *float32, n int) float64

// sqDevAVX2 returns Σ (x[i] − mu)² in float64 (n a positive multiple of 8).
//
//go:noescape
func sqDevAVX2(x *float32, n int, mu float64) float64

// gradSumsAVX2 returns Σ dy[i] and Σ dy[i]·(x[i] − mu) in float64, dy[i]
// counted, with relu, only where (x[i] − mu32)·a + b > 0 in float32 with
// one fused multiply-add, as affineActAVX2 computes the output before its
// ReLU (n a positive multiple of 8).
//
//go:noescape
func gradSumsAVX2(dy, x *float32, n int, mu float64, mu32, a, b float32, relu bool) (sg, sgd float64)

// affineActAVX2 sets y[i] = (x[i] − mu)·a + b, then max(·, +0) keeping
// NaN when relu (n a positive multiple of 8).
//
//go:noescape
func affineActAVX2(y, x *float32, n int, mu, a, b float32, relu bool)

// bnDxAVX2 sets dx[i] = c0 + c1·dy[i] + c2·(x[i] − mu), dy[i] taken, with
// relu, as +0 where (x[i] − mu)·a + b > 0 fails (as gradSumsAVX2; n a
// positive multiple of 8).
//
//go:noescape
func bnDxAVX2(dx, dy, x *float32, n int, mu, c1, c2, c0, a, b float32, relu bool)

// reluBwdAVX2 sets dx[i] = dy[i] where x[i] > 0, else +0 (n a positive
// multiple of 8).
//
//go:noescape
func reluBwdAVX2(dx, dy, x *float32, n int)
