//go:build !race

package cpu

// raceEnabled: the race detector is on (sync.Pool then drops some of
// what it is given, so pooled buffers are reallocated now and then).
const raceEnabled = false
