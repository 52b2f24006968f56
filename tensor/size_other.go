//go:build !linux

package tensor

// physicalMemory is unknown away from Linux: HostLimit falls back to 1 TiB.
func physicalMemory() int64 { return 0 }
