package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCommitStamp: a commit stamped at link time is what reports record;
// without one (go test builds carry no VCS information) the working
// directory's checkout is used and marked as such.
func TestCommitStamp(t *testing.T) {
	saved := BuildCommit
	defer func() { BuildCommit = saved }()
	BuildCommit = "abc1234"
	require.Equal(t, "abc1234", ThisMachine().Commit)
	BuildCommit = ""
	c := ThisMachine().Commit
	require.True(t, c == "unknown" || strings.HasSuffix(c, " (working directory)"), "commit %q", c)
}
