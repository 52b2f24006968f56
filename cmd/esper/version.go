package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/esper-go/esper/bench"
)

// versionCmd is `esper version`: what this binary was built from. The
// commit is the one `make esper` stamps (bench.BuildCommit), else the
// build's VCS information, else the working directory's checkout, marked
// so (as in esper bench's reports).
func versionCmd(stdout io.Writer) {
	tags := "none"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" && s.Value != "" {
				tags = s.Value
			}
		}
	}
	cuda := "no (a build without -tags cuda: CPU only; GPU.md says how to build for a GPU)"
	if cudaBuild {
		cuda = "yes (built with -tags cuda: the CUDA backend for --device cuda; such a binary starts only where the CUDA driver finds a device)"
	}
	commit := bench.ThisMachine().Commit
	if commit == "unknown" {
		commit = "(commit unknown: make esper stamps it)"
	}
	fmt.Fprintf(stdout, "esper %s\ngo: %s %s/%s\nbuild tags: %s\ncuda: %s\n",
		commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, tags, cuda)
}
