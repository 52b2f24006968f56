package kernels

// SegmentFamily is the segment op family, the message passing of graph
// networks: rows grouped by a segment id are reduced or normalised
// within their segment.
type SegmentFamily interface {
	// SegmentReduce reduces rows of src [E, F...] into dst [S, F...]
	// by segment id (segIDs [E], values in [0,S)) with Sum, Mean or Max.
	// Empty segments give 0. For Max, argmax (I64, dst's shape) receives
	// the winning row, or -1 for an empty segment; it is nil otherwise.
	SegmentReduce(op ReduceOp, dst, argmax, src, segIDs *T)
	// SegmentMaxBackward overwrites dsrc with dy routed to argmax.
	SegmentMaxBackward(dsrc, dy, argmax *T)
	// SegmentSoftmax normalises src [E, F...] with a softmax within each
	// segment, per feature (numSegments = S).
	SegmentSoftmax(dst, src, segIDs *T, numSegments int)
	// SegmentSoftmaxBackward computes dx = y*(dy - Σ_segment y·dy).
	SegmentSoftmaxBackward(dx, y, dy, segIDs *T, numSegments int)
}
