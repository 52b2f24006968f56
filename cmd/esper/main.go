// Command esper is the Esper-Go command-line tool: `esper train` trains
// a host that grows seeds under a controller, `esper ppo` trains the GNN
// controller's policy, and `esper bench` runs the performance workloads
// of PERF.md (W1 to W7 on the CPU; W1, W2, W4, W5, W6, W7 and W8 on a GPU
// in a binary built with -tags cuda) beside their PyTorch peers.
//
// Two environment variables help diagnose a run: ESPER_TRACE=1 prints
// the stack of an internal error, and ESPER_CPUPROFILE=FILE writes a Go
// CPU profile of the command to FILE (go tool pprof reads it).
//
// The command is flags and wiring: the workloads, their tables and
// reports are packages bench's and bench/gpu's, the run plots
// internal/runplot's, and devices are parsed and opened by
// kernels/device (Parse, Open), whose cuda twin file is the only
// importer of kernels/cuda.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
)

const usage = `esper — morphogenetic training in Go

usage:
  esper bench --workload W1 [--compare pytorch] [--json DIR] [--epochs N]
  esper bench --workload W3 [--requests N] [--concurrency N] [--json DIR]
  esper bench --workload W2|W4|W5|W6|W7|all [--compare pytorch] [--json DIR]  (esper bench -h: every flag)
  esper bench --device cuda --workload W1|W2|W4|W5|W6|W7|W8|all [--compare pytorch] [--json DIR]  (a -tags cuda build)
  esper bench --device sim --workload W1|W2|W4  (their host syncs)
  esper train [--task synthetic|fashion-mnist] [--epochs N] [--controller heuristic|none]
              [--controller gnn [--policy FILE] [--policy-sample]]
              [--checkpoint DIR [--resume]] [--run-dir DIR] [--metrics-addr ADDR]
              [--device cpu|sim[:N]|cuda[:N]] [--amp off|bf16|fp16] [--tf32[=false]]
  esper ppo [--rounds N] [--envs N] [--max-epochs N] [--out FILE] [--checkpoint DIR [--resume]] [--run-dir DIR]
            [--device cpu|sim|cuda[:N] | --devices sim:0,sim:1]
  esper ui [--addr 127.0.0.1:8080] RUN_DIR [RUN_DIR...]  (finished runs side by side; train and ppo serve a live one with --ui ADDR)
  esper eval [--controllers heuristic,gnn:FILE,none] [--seeds 101-120] [--task ...] [--out DIR]
  esper version
  esper help [COMMAND]
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
			if os.Getenv("ESPER_TRACE") != "" {
				stderr.Write(debug.Stack())
			}
			code = 3
		}
	}()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage+commandList())
		return 2
	}
	if path := os.Getenv("ESPER_CPUPROFILE"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			fmt.Fprintf(stderr, "esper: ESPER_CPUPROFILE: %v\n", err)
			return 1
		}
		defer stop()
	}
	switch args[0] {
	case "bench":
		return exitCode("bench", benchCmd(args[1:], stdout, stderr), stdout, stderr)
	case "train":
		return exitCode("train", trainCmd(args[1:], stdout, stderr), stdout, stderr)
	case "ppo":
		return exitCode("ppo", ppoCmd(args[1:], stdout, stderr), stdout, stderr)
	case "ui":
		return exitCode("ui", uiCmd(args[1:], stdout, stderr), stdout, stderr)
	case "eval":
		return exitCode("eval", evalCmd(args[1:], stdout, stderr), stdout, stderr)
	case "version", "--version":
		versionCmd(stdout)
		return 0
	case "help", "-h", "--help":
		if len(args) > 1 && args[1] != "help" {
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage+commandList())
		return 0
	}
	fmt.Fprintf(stderr, "esper: unknown command %q\nrun 'esper help' for the commands\n", args[0])
	return 2
}

// startCPUProfile starts a CPU profile written to path and returns the
// function that ends it (ESPER_CPUPROFILE).
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
