package cuda

import "math"

// A launch's argument block, pure Go and untagged (the cuda build's
// launchRaw passes it to the driver; driver.go adds ptr), so that the
// tests that run transcribed kernels without a GPU read their arguments
// from the very block a launcher builds.

// maxArgs is the most kernel arguments launch passes; maxWords the most
// 8-byte words they may fill together (a struct argument takes several).
const (
	maxArgs  = 16
	maxWords = 64
)

// args holds a launch's kernel arguments: argument i starts at word
// off[i] of v; scalars take one word each.
type args struct {
	v   [maxWords]uint64
	off [maxArgs]int32
	n   int // arguments
	w   int // words used
}

// push appends an argument of len(ws) words.
func (a *args) push(ws ...uint64) *args {
	if a.n == maxArgs || a.w+len(ws) > maxWords {
		panic("cuda: too many kernel arguments") // a programming error in this package
	}
	a.off[a.n] = int32(a.w)
	a.w += copy(a.v[a.w:], ws)
	a.n++
	return a
}

// addr appends a device address given as its integer value.
func (a *args) addr(p uint64) *args { return a.push(p) }
func (a *args) i64(x int64) *args   { return a.push(uint64(x)) }
func (a *args) i32(x int32) *args   { return a.push(uint64(uint32(x))) }
func (a *args) f32(x float32) *args { return a.push(uint64(math.Float32bits(x))) }
func (a *args) f64(x float64) *args { return a.push(math.Float64bits(x)) }
