package cpu

import "github.com/esper-go/esper/tensor"

// Staging: kernels compute in float32 (F32, BF16, F16) or float64 (F64,
// integers). A tensor whose dtype is not the compute type, or that is not
// contiguous, is converted into a scratch buffer prepared up front: inputs
// before the kernel runs, outputs after. Tensors already in the compute
// type are used in place. The conversions are prepared closures, so a
// launch that stages still allocates nothing.

type stage struct{ pre, post []func() }

func (s *stage) load() {
	for _, f := range s.pre {
		f()
	}
}

func (s *stage) store() {
	for _, f := range s.post {
		f()
	}
}

func dtypeOf[F tensor.Float]() tensor.DType {
	var z F
	if _, ok := any(z).(float64); ok {
		return tensor.F64
	}
	return tensor.F32
}

// direct reports whether t can be used in place as []F.
func direct[F tensor.Float](t *T) bool {
	return t.DType() == dtypeOf[F]() && t.IsContiguous()
}

// in returns t's elements as []F (row-major), staging when needed.
func in[F tensor.Float](s *stage, t *T) []F {
	if t == nil {
		return nil
	}
	if direct[F](t) {
		return tensor.Data[F](t)
	}
	tmp := tensor.Empty(dtypeOf[F](), t.Shape()...)
	s.pre = append(s.pre, copyFunc(tmp, t))
	return tensor.Data[F](tmp)
}

// out returns a []F the kernel writes t's elements into, rounded back
// into t after the kernel when staged.
func out[F tensor.Float](s *stage, t *T) []F {
	if t == nil {
		return nil
	}
	if direct[F](t) {
		return tensor.Data[F](t)
	}
	tmp := tensor.Empty(dtypeOf[F](), t.Shape()...)
	s.post = append(s.post, copyFunc(t, tmp))
	return tensor.Data[F](tmp)
}

// inout is in and out together, for tensors updated in place.
func inout[F tensor.Float](s *stage, t *T) []F {
	if t == nil {
		return nil
	}
	if direct[F](t) {
		return tensor.Data[F](t)
	}
	tmp := tensor.Empty(dtypeOf[F](), t.Shape()...)
	s.pre = append(s.pre, copyFunc(tmp, t))
	s.post = append(s.post, copyFunc(t, tmp))
	return tensor.Data[F](tmp)
}
