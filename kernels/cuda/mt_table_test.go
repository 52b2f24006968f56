package cuda

import "testing"

// mtSpan is what mt_chunk in src/multi_tensor.cu decodes from a table.
type mtSpan struct {
	t, start, length int64
	vec              bool
}

// mtDecode is mt_chunk of src/multi_tensor.cu in Go.
func mtDecode(tab []uint64, lists int, ntensors, c int64) mtSpan {
	w := tab[ntensors*int64(lists+1)+c]
	var s mtSpan
	s.t = int64(w >> 40)
	s.start = int64(w&(1<<40-1)) * mtChunk
	nw := tab[s.t*int64(lists+1)+int64(lists)]
	n := int64(nw &^ mtAligned)
	s.vec = nw&mtAligned != 0
	s.length = min(mtChunk, n-s.start)
	return s
}

// TestMTTableCoversEveryElementOnce: decoded as the kernels decode it, a
// table of tensors of sizes around the chunk size (and empty ones)
// visits every element of every tensor exactly once, names each
// tensor's addresses, and marks exactly the tensors whose addresses are
// all 16-byte aligned. It runs without a GPU.
func TestMTTableCoversEveryElementOnce(t *testing.T) {
	sizes := []int64{1, 0, 3, mtChunk, mtChunk + 1, 2*mtChunk - 1, 5, 70000, 0}
	const lists = 3
	addr := make([][]uint64, lists)
	for l := range addr {
		for i := range sizes {
			a := uint64(0x7f0000000000 + (l*100+i)*4096)
			if i%4 == 2 && l == 1 {
				a += 4 // one misaligned operand makes the tensor scalar-only
			}
			addr[l] = append(addr[l], a)
		}
	}
	tab, chunks := mtWords(nil, addr, sizes)
	want := int64(0)
	for _, n := range sizes {
		want += (n + mtChunk - 1) / mtChunk
	}
	if chunks != want || int64(len(tab)) != int64(len(sizes))*(lists+1)+chunks {
		t.Fatalf("%d chunks in %d words, want %d chunks in %d words", chunks, len(tab), want, int64(len(sizes))*(lists+1)+want)
	}
	seen := make([][]int, len(sizes))
	for i, n := range sizes {
		seen[i] = make([]int, n)
	}
	for c := int64(0); c < chunks; c++ {
		s := mtDecode(tab, lists, int64(len(sizes)), c)
		if s.length <= 0 || s.start%4 != 0 {
			t.Fatalf("chunk %d: %+v", c, s)
		}
		if wantVec := s.t%4 != 2; s.vec != wantVec {
			t.Fatalf("chunk %d of tensor %d: vec %v, want %v", c, s.t, s.vec, wantVec)
		}
		for l := 0; l < lists; l++ {
			if got := tab[s.t*(lists+1)+int64(l)]; got != addr[l][s.t] {
				t.Fatalf("tensor %d list %d at %#x, want %#x", s.t, l, got, addr[l][s.t])
			}
		}
		for i := s.start; i < s.start+s.length; i++ {
			seen[s.t][i]++
		}
	}
	for ti, counts := range seen {
		for i, k := range counts {
			if k != 1 {
				t.Fatalf("tensor %d element %d visited %d times", ti, i, k)
			}
		}
	}
}
