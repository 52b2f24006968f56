package kernels

// CaptureFamily is the execution family: capturing launches into a
// Graph for replay, and waiting for queued work.
type CaptureFamily interface {
	// BeginCapture starts recording launches instead of running them.
	// Between BeginCapture and EndCapture no kernel executes: reading an
	// output during capture sees stale data (documented capture footgun).
	BeginCapture() error
	// EndCapture stops recording and returns the recorded graph.
	EndCapture() (Graph, error)
	// Capturing reports whether a capture is in progress.
	Capturing() bool
	// Synchronize waits for all queued work.
	Synchronize() error
}

// Graph is a recorded sequence of launches over static buffers.
type Graph interface {
	// Replay runs the recorded launches again, in order, on the same
	// buffers. It does not allocate.
	Replay()
	// Len is the number of recorded launches.
	Len() int
}

// GraphCloser is implemented by a Graph that holds device resources (a
// driver graph and the memory its launches use) and can free them at
// once, instead of when the Graph is collected. It is an optional
// capability (check with a type assertion); call Close once the graph
// will not be replayed again.
type GraphCloser interface {
	// Close frees the graph; it may not be replayed afterwards.
	Close() error
}
