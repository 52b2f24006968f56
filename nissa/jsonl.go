package nissa

import (
	"bufio"
	"bytes"
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
// Hub.Flush and on Close, always as whole lines: a process killed at any
// point leaves at most one torn line at the end (from a write the system
// cut short), which ReadJSONL skips and RepairJSONL removes.
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
	if len(row) > j.w.Available() && j.w.Buffered() > 0 {
		// The buffer would write part of this row when it fills: write
		// the whole rows before it first.
		if err := j.w.Flush(); err != nil {
			return fmt.Errorf("nissa: jsonl %s: %w", j.path, err)
		}
	}
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

// JSONLRepair is what RepairJSONL did to a file.
type JSONLRepair struct {
	// Dropped is the number of bytes cut, and Lines the number of lines
	// (a torn last one included).
	Dropped int64
	Lines   int
	// Short is set when the file held fewer than the bytes asked to keep:
	// rows its writer had flushed are missing.
	Short bool
}

// RepairJSONL cuts the JSONL file at path back to its first keep bytes (a
// length its writer recorded after a flush, such as the one a training
// checkpoint stores, so that what was written after it goes), and then
// back to its last whole line, so that a torn row left by a killed
// process goes too. A negative keep only removes a torn last line. The
// file must exist.
func RepairJSONL(path string, keep int64) (JSONLRepair, error) {
	var rep JSONLRepair
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return rep, fmt.Errorf("nissa: repair %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rep, fmt.Errorf("nissa: repair %s: %w", path, err)
	}
	size := fi.Size()
	if keep < 0 || keep > size {
		rep.Short = keep > size
		keep = size
	}
	// Back to the last newline at or before keep.
	cut := keep
	buf := make([]byte, 4096)
	for cut > 0 {
		n := min(int64(len(buf)), cut)
		if _, err := f.ReadAt(buf[:n], cut-n); err != nil {
			return rep, fmt.Errorf("nissa: repair %s: %w", path, err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			cut = cut - n + int64(i) + 1
			break
		}
		cut -= n
	}
	if cut == size {
		return rep, nil
	}
	tail := make([]byte, size-cut)
	if _, err := f.ReadAt(tail, cut); err != nil {
		return rep, fmt.Errorf("nissa: repair %s: %w", path, err)
	}
	rep.Dropped = size - cut
	rep.Lines = bytes.Count(tail, []byte{'\n'})
	if tail[len(tail)-1] != '\n' {
		rep.Lines++
	}
	if err := f.Truncate(cut); err != nil {
		return rep, fmt.Errorf("nissa: repair %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return rep, fmt.Errorf("nissa: repair %s: %w", path, err)
	}
	return rep, nil
}

// ReadJSONL decodes the events of a JSONL file written by JSONLBackend. A
// torn last line (no final newline, as a killed writer may leave) is
// skipped and reported by torn; any other line that does not decode is
// an error naming the line.
func ReadJSONL(path string) (events []leyline.TelemetryEvent, torn bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("nissa: read %s: %w", path, err)
	}
	events, tornLine, err := DecodeJSONL(data, func(n int, err error) error {
		return fmt.Errorf("nissa: read %s: line %d: %w", path, n, err)
	})
	return events, tornLine > 0, err
}

// DecodeJSONL decodes the events of JSONL data line by line (blank lines
// skipped). A last line without its newline that does not decode is a
// torn write: it is left out and its number returned as tornLine (0
// when there is none). Any other line that
// does not decode goes to bad with its 1-based number: a non-nil error
// from bad stops the decoding with that error, nil leaves the line out
// and goes on (a reader that shows what it can).
func DecodeJSONL(data []byte, bad func(line int, err error) error) (events []leyline.TelemetryEvent, tornLine int, err error) {
	for n := 1; len(data) > 0; n++ {
		line, rest, complete := bytes.Cut(data, []byte{'\n'})
		data = rest
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev leyline.TelemetryEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			if !complete {
				return events, n, nil
			}
			if err := bad(n, err); err != nil {
				return events, 0, err
			}
			continue
		}
		events = append(events, ev)
	}
	return events, 0, nil
}
