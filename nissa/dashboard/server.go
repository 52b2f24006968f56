package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/esper-go/esper/nissa"
)

// Defaults for Options.
const (
	// DefaultWriteTimeout bounds one write to a browser.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultAddr is where `esper ui` listens unless told otherwise.
	DefaultAddr = "127.0.0.1:8080"
	// shutdownWait is how long Close lets the event streams send what
	// they hold before it cuts them.
	shutdownWait = 2 * time.Second
)

// Options configures a Server. The zero value gives the defaults.
type Options struct {
	// Title is the page's title; default "esper".
	Title string
	// HistoryBytes and ClientBuffer configure each run's stream (see
	// nissa.StreamOptions); zero gives nissa's defaults.
	HistoryBytes, ClientBuffer int
	// WriteTimeout bounds one write to a browser; a browser that takes
	// longer is disconnected. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// AnyHost lets requests name any Host. Start sets it when it binds a
	// non-loopback address; otherwise only loopback names are answered
	// (localhost, 127.0.0.1, [::1]), against DNS rebinding.
	AnyHost bool
}

// RunInfo describes a run on the dashboard.
type RunInfo struct {
	// ID names the run in the server's URLs; the server assigns it.
	ID string `json:"id"`
	// Label is what the page calls the run ("with seeds (heuristic)").
	Label string `json:"label"`
	// Kind is "train" or "ppo" ("" lets the page tell from the events).
	Kind string `json:"kind"`
	// Dir is the run directory, shown on the page; its plot files are
	// served.
	Dir string `json:"dir"`
	// Total is the number of epochs (train) or rounds (ppo) planned; 0
	// when unknown.
	Total int `json:"total"`
	// Config is the run's configuration (flag → value).
	Config map[string]string `json:"config"`
	// Warnings are shown with the run (a torn or corrupt events.jsonl).
	Warnings []string `json:"warnings"`
	// Live reports a run still going on (its stream not ended).
	Live bool `json:"live"`
	// HistoryDropped is the number of the run's first events no longer
	// kept (nissa.StreamOptions.HistoryBytes).
	HistoryDropped uint64 `json:"history_dropped"`
}

// Run is one run the server shows.
type Run struct {
	info   RunInfo
	stream *nissa.StreamBackend
}

// Info returns the run's description, Live and HistoryDropped as of now.
func (r *Run) Info() RunInfo {
	in := r.info
	st := r.stream.Stats()
	in.Live = !st.Ended
	in.HistoryDropped = st.HistoryDropped
	return in
}

// Stream returns the run's stream.
func (r *Run) Stream() *nissa.StreamBackend { return r.stream }

// Server serves the dashboard of its runs; create it with New. It is
// safe for concurrent use.
type Server struct {
	opts Options
	mux  *http.ServeMux

	mu      sync.Mutex
	runs    []*Run
	changed chan struct{} // closed and replaced when a run is added

	quit     chan struct{} // closed by Close: event streams finish
	quitOnce sync.Once

	clients        atomic.Int64  // event streams open now
	served         atomic.Uint64 // event streams opened
	clientsDropped atomic.Uint64 // event streams cut for a slow browser

	httpSrv *http.Server
	addr    string
	served1 chan struct{} // closed when Serve returns
}

// New returns a server with no runs.
func New(opts Options) *Server {
	if opts.Title == "" {
		opts.Title = "esper"
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	s := &Server{opts: opts, changed: make(chan struct{}), quit: make(chan struct{})}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /{$}", s.serveIndex)
	s.mux.HandleFunc("GET /assets/{name}", s.serveAsset)
	s.mux.HandleFunc("GET /api/runs", s.serveRuns)
	s.mux.HandleFunc("GET /api/health", s.serveHealth)
	s.mux.HandleFunc("GET /api/events", s.serveEvents)
	s.mux.HandleFunc("GET /api/runs/{id}/files/{name}", s.serveRunFile)
	return s
}

// AddLive registers a live run and returns the backend that feeds it: add
// it to the run's hub (its name is "dashboard"). The hub's Close ends the
// run on the page. preload, when not empty, is an events.jsonl whose
// events are shown first (a resumed run's earlier epochs); a missing file
// is no error, an unreadable one a warning.
func (s *Server) AddLive(info RunInfo, preload string) *nissa.StreamBackend {
	st := s.newStream()
	if preload != "" {
		evs, warns, err := readEvents(preload)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			info.Warnings = append(info.Warnings, err.Error())
		default:
			info.Warnings = append(info.Warnings, warns...)
			for _, ev := range evs {
				_ = st.Emit(ev) // an event that does not encode is left out, as live
			}
		}
	}
	s.add(info, st)
	return st
}

// AddRun adds a finished run (ReadRunDir) and returns its description.
func (s *Server) AddRun(rd *RunDir) RunInfo {
	st := s.newStream()
	for _, ev := range rd.Events {
		_ = st.Emit(ev)
	}
	_ = st.Close()
	return s.add(rd.Info, st).Info()
}

// AddRunDir reads a finished run directory and adds it.
func (s *Server) AddRunDir(dir string) (RunInfo, error) {
	rd, err := ReadRunDir(dir)
	if err != nil {
		return RunInfo{}, err
	}
	return s.AddRun(rd), nil
}

