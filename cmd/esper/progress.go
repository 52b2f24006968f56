package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// isTerminal reports whether w is a terminal, where a progress bar
// redrawn with \r stays on one line. Written to a file or a pipe the
// redraws would pile up in it, so progress there is whole lines only.
// Any character device counts (os.DevNull too, harmlessly).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// eta estimates the time a loop has left from the mean duration of the
// iterations it has run in this process (a resumed run's earlier ones
// are not timed).
type eta struct {
	start time.Time
	done  int
}

func newETA() *eta { return &eta{start: time.Now()} }

// step records one finished iteration and returns the estimate for the
// remaining ones, as "ETA 1m05s".
func (e *eta) step(remaining int) string {
	e.done++
	left := time.Since(e.start) / time.Duration(e.done) * time.Duration(max(0, remaining))
	return "ETA " + formatETA(left)
}

// formatETA rounds d to what a person reads at a glance: seconds under
// a minute, then minutes and seconds, then hours and minutes.
func formatETA(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
