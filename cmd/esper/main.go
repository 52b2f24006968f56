// Command esper is the Esper-Go command-line tool: `esper bench` runs the
// performance workloads of PERF.md (W1 to W7 on the CPU; W1, W6, W7 and
// W8 on a GPU in a binary built with -tags cuda) and compares them with
// their PyTorch peers; `esper train` trains a host that grows seeds under
// a controller.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `esper — morphogenetic training in Go

usage:
  esper bench --workload W1 [--compare pytorch] [--json DIR] [--epochs N]
  esper bench --workload W3 [--requests N] [--concurrency N] [--json DIR]
  esper bench --workload W2|W4|W5|W6|W7|all [--compare pytorch] [--json DIR]  (esper bench -h: every flag)
  esper bench --device cuda --workload W1|W6|W7|W8|all [--compare pytorch] [--json DIR]  (a -tags cuda build)
  esper train [--task synthetic|fashion-mnist] [--epochs N] [--controller heuristic|none]
              [--controller gnn --policy FILE [--policy-sample]]
              [--checkpoint DIR [--resume]] [--run-dir DIR] [--metrics-addr ADDR] [--device cpu]
  esper ppo [--rounds N] [--envs N] [--max-epochs N] [--out FILE] [--checkpoint DIR [--resume]] [--run-dir DIR]
  esper help
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit code; panics in a
// command are turned into an error message, never a crash dump.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "esper: internal error: %v\n", r)
			code = 3
		}
	}()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "bench":
		if err := benchCmd(args[1:], stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "esper bench: %v\n", err)
			return 1
		}
		return 0
	case "train":
		if err := trainCmd(args[1:], stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "esper train: %v\n", err)
			return 1
		}
		return 0
	case "ppo":
		if err := ppoCmd(args[1:], stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "esper ppo: %v\n", err)
			return 1
		}
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "esper: unknown command %q\n%s", args[0], usage)
	return 2
}
