package nissa

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/esper-go/esper/leyline"
)

// DefaultJSONLFlushEvery is how many events JSONLBackend buffers before
// writing them to the file (G2 FileOutput buffer size).
const DefaultJSONLFlushEvery = 10

// JSONLOptions configures a JSONLBackend. The zero value gives the
// defaults.
type JSONLOptions struct {
	// Name is the backend's name; default "jsonl".
	Name string
	// FlushEvery is how many events are buffered before a write;
	// default DefaultJSONLFlushEvery.
	FlushEvery int
}

// JSONLBackend appends each event to a file as one JSON object per line
// (json.Marshal of the leyline.TelemetryEvent). The file is created with
// mode 0644 (and its directory with 0755) if missing, and appended to if
// present. Rows are buffered and written every FlushEvery events, on
// Hub.Flush and on Close.
type JSONLBackend struct {
	name       string
	path       string
	flushEvery int
	f          *os.File
	w          *bufio.Writer
	pending    int
}

// NewJSONLBackend returns a backend that will write to path once started.
func NewJSONLBackend(path string, opts JSONLOptions) *JSONLBackend {
	if opts.Name == "" {
		opts.Name = "jsonl"
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = DefaultJSONLFlushEvery
	}
	return &JSONLBackend{name: opts.Name, path: path, flushEvery: opts.FlushEvery}
}

// Name returns the backend's name.
func (j *JSONLBackend) Name() string { return j.name }

// Path returns the file the backend writes.
func (j *JSONLBackend) Path() string { return j.path }

// Start creates the file's directory and opens the file for appending.
func (j *JSONLBackend) Start() error {
	if j.f != nil {
		return fmt.Errorf("nissa: jsonl %s: already started", j.path)
	}
	if err := os.MkdirAll(filepath.Dir(j.path), 0o755); err != nil {
		return fmt.Errorf("nissa: jsonl: %w", err)
	}
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("nissa: jsonl: %w", err)
	}
	j.f = f
	j.w = bufio.NewWriter(f)
	return nil
}

// Emit encodes ev and buffers it as one line. An event that fails to
// encode (an invalid payload, say) is returned as an error and not
// written.
func (j *JSONLBackend) Emit(ev leyline.TelemetryEvent) error {
	if j.w == nil {
		return fmt.Errorf("nissa: jsonl %s: not started", j.path)
	}
	row, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("nissa: jsonl: encode %s event: %w", ev.Type, err)
	}
	row = append(row, '\n')
	if _, err := j.w.Write(row); err != nil {
		return fmt.Errorf("nissa: jsonl %s: %w", j.path, err)
	}
	j.pending++
	if j.pending >= j.flushEvery {
		return j.Flush()
	}
	return nil
}

// Flush writes the buffered rows to the file.
func (j *JSONLBackend) Flush() error {
	if j.w == nil {
		return nil
	}
	j.pending = 0
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("nissa: jsonl %s: %w", j.path, err)
	}
	return nil
}

// Close writes the buffered rows and closes the file.
func (j *JSONLBackend) Close() error {
	if j.f == nil {
		return nil
	}
	ferr := j.Flush()
	cerr := j.f.Close()
	j.f, j.w = nil, nil
	if cerr != nil {
		cerr = fmt.Errorf("nissa: jsonl %s: %w", j.path, cerr)
	}
	return errors.Join(ferr, cerr)
}
