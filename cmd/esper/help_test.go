package main

import (
	"bytes"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/bench"
)

// TestCommandHelp: -h, --help and `esper help CMD` print the command's
// one-line description and flags to stdout and exit 0 (they used to exit
// 1 with "flag: help requested").
func TestCommandHelp(t *testing.T) {
	for _, name := range []string{"train", "ppo", "bench"} {
		for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			require.Equal(t, 0, code, "%v: %s", args, errb.String())
			require.Empty(t, errb.String(), "%v", args)
			s := out.String()
			first, _, _ := strings.Cut(s, "\n")
			require.Regexp(t, `^esper `+name+`: [a-z].{20,}$`, first, "%v: a one-line description first", args)
			require.Contains(t, s, "usage: esper "+name+" [flags]", "%v", args)
			require.Contains(t, s, "flags:\n  -", "%v: the flags", args)
		}
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"help"}, &out, &errb))
	for _, c := range commands {
		require.Regexp(t, `(?m)^  `+c.name+` +`+regexp.QuoteMeta(c.summary)+`$`, out.String())
	}
}

// TestFlagValueNames: every flag of -h shows its value's type (or
// nothing, for a bool), never words taken from back-quoted text in its
// usage (`esper ppo -h` showed "-blocks esper train --controller gnn").
func TestFlagValueNames(t *testing.T) {
	types := map[string]bool{"int": true, "uint": true, "float": true, "string": true, "duration": true, "value": true}
	for _, name := range []string{"train", "ppo", "bench"} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run([]string{name, "-h"}, &out, &errb), errb.String())
		n := 0
		for _, line := range strings.Split(out.String(), "\n") {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			n++
			f := strings.Fields(line)
			require.LessOrEqual(t, len(f), 2, "esper %s -h: %q", name, line)
			if len(f) == 2 {
				require.True(t, types[f[1]], "esper %s -h: %q names its value %q", name, line, f[1])
			}
		}
		require.Greater(t, n, 10, "esper %s -h lists its flags", name)
	}
}

// TestBadFlagHint: a flag the command does not know, or a bad value, is
// one error line and a hint to -h, not the usage with the error last.
func TestBadFlagHint(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{"train", "--bogus"}},
		{[]string{"ppo", "--bogus"}},
		{[]string{"bench", "--bogus"}},
		{[]string{"train", "--epochs", "x"}},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 1, run(tc.args, &out, &errb), "%v", tc.args)
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		require.Len(t, lines, 2, "%v: %q", tc.args, errb.String())
		require.Regexp(t, `^esper `+tc.args[0]+`: (flag provided but not defined: -bogus|invalid value "x" for flag -epochs)`, lines[0])
		require.Equal(t, "run 'esper "+tc.args[0]+" -h' for the flags", lines[1])
		require.Empty(t, out.String())
	}
}

// TestVersion: esper version prints the stamped commit, the Go version,
// the build tags and whether the build has the CUDA backend.
func TestVersion(t *testing.T) {
	saved := bench.BuildCommit
	defer func() { bench.BuildCommit = saved }()
	bench.BuildCommit = "abc1234"
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &out, &errb), errb.String())
	s := out.String()
	require.True(t, strings.HasPrefix(s, "esper abc1234\n"), s)
	require.Contains(t, s, "go: "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n")
	require.Regexp(t, `(?m)^build tags: \S`, s)
	if cudaBuild {
		require.Contains(t, s, "cuda: yes")
	} else {
		require.Contains(t, s, "cuda: no")
	}
}
