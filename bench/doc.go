// Package bench holds the performance workloads of PERF.md (W1 to W7 on
// the CPU; W1, W5, W6, W7 and W8 on a GPU in a binary built with -tags
// cuda), the harness that times them and compares them with their
// PyTorch peers in the same run, and the JSON baselines committed under
// bench/baselines/.
//
// Workloads are plain functions returning a Result (RunW1, RunW2, ...),
// so they run the same way from `esper bench` and from
// `go test -bench ./bench`. Run (w*_report.go) is esper bench itself,
// and the subpackage bench/gpu's Run is esper bench --device cuda: from
// a Config (one field per flag) they run the workloads, print their
// tables and verdicts against PERF.md's targets beside the peers'
// figures, and write the JSON reports. NewTable is the writer of every
// esper table.
package bench
