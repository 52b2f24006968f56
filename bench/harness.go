package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/esper-go/esper/internal/atomicfile"
)

// Machine describes where a benchmark ran.
type Machine struct {
	Name       string `json:"name"` // directory name under bench/baselines
	CPU        string `json:"cpu"`
	GPU        string `json:"gpu,omitempty"` // the device of a GPU run
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	Commit     string `json:"commit"`
	Date       string `json:"date"`
}

// ThisMachine fills Machine from the running process.
func ThisMachine() Machine {
	m := Machine{
		CPU:        cpuModel(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		Commit:     commit(),
		Date:       time.Now().UTC().Format(time.RFC3339),
	}
	m.Name = fmt.Sprintf("cpu-%s-%dc", slug(m.CPU), m.NumCPU)
	return m
}

// ThisGPUMachine is ThisMachine for a run on a GPU: GPU names the device
// as its driver reports it, and Name is "gpu-<device>", the directory
// under bench/baselines that GPU.md files GPU figures in.
func ThisGPUMachine(gpu string) Machine {
	m := ThisMachine()
	m.GPU = gpu
	m.Name = "gpu-" + slug(gpu)
	return m
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			if i := strings.IndexByte(line, ':'); i >= 0 {
				return strings.TrimSpace(line[i+1:])
			}
		}
	}
	return runtime.GOARCH
}

func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimSuffix(b.String(), "-")
	if len(out) > 40 {
		out = strings.TrimSuffix(out[:40], "-")
	}
	return out
}

func commit() string {
	if BuildCommit != "" {
		return BuildCommit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			rev = rev[:min(len(rev), 7)]
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	// Neither stamped nor built with VCS information (GOFLAGS=-buildvcs=false,
	// go test, go run): the working directory's checkout, which is the
	// binary's own only when it was built from there, said so.
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		c := strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			c += "-dirty"
		}
		return c + " (working directory)"
	}
	return "unknown"
}

// BuildCommit is the commit the binary was built from, when the build
// stamps it:
//
//	go build -ldflags "-X github.com/esper-go/esper/bench.BuildCommit=$(git rev-parse --short HEAD)" ./cmd/esper
//
// (make esper and make gpu-bundle do). Reports record it as their commit;
// without it they take the build's VCS information, else the HEAD of the
// git checkout in the working directory, marked "(working directory)":
// a binary built elsewhere and run there would otherwise report the
// wrong commit.
var BuildCommit string

// Python is the interpreter that runs the peers: $ESPER_PYTHON when set
// (a GPU machine's PyTorch need not be the system one; bench/gpu reads
// the same variable), else that of Debian's python3-torch (it installs
// into the system Python, not a pyenv one first on PATH).
var Python = cmp.Or(os.Getenv("ESPER_PYTHON"), "/usr/bin/python3")

// ErrNoPeer means the PyTorch peer cannot run here.
var ErrNoPeer = errors.New("bench: PyTorch peer unavailable: install it with `apt-get install python3-torch libopenblas0-pthread` (Debian), then rerun with --compare pytorch")

// PeerAvailable reports whether Python with torch can be run.
func PeerAvailable() error {
	if _, err := os.Stat(Python); err != nil {
		return ErrNoPeer
	}
	if err := exec.Command(Python, "-c", "import torch").Run(); err != nil {
		return ErrNoPeer
	}
	return nil
}

// Python files of the PyTorch peers (in the peer directory) by workload:
// the script and the modules it imports.
var peerScripts = map[string][]string{
	"W1": {"w1_tolaria_ref.py", "peer_common.py"},
	"W2": {"w2_gnn.py", "peer_common.py"},
	"W4": {"w4_env_loop.py", "peer_common.py", "w2_gnn.py", "w4_seeds.py", "w5_host_train.py"},
	"W5": {"w5_host_train.py", "peer_common.py"},
	"W6": {"w6_gemm.py", "peer_common.py"},
	"W7": {"w7_foreach_optim.py", "peer_common.py"},
	// The GPU peers (--device cuda).
	"GPU": {"gpu_peers.py", "peer_common.py", "w5_host_train.py"},
}

// CheckPeerScripts makes sure that the peer files of the workloads (W1
// to W7, or GPU for the GPU peers) are in dir, so that --compare pytorch
// cannot fail after our measurements for a missing script (the peers are
// run from the working directory's bench/pytorch unless --peer-dir says
// otherwise).
func CheckPeerScripts(dir string, workloads ...string) error {
	for _, w := range workloads {
		for _, f := range peerScripts[w] {
			path := filepath.Join(dir, f)
			st, err := os.Stat(path)
			if err == nil && st.Mode().IsRegular() {
				continue
			}
			why := "not a regular file"
			var pe *fs.PathError
			switch {
			case errors.As(err, &pe):
				why = pe.Err.Error() // the reason, without the path again
			case err != nil:
				why = err.Error()
			}
			return fmt.Errorf("--compare pytorch: the %s peer needs %s: %s (the peers are in the repository's bench/pytorch: run from the repository's root or pass --peer-dir)",
				w, path, why)
		}
	}
	return nil
}

