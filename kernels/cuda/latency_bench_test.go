//go:build cuda

package cuda

import (
	"testing"

	"github.com/esper-go/esper/tensor"
)

// BenchmarkLatencyFloor measures what a replayed W1 epoch pays besides
// its kernels' work, on this GPU: the trainer launches the epoch's graph
// and reads 64 bytes of metrics back (one host sync). Each iteration is
// one such round trip:
//
//   - read: the 64-byte device→host read alone (the copy and the wait);
//   - replay-sync: a graph of one small kernel (a 64-byte zeroing)
//     replayed and waited for;
//   - replay-read: that graph, then the read (W1's epoch as one node);
//   - replay9-read: a graph of nine such kernels, then the read (W1's
//     epoch before it ran as one block sequence).
//
// The difference between replay-read and W1's trainer-captured latency
// is the epoch's kernel time and the trainer's host work.
func BenchmarkLatencyFloor(b *testing.B) {
	met, err := tensor.Zeros(tensor.F32, 16).ToDevice(tensor.CUDA(0))
	if err != nil {
		b.Fatal(err)
	}
	graph := func(b *testing.B, kernels int) *Graph {
		if err := dev.BeginCapture(); err != nil {
			b.Fatal(err)
		}
		for range kernels {
			if err := dev.ZeroMany([]*tensor.Tensor{met}); err != nil {
				b.Fatal(err)
			}
		}
		g, err := dev.EndCapture()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Close() })
		return g
	}
	read := func(b *testing.B) {
		if _, err := met.ToDevice(tensor.CPU); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("read", func(b *testing.B) {
		for range b.N {
			read(b)
		}
	})
	b.Run("replay-sync", func(b *testing.B) {
		g := graph(b, 1)
		for range b.N {
			if err := g.Replay(); err != nil {
				b.Fatal(err)
			}
			if err := dev.Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 9} {
		name := "replay-read"
		if n > 1 {
			name = "replay9-read"
		}
		b.Run(name, func(b *testing.B) {
			g := graph(b, n)
			if g.Nodes() != n {
				b.Fatalf("%d graph nodes, want %d", g.Nodes(), n)
			}
			for range b.N {
				if err := g.Replay(); err != nil {
					b.Fatal(err)
				}
				read(b)
			}
		})
	}
}
