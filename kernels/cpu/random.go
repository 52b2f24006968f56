package cpu

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// mix64 is the splitmix64 finaliser, a strong 64-bit mixing function.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const golden = 0x9e3779b97f4a7c15

// dropKey derives the per-launch key from (seed, counter).
func dropKey(seed, counter int64) uint64 {
	return mix64(uint64(seed) ^ mix64(uint64(counter)+golden))
}

// dropUniform is the uniform [0, 1) draw of element i under key.
func dropUniform(key uint64, i int) float64 {
	return float64(mix64(key+uint64(i)*golden)>>11) * (1.0 / (1 << 53))
}

// Dropout implements kernels.Backend. Element i is kept when its draw
// u(seed, counter, i) >= p; the kernel then increments state[1].
func (be *Backend) Dropout(dst, mask, x, state *T, p float64) {
	const name = "Dropout"
	needCPU(name, dst, mask, x, state)
	must(kernels.CheckDropout(name, dst, mask, x, state, p))
	needContig(name, "state", state)
	if wide(dst, x) {
		be.launch(dropoutPrep[float64](dst, mask, x, state, p))
	} else {
		be.launch(dropoutPrep[float32](dst, mask, x, state, p))
	}
}

func dropoutPrep[F tensor.Float](dst, mask, x, state *T, p float64) func() {
	var s stage
	xs := in[F](&s, x)
	ds := out[F](&s, dst)
	ms := out[F](&s, mask)
	st := tensor.Data[int64](state)
	scale := F(0)
	if p < 1 {
		scale = F(1 / (1 - p))
	}
	var key uint64
	body := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			m := scale
			if dropUniform(key, i) < p {
				m = 0
			}
			if ms != nil {
				ms[i] = m
			}
			ds[i] = xs[i] * m
		}
	}
	n := len(xs)
	return func() {
		s.load()
		key = dropKey(st[0], st[1])
		parallelFor(n, 4, body)
		st[1]++
		s.store()
	}
}
