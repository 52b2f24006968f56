package cuda

// The argument block of block_seq_f32 (src/softmax.cu), the launch that
// runs a kernels.BlockSequencer's held-back calls: pure Go, untagged, so
// that block_seq_kernel_test.go can run the kernel, transcribed to Go,
// over the blocks the cuda build packs, without a GPU.

// blockSeqWords is BLOCK_SEQ_WORDS (src/softmax.cu): the words of a
// BlockSeq's step list; with its count the argument is 4 KiB, the most
// a launch takes.
const blockSeqWords = 511

// Step kinds of a BlockSeq (SEQ_* in src/softmax.cu).
const (
	seqLinearCESGD   = 1
	seqLinearCESmall = 2
	seqZero          = 3
)

// blockSeqZeroBytes bounds the bytes a sequence's zeroing step clears
// (one block does it: a trainer's epoch metrics and a small layer's
// gradients, not a model's); a ZeroMany past it launches on its own.
const blockSeqZeroBytes = 64 << 10

// blockSeqDefaultThreads is the block of a sequence whose steps do not
// fix one (zeroing only).
const blockSeqDefaultThreads = 256

// blockSeq is a sequence of one-block launches waiting to run as one
// block_seq_f32 launch of threads threads (0: not fixed yet).
type blockSeq struct {
	n       int64
	w       [blockSeqWords]uint64
	used    int
	threads int
	// arg is words' result, kept so that a launch allocates nothing.
	arg [1 + blockSeqWords]uint64
}

// fits reports whether a step of args words whose launch takes threads
// threads (0: any) can join s.
func (s *blockSeq) fits(args, threads int) bool {
	if s.used+1+args > blockSeqWords {
		return false
	}
	return threads == 0 || s.threads == 0 || s.threads == threads
}

// add appends a step (s.fits must hold).
func (s *blockSeq) add(kind int, args []uint64, threads int) {
	s.w[s.used] = uint64(kind) | uint64(len(args))<<32
	copy(s.w[s.used+1:], args)
	s.used += 1 + len(args)
	s.n++
	if threads != 0 {
		s.threads = threads
	}
}

// empty reports whether no step is waiting.
func (s *blockSeq) empty() bool { return s.n == 0 }

// block is the launch's block size.
func (s *blockSeq) block() int {
	if s.threads == 0 {
		return blockSeqDefaultThreads
	}
	return s.threads
}

// words is the kernel's argument, struct BlockSeq: the count, then the
// step list (unused words zero; valid until the next call).
func (s *blockSeq) words() []uint64 {
	s.arg[0] = uint64(s.n)
	copy(s.arg[1:], s.w[:])
	return s.arg[:]
}

// reset empties s.
func (s *blockSeq) reset() {
	clear(s.w[:s.used])
	s.n, s.used, s.threads = 0, 0, 0
}

// zeroRange is a range of n 4-byte words at p, for a sequence's zeroing
// step.
type zeroRange struct {
	p, n uint64
}

// zeroStepArgs is a zeroing step's argument words: the range count, then
// each range's address and word count.
func zeroStepArgs(rs []zeroRange) []uint64 {
	out := make([]uint64, 0, 1+2*len(rs))
	out = append(out, uint64(len(rs)))
	for _, r := range rs {
		out = append(out, r.p, r.n)
	}
	return out
}

// zeroRanges returns the zeroing step for byte ranges (address, bytes)
// and whether they may be one: every address and length a multiple of 4,
// at most blockSeqZeroBytes in all (empty ranges are left out).
func zeroRanges(ptrs, bytes []uint64) ([]zeroRange, bool) {
	var rs []zeroRange
	var total uint64
	for i, p := range ptrs {
		n := bytes[i]
		if n == 0 {
			continue
		}
		if p%4 != 0 || n%4 != 0 {
			return nil, false
		}
		total += n
		rs = append(rs, zeroRange{p: p, n: n / 4})
	}
	return rs, total <= blockSeqZeroBytes
}
