package device

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
)

// TestOpenCUDAPastTheDeviceCount: on a machine with one GPU (a stand-in
// count), cuda:7 is one line naming the device and the count, and
// wraps ErrUnavailable; nothing is opened.
func TestOpenCUDAPastTheDeviceCount(t *testing.T) {
	count, open := cudaCount, cudaOpen
	t.Cleanup(func() { cudaCount, cudaOpen = count, open })
	opened := 0
	cudaCount = func() (int, error) { return 1, nil }
	cudaOpen = func(int) (kernels.Backend, error) { opened++; return nil, errors.New("not in this test") }
	for _, name := range []string{"cuda:7", "cuda:1"} {
		_, err := Open(name)
		require.ErrorIs(t, err, ErrUnavailable)
		require.EqualError(t, err, name+": only 1 device")
	}
	cudaCount = func() (int, error) { return 0, nil }
	_, err := Open("cuda")
	require.EqualError(t, err, "cuda: this machine has no CUDA device")
	require.Zero(t, opened, "nothing past the count is opened")
}

// TestOpenList: distinct devices open in order; a repeat (sim and sim:0
// are one device) or a bad name is an error naming it.
func TestOpenList(t *testing.T) {
	devs, err := OpenList([]string{"sim:1", "sim", "cpu"})
	require.NoError(t, err)
	require.Equal(t, "[sim:1 sim:0 cpu]", fmt.Sprint(devs))
	_, err = OpenList([]string{"sim:0", "sim"})
	require.EqualError(t, err, "sim:0 is given twice")
	_, err = OpenList([]string{"sim:0", "gpu"})
	require.ErrorIs(t, err, ErrSyntax)
}
