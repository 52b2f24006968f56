package nissa

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/esper-go/esper/leyline"
)

// DirOptions configures a DirBackend. The zero value gives the defaults.
type DirOptions struct {
	// Name is the backend's name; default "dir".
	Name string
	// FlushEvery is passed to the JSONL writer; default
	// DefaultJSONLFlushEvery.
	FlushEvery int
	// Now stamps the directory name; default time.Now (local time, as
	// the Python DirectoryOutput).
	Now func() time.Time
}

// maxDirSuffix bounds the collision suffix (_001 .. _999).
const maxDirSuffix = 999

// DirBackend writes a run's events to a fresh directory under a root:
// <root>/telemetry_YYYY-MM-DD_HHMMSS/events.jsonl, or with a _NNN suffix
// (_001, _002, ...) when a run started in the same second already took
// the name (G2 DirectoryOutput). The directory is created by
// NewDirBackend, so its path is known before the backend is added to a
// hub; the file is written as by JSONLBackend.
type DirBackend struct {
	dir string
	j   *JSONLBackend
}

// NewDirBackend creates the run directory under root (creating root too
// if missing) and returns a backend writing events.jsonl inside it.
func NewDirBackend(root string, opts DirOptions) (*DirBackend, error) {
	if opts.Name == "" {
		opts.Name = "dir"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("nissa: dir backend: %w", err)
	}
	base := "telemetry_" + opts.Now().Format("2006-01-02_150405")
	for i := 0; i <= maxDirSuffix; i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s_%03d", base, i)
		}
		dir := filepath.Join(root, name)
		// Mkdir, not MkdirAll: an existing directory must fail so that
		// two runs never share one.
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			j := NewJSONLBackend(filepath.Join(dir, "events.jsonl"),
				JSONLOptions{Name: opts.Name, FlushEvery: opts.FlushEvery})
			return &DirBackend{dir: dir, j: j}, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("nissa: dir backend: %w", err)
		}
	}
	return nil, fmt.Errorf("nissa: dir backend: %s: every suffix up to _%03d is taken", filepath.Join(root, base), maxDirSuffix)
}

// OpenDirBackend returns a backend that continues the run directory dir
// (made by NewDirBackend): events are appended to its events.jsonl. A
// resumed run uses it, after RepairJSONL has cut the file back to the
// checkpoint it resumes from.
func OpenDirBackend(dir string, opts DirOptions) (*DirBackend, error) {
	if opts.Name == "" {
		opts.Name = "dir"
	}
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("nissa: dir backend: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("nissa: dir backend: %s is not a directory", dir)
	}
	j := NewJSONLBackend(filepath.Join(dir, "events.jsonl"), JSONLOptions{Name: opts.Name, FlushEvery: opts.FlushEvery})
	return &DirBackend{dir: dir, j: j}, nil
}

// Dir returns the run directory.
func (d *DirBackend) Dir() string { return d.dir }

// Path returns the events file, <Dir>/events.jsonl.
func (d *DirBackend) Path() string { return d.j.Path() }

// Name returns the backend's name.
func (d *DirBackend) Name() string { return d.j.Name() }

// Start opens events.jsonl.
func (d *DirBackend) Start() error { return d.j.Start() }

// Emit buffers ev as one line of events.jsonl.
func (d *DirBackend) Emit(ev leyline.TelemetryEvent) error { return d.j.Emit(ev) }

// Flush writes the buffered rows to events.jsonl.
func (d *DirBackend) Flush() error { return d.j.Flush() }

// Close writes the buffered rows and closes events.jsonl.
func (d *DirBackend) Close() error { return d.j.Close() }
