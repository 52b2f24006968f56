package syncbuf

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConcurrentWrites: writes from many goroutines, read while they
// run, all arrive whole (run under -race in make test).
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, err := b.Write([]byte("ab"))
				require.NoError(t, err)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, strings.Repeat("ab", 800), b.String())
}