func (s *Server) newStream() *nissa.StreamBackend {
	return nissa.NewStreamBackend(nissa.StreamOptions{
		Name: "dashboard", Encode: encodeEvent, HistoryBytes: s.opts.HistoryBytes, ClientBuffer: s.opts.ClientBuffer,
	})
}

func (s *Server) add(info RunInfo, st *nissa.StreamBackend) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	info.ID = "r" + strconv.Itoa(len(s.runs))
	if info.Label == "" {
		info.Label = info.ID
	}
	r := &Run{info: info, stream: st}
	s.runs = append(s.runs, r)
	close(s.changed)
	s.changed = make(chan struct{})
	return r
}

// Runs returns the server's runs in the order they were added.
func (s *Server) Runs() []*Run {
	runs, _ := s.snapshot()
	return runs
}

// snapshot returns the runs and the channel closed at the next change.
func (s *Server) snapshot() ([]*Run, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[:len(s.runs):len(s.runs)], s.changed
}

func (s *Server) run(id string) *Run {
	for _, r := range s.Runs() {
		if r.info.ID == id {
			return r
		}
	}
	return nil
}

// Handler returns the dashboard's HTTP handler: GET and HEAD only, every
// response marked read-only for the browser (no framing, no sniffing, a
// content security policy that allows only the server's own assets).
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		if !s.opts.AnyHost && !loopbackHost(r.Host) {
			http.Error(w, "the dashboard answers loopback names only (localhost, 127.0.0.1, [::1])", http.StatusMisdirectedRequest)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names the loopback
// interface.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ResolveAddr completes a listening address: a bare port ("8080" or
// ":8080") listens on 127.0.0.1, and loopback reports whether the address
// is a loopback one (an explicit 0.0.0.0 or another interface is not).
func ResolveAddr(addr string) (resolved string, loopback bool, err error) {
	if addr == "" {
		return "", false, errors.New("dashboard: empty address (give HOST:PORT, e.g. 127.0.0.1:8080)")
	}
	if _, err := strconv.ParseUint(addr, 10, 16); err == nil {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("dashboard: address %q: %w (give HOST:PORT, e.g. 127.0.0.1:8080)", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", false, fmt.Errorf("dashboard: address %q: bad port %q", addr, port)
	}
	return net.JoinHostPort(host, port), loopbackHost(host), nil
}

// Start listens on addr (ResolveAddr: a bare port is loopback) and serves
// the dashboard in the background until Close. A non-loopback address
// sets Options.AnyHost.
func (s *Server) Start(addr string) error {
	resolved, loopback, err := ResolveAddr(addr)
	if err != nil {
		return err
	}
	if s.httpSrv != nil {
		return errors.New("dashboard: server already started")
	}
	ln, err := net.Listen("tcp", resolved)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	if !loopback {
		s.opts.AnyHost = true
	}
	s.addr = ln.Addr().String()
	s.httpSrv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.served1 = make(chan struct{})
	go func() {
		defer close(s.served1)
		_ = s.httpSrv.Serve(ln)
	}()
	return nil
}

// URL returns the dashboard's address once started ("" before).
func (s *Server) URL() string {
	if s.addr == "" {
		return ""
	}
	host, port, _ := net.SplitHostPort(s.addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// Close stops the server: every open event stream sends what it holds
// and ends, then the listener and the connections are closed (within
// about two seconds).
func (s *Server) Close() error {
	s.quitOnce.Do(func() { close(s.quit) })
	if s.httpSrv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	err := s.httpSrv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.httpSrv.Close()
	}
	<-s.served1
	return err
}

// Health is the server's state, as /api/health serves it.
type Health struct {
	// Clients is the number of event streams open now; Served counts
	// those opened, and Dropped those cut because the browser could not
	// keep up.
	Clients int64  `json:"clients"`
	Served  uint64 `json:"served"`
	Dropped uint64 `json:"dropped"`
	// Runs holds each run's stream counters, by run id.
	Runs map[string]nissa.StreamStats `json:"runs"`
}

// Health returns the server's counters.
func (s *Server) Health() Health {
	h := Health{Clients: s.clients.Load(), Served: s.served.Load(), Dropped: s.clientsDropped.Load(), Runs: map[string]nissa.StreamStats{}}
	for _, r := range s.Runs() {
		h.Runs[r.info.ID] = r.stream.Stats()
	}
	return h
}

func (s *Server) serveRuns(w http.ResponseWriter, r *http.Request) {
	runs := s.Runs()
	out := make([]RunInfo, len(runs))
	for i, run := range runs {
		out[i] = run.Info()
	}
	writeJSON(w, out)
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.Health())
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// runFiles are the files of a run directory the dashboard serves, with
// their content types.
var runFiles = map[string]string{
	"training.png": "image/png",
	"alpha.png":    "image/png",
	"ppo.png":      "image/png",
}

// serveRunFile serves one of runFiles from a run's directory, opened
// through os.Root so that nothing outside the directory can be reached
// (a symbolic link out of it included).
func (s *Server) serveRunFile(w http.ResponseWriter, r *http.Request) {
	run := s.run(r.PathValue("id"))
	name := r.PathValue("name")
	ctype, ok := runFiles[name]
	if run == nil || !ok || run.info.Dir == "" {
		http.NotFound(w, r)
		return
	}
	root, err := os.OpenRoot(run.info.Dir)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, fi.ModTime(), f)
}
