package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
)

// RunDir is a finished run read back from its directory.
type RunDir struct {
	// Info describes the run: its directory, a label from the directory's
	// name and configuration, the kind and planned length where known,
	// and a warning for every part of the file that could not be read.
	Info RunInfo
	// Events are the events that could be read, in file order.
	Events []leyline.TelemetryEvent
}

// maxShownBadLines is how many unreadable lines a warning names.
const maxShownBadLines = 3

// ReadRunDir reads a run directory written by esper train or esper ppo:
// its events.jsonl and, when present, config.json (esper train's flags).
// A torn last line, lines that do not decode and an unreadable
// config.json are warnings in Info.Warnings, not errors: the page shows
// what could be read. A directory without events.jsonl is an error. dir
// may also name the events.jsonl itself.
func ReadRunDir(dir string) (*RunDir, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	path := filepath.Join(dir, "events.jsonl")
	if !fi.IsDir() {
		path, dir = dir, filepath.Dir(dir)
	}
	evs, warns, err := readEvents(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("dashboard: %s holds no events.jsonl (is it a run directory of esper train or esper ppo?)", dir)
	}
	if err != nil {
		return nil, err
	}
	label := strings.TrimPrefix(filepath.Base(dir), "telemetry_")
	rd := &RunDir{Events: evs, Info: RunInfo{Dir: dir, Label: label, Warnings: warns}}
	rd.Info.Kind = kindOf(evs)
	if len(evs) == 0 {
		rd.Info.Warnings = append(rd.Info.Warnings, "events.jsonl holds no events")
	}
	cfg, err := readConfig(filepath.Join(dir, "config.json"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		rd.Info.Warnings = append(rd.Info.Warnings, err.Error())
	default:
		rd.Info.Config = cfg
		switch c := cfg["controller"]; c {
		case "":
		case "none":
			rd.Info.Label += " (host alone)"
		default:
			rd.Info.Label += " (" + c + ")"
		}
		if n, err := strconv.Atoi(cfg["epochs"]); err == nil && n > 0 && rd.Info.Kind != "ppo" {
			rd.Info.Total = n
		}
	}
	return rd, nil
}

// readEvents decodes the events of a JSONL file, keeping every line that
// decodes: a torn last line (a killed writer's) and undecodable lines are
// left out and described in warns.
func readEvents(path string) (evs []leyline.TelemetryEvent, warns []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("dashboard: %w", err)
	}
	name := filepath.Base(path)
	var bad []string
	nbad := 0
	evs, torn, _ := nissa.DecodeJSONL(data, func(n int, err error) error {
		nbad++
		if len(bad) < maxShownBadLines {
			bad = append(bad, fmt.Sprintf("line %d: %v", n, err))
		}
		return nil
	})
	if torn > 0 {
		warns = append(warns, fmt.Sprintf("%s ends in a torn line %d (the run was stopped while writing it): it is left out", name, torn))
	}
	if nbad > 0 {
		more := ""
		if nbad > len(bad) {
			more = fmt.Sprintf("; %d more", nbad-len(bad))
		}
		warns = append(warns, fmt.Sprintf("%s: %d unreadable line(s) left out (%s%s); the page shows the %d events that could be read",
			name, nbad, joinSemi(bad), more, len(evs)))
	}
	return evs, warns, nil
}

func joinSemi(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(x)
	}
	return b.String()
}

// readConfig reads esper train's config.json: {"flags": {name: value}}.
func readConfig(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c struct {
		Flags map[string]string `json:"flags"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("config.json could not be read (%v): the run's configuration is not shown", err)
	}
	return c.Flags, nil
}

// kindOf tells a training run (EPOCH_COMPLETED) from a PPO run (METRICS
// from simic); "" when the events show neither.
func kindOf(evs []leyline.TelemetryEvent) string {
	for _, ev := range evs {
		switch ev.Type {
		case leyline.EventEpochCompleted:
			return "train"
		case leyline.EventMetrics:
			if p, ok := ev.Data.(*leyline.MetricsPayload); ok && p.Source == "simic" {
				return "ppo"
			}
		}
	}
	return ""
}
