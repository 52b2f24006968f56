package optim_test

import "math"

// Plain float64 reference implementations of the update rules, written
// from the PyTorch documentation of torch.optim.SGD and torch.optim.AdamW,
// one element at a time.

type refSGD struct {
	lr, momentum, dampening, wd float64
	nesterov, maximize          bool
	step                        int
	buf                         [][]float64
}

func (r *refSGD) update(p, g [][]float64) {
	r.step++
	if r.buf == nil {
		r.buf = make([][]float64, len(p))
		for i := range p {
			r.buf[i] = make([]float64, len(p[i]))
		}
	}
	for i := range p {
		for j := range p[i] {
			d := g[i][j]
			if r.maximize {
				d = -d
			}
			d += r.wd * p[i][j]
			if r.momentum != 0 {
				if r.step == 1 {
					r.buf[i][j] = d
				} else {
					r.buf[i][j] = r.momentum*r.buf[i][j] + (1-r.dampening)*d
				}
				if r.nesterov {
					d += r.momentum * r.buf[i][j]
				} else {
					d = r.buf[i][j]
				}
			}
			p[i][j] -= r.lr * d
		}
	}
}

type refAdamW struct {
	lr, beta1, beta2, eps, wd float64
	step                      int
	m, v                      [][]float64
}

func (r *refAdamW) update(p, g [][]float64) {
	r.step++
	if r.m == nil {
		r.m, r.v = make([][]float64, len(p)), make([][]float64, len(p))
		for i := range p {
			r.m[i], r.v[i] = make([]float64, len(p[i])), make([]float64, len(p[i]))
		}
	}
	t := float64(r.step)
	bc1 := 1 - math.Pow(r.beta1, t)
	bc2 := 1 - math.Pow(r.beta2, t)
	for i := range p {
		for j := range p[i] {
			p[i][j] *= 1 - r.lr*r.wd
			r.m[i][j] = r.beta1*r.m[i][j] + (1-r.beta1)*g[i][j]
			r.v[i][j] = r.beta2*r.v[i][j] + (1-r.beta2)*g[i][j]*g[i][j]
			denom := math.Sqrt(r.v[i][j])/math.Sqrt(bc2) + r.eps
			p[i][j] -= r.lr / bc1 * r.m[i][j] / denom
		}
	}
}
