package cuda

// The layout of a multi-tensor table (src/multi_tensor.cu): pure Go, with
// no cgo, so that it is tested without a GPU (mt_table_test.go decodes it
// the way the kernels do).

// mtChunk is MT_CHUNK of src/multi_tensor.cu: the elements of one block
// work item (a multiple of 4, so that chunks keep 16-byte alignment).
const mtChunk = 16384

// mtMaxTensors is the most tensors a table can index (the chunk words
// keep the tensor index above bit 40).
const mtMaxTensors = 1 << 23

// mtAligned is the bit of a tensor's size word set when every one of its
// pointers is 16-byte aligned (the kernels' float4 path).
const mtAligned = 1 << 63

// mtWords appends to w the table of the operand lists — lists[l][t] is
// the device address of tensor t in list l, sizes[t] its element count
// (≥ 0, below 2^40·mtChunk) — and returns it with the number of chunks:
// for each tensor t, at word t·(L+1), its L addresses and then its size
// (with mtAligned); then for each chunk k of each tensor t in order, the
// word t<<40 | k. The caller checks len(sizes) < mtMaxTensors.
func mtWords[P ~uintptr | ~uint64](w []uint64, lists [][]P, sizes []int64) ([]uint64, int64) {
	var chunks int64
	for t, n := range sizes {
		aligned := true
		for _, l := range lists {
			w = append(w, uint64(l[t]))
			aligned = aligned && l[t]%16 == 0
		}
		word := uint64(n)
		if aligned {
			word |= mtAligned
		}
		w = append(w, word)
		chunks += (n + mtChunk - 1) / mtChunk
	}
	for t, n := range sizes {
		for k := int64(0); k*mtChunk < n; k++ {
			w = append(w, uint64(t)<<40|uint64(k))
		}
	}
	return w, chunks
}