// RunPeer runs a PyTorch peer script from dir (bench/pytorch) with
// OMP_NUM_THREADS set to threads, passing args plus --json, and returns
// the decoded JSON result.
func RunPeer(dir, script string, threads int, args ...string) (map[string]any, error) {
	if err := PeerAvailable(); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp("", "esper-peer-*.json")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command(Python, append([]string{filepath.Join(dir, script), "--threads", fmt.Sprint(threads), "--json", tmp.Name()}, args...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("OMP_NUM_THREADS=%d", threads))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		return nil, fmt.Errorf("bench: peer %s failed: %v\n%s%s", script, err, out, stderr.String())
	}
	data, err := os.ReadFile(tmp.Name())
	if err != nil {
		return nil, err
	}
	var res map[string]any
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("bench: peer %s wrote invalid JSON: %v", script, err)
	}
	return res, nil
}

// PeerSession is a PyTorch peer script kept running between calls (its
// --serve mode), so that the harness can alternate short blocks of its
// own work with the peer's without paying Python's start-up, about two
// seconds, between them. Requests and replies are lines: the harness
// writes one request, the script answers with one JSON object.
type PeerSession struct {
	script string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	done   bool // the script was stopped or has exited
	// Ready is the script's first line, written once it is set up.
	Ready map[string]any
}

// StartPeer starts script from dir with OMP_NUM_THREADS set to threads,
// passing args plus --serve, and waits for its ready line. It returns an
// error wrapping ErrNoPeer when the peer cannot run here.
func StartPeer(dir, script string, threads int, args ...string) (*PeerSession, error) {
	if err := PeerAvailable(); err != nil {
		return nil, err
	}
	cmd := exec.Command(Python, append([]string{filepath.Join(dir, script), "--threads", fmt.Sprint(threads), "--serve"}, args...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("OMP_NUM_THREADS=%d", threads))
	return startSession(script, cmd)
}

// startSession starts cmd, a peer in its --serve mode, and waits for its
// ready line.
func startSession(script string, cmd *exec.Cmd) (*PeerSession, error) {
	s := &PeerSession{script: script, cmd: cmd, stderr: new(bytes.Buffer)}
	cmd.Stderr = s.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.in, s.out = in, bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting peer %s: %w", script, err)
	}
	if s.Ready, err = s.readReply(); err != nil {
		return nil, err
	}
	return s, nil
}

// Call sends one request line to the peer and returns its JSON reply.
// After an error the session is closed.
func (s *PeerSession) Call(request string) (map[string]any, error) {
	if s.done {
		return nil, fmt.Errorf("bench: peer %s: call after the session ended", s.script)
	}
	if strings.ContainsRune(request, '\n') {
		return nil, fmt.Errorf("bench: peer request %q spans lines", request)
	}
	if _, err := io.WriteString(s.in, request+"\n"); err != nil {
		return nil, s.fail(fmt.Errorf("sending %q: %w", request, err))
	}
	return s.readReply()
}

// readReply reads one JSON line from the peer.
func (s *PeerSession) readReply() (map[string]any, error) {
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		return nil, s.fail(fmt.Errorf("reading its reply: %w", err))
	}
	var res map[string]any
	if err := json.Unmarshal(line, &res); err != nil {
		return nil, s.fail(fmt.Errorf("it wrote %q, not a JSON object: %v", bytes.TrimSpace(line), err))
	}
	return res, nil
}

// fail stops the peer and returns err with what it wrote to stderr.
func (s *PeerSession) fail(err error) error {
	s.done = true
	s.in.Close()
	s.cmd.Process.Kill()
	s.cmd.Wait()
	return fmt.Errorf("bench: peer %s: %v\n%s", s.script, err, s.stderr.String())
}

// Close ends the session: it closes the peer's stdin and waits for the
// script to exit. It does nothing after a failed call, which has
// stopped the script already.
func (s *PeerSession) Close() error {
	if s.done {
		return nil
	}
	s.done = true
	s.in.Close()
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("bench: peer %s exited: %v\n%s", s.script, err, s.stderr.String())
	}
	return nil
}

// Report is the JSON written for one workload run.
type Report struct {
	Workload   string         `json:"workload"`
	Parameters map[string]any `json:"parameters"`
	Machine    Machine        `json:"machine"`
	Device     string         `json:"device"`
	Results    map[string]any `json:"results"`
	Peer       map[string]any `json:"peer,omitempty"`
	PeerError  string         `json:"peer_error,omitempty"`
	Ratios     map[string]any `json:"ratios,omitempty"`
}

// WriteReport writes r as indented JSON to dir/<workload>.json
// atomically and returns the path.
func WriteReport(dir string, r Report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, r.Workload+".json")
	if err := atomicfile.WriteBytes(path, append(data, '\n')); err != nil {
		return "", err
	}
	return path, nil
}
