package kernels

// BlockSequencer is implemented by a backend that can run a run of
// consecutive small launches as one launch of one block (CUDA:
// block_seq_f32, one block that runs each call's code in turn with a
// barrier between them), so that a captured graph of many small
// dependent kernels — a small model's whole training epoch — is one node
// instead of one per kernel. It is an optional capability (check with a
// type assertion).
//
// Between BeginSequence and EndSequence the backend may hold back the
// calls it can join (CUDA: LinearCESGDStep and LinearCrossEntropyCount
// where each is one block on its own, and a ZeroMany of at most 64 KiB,
// cleared by the joined launch's block) and launch them together later.
// Every other call on the backend — a launch, a copy, a synchronisation,
// the end of a capture — first launches what is held back, so every
// call's effects come in the calls' order, and each held-back call
// writes bit for bit what it writes on its own (the same code, with the
// block size its own launch takes). A held-back call reports what it
// would report outside a sequence (true: it will run); a failed launch
// of joined calls is returned by an EndSequence, not by the calls.
//
// Sequences may overlap (goroutines that share a device each run one):
// calls are held back while any is on, and each EndSequence launches
// what is held back — whichever goroutine's calls it holds, and into
// whichever capture is running, as any launch on a device's one stream
// would go; so do not share a device between goroutines while one
// captures. Outside a sequence, and on a backend without the
// capability, every call launches at once.
type BlockSequencer interface {
	// BeginSequence starts holding back the calls the backend can join.
	BeginSequence()
	// EndSequence launches what is held back and ends one sequence. It
	// returns the first error a launch of joined calls met that no
	// earlier EndSequence returned, and an error outside a sequence.
	EndSequence() error
}
