package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// commands are esper's subcommands with their one-line descriptions, in
// the order the usage lists them.
var commands = []struct{ name, summary string }{
	{"train", "train a host that grows seeds under a controller (heuristic, GNN policy or none) and compare it with the host alone"},
	{"ppo", "train the GNN controller policy with PPO on vectorised copies of the synthetic task"},
	{"eval", "compare controllers on held-out seeds: one run per controller per seed, a paired table with bootstrap intervals"},
	{"ui", "serve the dashboard of finished runs (their events.jsonl) side by side; esper train and esper ppo serve a live one with --ui ADDR"},
	{"bench", "run the performance workloads of PERF.md, optionally beside their PyTorch peers"},
	{"version", "print this build's commit, Go version, build tags and whether it has the CUDA backend"},
	{"help", "print this help, or a command's flags (esper help train)"},
}

// commandList renders commands for the usage.
func commandList() string {
	var b strings.Builder
	b.WriteString("\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	b.WriteString("\nesper COMMAND -h lists a command's flags.\n")
	return b.String()
}

// helpRequested is parseFlags' error for -h or --help: run prints usage
// to stdout and exits 0. It wraps flag.ErrHelp.
type helpRequested struct{ usage string }

func (h *helpRequested) Error() string { return flag.ErrHelp.Error() }
func (h *helpRequested) Unwrap() error { return flag.ErrHelp }

// parseFlags parses a command's flags. -h or --help is a *helpRequested
// carrying the command's description and flags; a bad flag is its one
// error line and a hint, without the 50 lines of usage the flag package
// would print before it.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return &helpRequested{usage: commandUsage(fs)}
	}
	return fmt.Errorf("%w\nrun 'esper %s -h' for the flags", err, fs.Name())
}

// commandUsage is the -h text of the command fs parses.
func commandUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	name := fs.Name()
	for _, c := range commands {
		if c.name == name {
			fmt.Fprintf(&b, "esper %s: %s\n\n", name, c.summary)
		}
	}
	fmt.Fprintf(&b, "usage: esper %s [flags]\n\nflags:\n", name)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}

// exitCode reports a command's outcome and returns the exit code: 0 on
// success and for help (printed to stdout), 1 with the error on stderr.
func exitCode(name string, err error, stdout, stderr io.Writer) int {
	var help *helpRequested
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.usage)
		return 0
	}
	fmt.Fprintf(stderr, "esper %s: %v\n", name, err)
	return 1
}
