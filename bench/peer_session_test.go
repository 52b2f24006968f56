package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakePeerEnv makes the test binary act as a peer in --serve mode (see
// TestFakePeer) instead of running its tests.
const fakePeerEnv = "ESPER_FAKE_PEER"

// TestFakePeer is the fake peer: with ESPER_FAKE_PEER=serve it writes a
// ready line, then answers each line "W R" with {"warmup": W, "reps": R};
// "die" makes it write to stderr and exit 3. Run normally, it does nothing.
func TestFakePeer(t *testing.T) {
	if os.Getenv(fakePeerEnv) != "serve" {
		return
	}
	fmt.Println(`{"ready": true}`)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var w, r int
		if sc.Text() == "die" {
			fmt.Fprintln(os.Stderr, "fake peer: asked to die")
			os.Exit(3)
		}
		if _, err := fmt.Sscan(sc.Text(), &w, &r); err != nil {
			fmt.Println("not json")
			continue
		}
		out, _ := json.Marshal(map[string]int{"warmup": w, "reps": r})
		fmt.Println(string(out))
	}
	os.Exit(0)
}

func fakePeer(t *testing.T) *PeerSession {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFakePeer$")
	cmd.Env = append(os.Environ(), fakePeerEnv+"=serve")
	s, err := startSession("fake", cmd)
	require.NoError(t, err)
	return s
}

// TestPeerSession: the session waits for the ready line, relays requests
// and replies one line each, ends cleanly at Close, and reports a peer
// that dies or answers garbage with what it wrote to stderr.
func TestPeerSession(t *testing.T) {
	s := fakePeer(t)
	require.Equal(t, true, s.Ready["ready"])
	for _, c := range [][2]int{{3, 20}, {0, 5}} {
		got, err := s.Call(fmt.Sprintf("%d %d", c[0], c[1]))
		require.NoError(t, err)
		require.Equal(t, map[string]any{"warmup": float64(c[0]), "reps": float64(c[1])}, got)
	}
	_, err := s.Call("1\n2")
	require.ErrorContains(t, err, "spans lines")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "a second Close does nothing")

	s = fakePeer(t)
	_, err = s.Call("die")
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "asked to die"), err.Error())
	_, err = s.Call("1 2")
	require.ErrorContains(t, err, "after the session ended")
	require.NoError(t, s.Close())

	s = fakePeer(t)
	_, err = s.Call("garbage")
	require.ErrorContains(t, err, "not a JSON object")
}
