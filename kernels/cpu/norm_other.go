//go:build !amd64 || purego

package cpu

// normAsm is false: the Go loops of norm_rows.go do all the work.
const normAsm = false

func sumAVX2(x *float32, n int) float64               { panic("unreachable") }
func sqDevAVX2(x *float32, n int, mu float64) float64 { panic("unreachable") }
func gradSumsAVX2(dy, x *float32, n int, mu float64, mu32, a, b float32, relu bool) (sg, sgd float64) {
	panic("unreachable")
}
func affineActAVX2(y, x *float32, n int, mu, a, b float32, relu bool) { panic("unreachable") }
func bnDxAVX2(dx, dy, x *float32, n int, mu, c1, c2, c0, a, b float32, relu bool) {
	panic("unreachable")
}
func reluBwdAVX2(dx, dy, x *float32, n int) { panic("unreachable") }
