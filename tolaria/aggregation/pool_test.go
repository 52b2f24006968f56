package aggregation

import (
	"errors"
	"testing"

	"github.com/esper-go/esper/tensor"
)

func TestPoolReusesOneBufferOver1000Steps(t *testing.T) {
	var p GradientBufferPool
	const n = 1000
	for range 1000 {
		b, err := p.Acquire(n, tensor.F32)
		if err != nil {
			t.Fatal(err)
		}
		b.F32()[3] = 7 // a step writes its gradient
		if err := p.Release(b); err != nil {
			t.Fatal(err)
		}
	}
	s := p.Stats()
	want := PoolStats{Allocated: 1, Reused: 999, InUse: 0, Cached: 1, CachedBytes: 4 * n}
	if s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
}

func TestPoolAcquireReleaseAllocatesNothing(t *testing.T) {
	var p GradientBufferPool
	b, _ := p.Acquire(4096, tensor.F32)
	_ = p.Release(b)
	allocs := testing.AllocsPerRun(100, func() {
		b, err := p.Acquire(4096, tensor.F32)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Release(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("acquire/release of a cached size: %v allocations, want 0", allocs)
	}
}

func TestPoolZeroesOnReleaseAndMatchesSizeAndDType(t *testing.T) {
	var p GradientBufferPool
	a, _ := p.Acquire(8, tensor.F32)
	for i := range a.F32() {
		a.F32()[i] = float32(i + 1)
	}
	b, _ := p.Acquire(8, tensor.BF16)
	c, _ := p.Acquire(4, tensor.F32)
	if a == b || a == c {
		t.Fatal("distinct size or dtype shared a buffer")
	}
	for _, x := range []*tensor.Tensor{c, b, a} {
		if err := p.Release(x); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Cached != 3 || s.CachedBytes != 8*4+8*2+4*4 || s.Allocated != 3 {
		t.Fatalf("stats %+v", s)
	}
	got, _ := p.Acquire(8, tensor.F32)
	if got != a {
		t.Fatal("the cached buffer of equal size and dtype was not reused")
	}
	for i, v := range got.F32() {
		if v != 0 {
			t.Fatalf("reused buffer not zeroed: [%d] = %v", i, v)
		}
	}
	if got.Numel() != 8 || got.DType() != tensor.F32 || got.Rank() != 1 {
		t.Fatalf("buffer shape %v dtype %v", got.Shape(), got.DType())
	}
	if s := p.Stats(); s.Reused != 1 || s.InUse != 1 || s.Cached != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPoolReusesTheFirstMatch(t *testing.T) {
	var p GradientBufferPool
	a, _ := p.Acquire(16, tensor.F32)
	b, _ := p.Acquire(16, tensor.F32)
	_ = p.Release(b)
	_ = p.Release(a)
	if got, _ := p.Acquire(16, tensor.F32); got != b {
		t.Fatal("Acquire did not return the first cached match (released first)")
	}
}

func TestPoolRejects(t *testing.T) {
	var p GradientBufferPool
	if _, err := p.Acquire(-1, tensor.F32); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative size: %v", err)
	}
	if _, err := p.Acquire(4, tensor.I64); !errors.Is(err, ErrInvalid) {
		t.Fatalf("int dtype: %v", err)
	}
	if _, err := p.Acquire(4, tensor.Invalid); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid dtype: %v", err)
	}
	if err := p.Release(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nil release: %v", err)
	}
	if err := p.Release(tensor.Zeros(tensor.F32, 4)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("foreign buffer: %v", err)
	}
	b, _ := p.Acquire(4, tensor.F32)
	_ = p.Release(b)
	if err := p.Release(b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("double release: %v", err)
	}
	if s := p.Stats(); s.Cached != 1 {
		t.Fatalf("a rejected release changed the pool: %+v", s)
	}
}

func TestPoolDrain(t *testing.T) {
	var p GradientBufferPool
	a, _ := p.Acquire(10, tensor.F32)
	b, _ := p.Acquire(20, tensor.F32)
	_ = p.Release(a)
	if got := p.Drain(); got != 40 {
		t.Fatalf("Drain released %d bytes, want 40", got)
	}
	if err := p.Release(b); err != nil {
		t.Fatalf("a buffer in use across Drain: %v", err)
	}
	if s := p.Stats(); s.Cached != 1 || s.CachedBytes != 80 || s.InUse != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPoolConcurrentUse(t *testing.T) {
	var p GradientBufferPool
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 200 {
				b, err := p.Acquire(64, tensor.F32)
				if err != nil {
					t.Error(err)
					return
				}
				if err := p.Release(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	if s := p.Stats(); s.InUse != 0 || s.Allocated > 4 || s.Allocated+s.Reused != 800 {
		t.Fatalf("stats %+v", s)
	}
}
