#!/usr/bin/env bash
# gpu/run.sh OUTDIR — the GPU run of a bundle made by `make gpu-bundle`
# (GPU.md): correctness first (the cuda-tagged tests: CPU-vs-CUDA parity,
# then compute-sanitizer memcheck on them), then the benchmarks, one
# workload at a time: its PyTorch peer, then esper's side with the peer's
# figures of this run beside it. Results and logs go to OUTDIR (esper's
# JSON reports under OUTDIR/esper, a summary in OUTDIR/summary.txt); the
# exit status is non-zero when a test, a peer or an esper workload failed.
#
# The run stops itself before ESPER_GPU_BUDGET seconds (default 450, the
# device machine's lease is short): every step runs under `timeout` with at
# most the time that is left, a step that has no time left is skipped and
# listed as such in the summary, and what finished is kept.
# ESPER_GPU_PHASES picks the phases (default "tests train memcheck bench profile":
# train is `esper train` with the demo's flags on cuda beside the same on
# the CPU, with --amp bf16 and fp16, and `esper ppo --rounds 3` on cuda);
# ESPER_GPU_WORKLOADS the workloads (default "w1 w2 w4 w5 w6 w7 w8").
# ESPER_GPU_PEERS=0 runs esper alone, without its PyTorch peers (a
# rerun's choice, when an earlier run on the same GPU has their figures).
# W2 also runs with the features and logits copied rather than mapped
# (ESPER_CUDA_MAPPED_INPUTS=off and ESPER_CUDA_MAPPED_OUTPUTS=off, then
# the first alone), with the inputs gathered apart
# (ESPER_CUDA_GATHER_IN=off), with ESPER_CUDA_GAT_WARPS=off (the block
# GAT kernels, not the warp-per-node ones) and with
# ESPER_CUDA_SIDE_STREAMS=off (cuBLAS's products one after another on
# the device's stream, not at once on side streams).
# W4 runs a second time with ESPER_CUDA_CONV=direct (its bare loop, no
# peer: the direct convolutions against the default im2col in the same
# sitting) and a third with ESPER_CUDA_SLABS=off (its bare loop: a driver
# allocation per block; memcheck runs so too), W2 with ESPER_CUDA_JOINS=off, W1 with
# ESPER_CUDA_SEQUENCES=off (the launches those join, one by one) and W4
# with ESPER_CUDA_UPLOAD_WAIT=off (uploads without a host sync each).
# Phase "profile" runs Nsight Compute over short runs of the workloads in
# ESPER_GPU_PROFILE (default "w2 w1 w4": the two furthest from their
# targets, and W1's one-launch epoch, whose kernel time beside its
# latency says where the rest goes; any of w1, w2, w4, w5) and writes profile_<w>.txt: the kernels that took
# the most GPU time. It comes last, so it takes only the budget the rest
# left, W2 first.
#
# The peers: gpu_peers.py for W1, W5-W8 and w2_gnn.py --device cuda for
# W2 (its built-in W2 graph replicated to batches 1 and 64: the graphs
# are a fixed function of the batch size, so the peer needs nothing from
# esper) run before esper, which reads their OUTDIR/pytorch_<w>.json
# (--peer-results). W4's peer replays the work trace of esper's own run
# (its seeds, counterfactual configurations and ablation passes), known
# only once esper has run: esper runs it (--compare pytorch: after its
# measurements, w4_env_loop.py --device cuda, with ESPER_PYTHON, the
# python3 of PATH) and its figures are copied from esper's report to
# OUTDIR/pytorch_w4.json.
#
# On the lent device machine, whose $OUT brings back at most 8 files, no
# more than two folders down: run as `gpu/run.sh $OUT`, the script works
# in a scratch folder and leaves in OUTDIR only summary.txt, machine.txt
# and results.tgz (every log, report and run directory, under results/),
# packed on exit whatever stopped it. ESPER_GPU_PACK=1 packs the same way
# into any OUTDIR, ESPER_GPU_PACK=0 never.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: gpu/run.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
pack=${ESPER_GPU_PACK:-}
if [ -z "$pack" ]; then
	pack=0
	[ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" = "$out" ] && pack=1
fi
if [ "$pack" = 1 ]; then
	final=$out
	out=$(mktemp -d)/results
	mkdir -p "$out"
	packup() {
		cp "$out/summary.txt" "$out/machine.txt" "$final/" 2>/dev/null
		tar czf "$final/results.tgz.part" -C "$(dirname "$out")" results && mv -f "$final/results.tgz.part" "$final/results.tgz"
	}
	trap packup EXIT
fi
# checkpoint packs what there is so far after each phase (and copies the
# summary after each step, in step), so that a run killed outright
# (SIGKILL, past the lease) still leaves its finished phases in OUTDIR.
checkpoint() { [ "$pack" = 1 ] && packup; return 0; }
# A TERM or INT stops the step that is running (its timeout relays the
# signal), says so in the summary and exits, which packs up.
cur="" curname=""
interrupted() {
	if [ -n "$cur" ]; then
		kill -TERM "$cur" 2>/dev/null
		echo "$curname: interrupted (the run was stopped)" >>"${summary:-/dev/null}"
	fi
	exit 143
}
trap interrupted TERM INT
budget=${ESPER_GPU_BUDGET:-450}
phases=${ESPER_GPU_PHASES:-tests train memcheck bench profile}
workloads=${ESPER_GPU_WORKLOADS:-w1 w2 w4 w5 w6 w7 w8}
profiled=${ESPER_GPU_PROFILE:-w2 w1 w4}
start=$SECONDS
summary="$out/summary.txt"
: >"$summary"

# left prints the seconds that remain of the budget, less a margin for
# packing up.
left() { echo $((budget - (SECONDS - start) - 10)); }
has() { case " $phases " in *" $1 "*) return 0 ;; esac; return 1; }

status=0
# step NAME CAP LOG CMD...: runs CMD with its output in LOG, under a
# timeout of CAP seconds or what is left of the budget, whichever is less,
# and records the outcome in the summary.
# w2lines NAME LOG adds W2's batch-64 captured figures from LOG (p50 and
# p95 per mode, the device time per forward, the host phases' p50, the
# slowest forwards' phases and whether the features and logits crossed
# through mapped memory) to the summary, each line led by NAME: the variants side by
# side where the summary is read first.
w2lines() {
	grep -E "^ +batch 64 esper captured|^batch 64 captured(-tf32)?(: [0-9.]+ µs of device time|: [0-9]+ graph nodes|: features mapped| slowest forwards| host phases)" "$2" |
		sed -E "s/^ +//; s/^/  W2 $1: /" >>"$summary"
}

step() {
	local name=$1 cap=$2 log=$3; shift 3
	local t; t=$(left)
	((cap < t)) && t=$cap
	if ((t < 5)); then
		echo "$name: skipped (no time left in the ${budget}s budget)" | tee -a "$summary"
		status=1
		return 1
	fi
	local t0=$SECONDS rc
	# In the background, so that a TERM reaches the trap at once (bash
	# runs a trap only after a foreground child ends).
	timeout -k 5 "$t" "$@" >"$log" 2>&1 &
	cur=$! curname=$name
	wait "$cur"
	rc=$?
	cur="" curname=""
	local what=ok
	((rc == 124 || rc == 137)) && what="stopped after ${t}s"
	((rc != 0 && rc != 124 && rc != 137)) && what="failed (exit $rc)"
	((rc != 0)) && status=1
	echo "$name: $what in $((SECONDS - t0))s (log $(basename "$log"))" | tee -a "$summary"
	[ "$pack" = 1 ] && cp "$summary" "$final/" 2>/dev/null
	return $rc
}

# Find libcuda and cuBLAS where GPU images keep them.
for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
	[ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
if [ -z "${ESPER_CUBLAS_LIB:-}" ]; then
	for f in /usr/local/cuda/lib64/libcublas.so.1[123] \
		$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cublas/lib/libcublas.so.1[123]; do
		if [ -e "$f" ]; then export ESPER_CUBLAS_LIB=$f; break; fi
	done
fi
{
	echo "date: $(date -u +%FT%TZ)"
	timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	echo "ESPER_CUBLAS_LIB=${ESPER_CUBLAS_LIB:-}"
	echo "budget: ${budget}s; phases: $phases; workloads: $workloads; profiled: $profiled"
} | tee "$out/machine.txt"

# The bundle's binaries travel gzipped (make gpu-bundle: the device
# machine's upload limit); they are unpacked beside the script, or into a
# scratch folder where that is read-only.
bin=$here
for f in esper kernels_cuda.test; do
	[ -x "$here/$f" ] || [ ! -f "$here/$f.gz" ] && continue
	[ -w "$here" ] || { [ "$bin" = "$here" ] && bin=$(mktemp -d); }
	if ! { gunzip -c "$here/$f.gz" >"$bin/$f.part" && chmod +x "$bin/$f.part" && mv -f "$bin/$f.part" "$bin/$f"; }; then
		echo "unpacking $f.gz: failed" | tee -a "$summary"
		status=1
	fi
done
for f in esper kernels_cuda.test; do
	[ -x "$bin/$f" ] || [ ! -x "$here/$f" ] || cp "$here/$f" "$bin/$f"
done

export ESPER_GPU_BUNDLE=1 # TestPTXUpToDate skips away from the sources
# The python3 that esper runs a peer with (W4's), the one the peers below
# run with.
[ -z "${ESPER_PYTHON:-}" ] && ESPER_PYTHON=$(command -v python3) && export ESPER_PYTHON
if has tests; then
	# The tests of the code that has not yet run on a GPU first, in
	# processes of their own: a kernel that faults leaves the CUDA
	# context unusable, and would otherwise fail every test after it in
	# the full run below, which then says nothing more. newest_tests
	# lists them (top-level tests; TestConformance's newest subtests
	# separately).
	newest_conformance='^(GATAggregate\+GatherMean|GatherSum|GATMean\+GATMeanAct\+GatherConcat|GatherSums|GATMeansAct|LinearActLayerNorms|ReluHeads|GATMeanGrad\+GATMeanGradFits|GatherMeanGrad\+GatherMeanGradAdd|LinearBackwardAdd\+LinearBackwardAccumulate|MatMulsT|ForeachNorm\+ForeachScale\+ForeachAxpy|BeginSequence\+EndSequence|NewStager\+Stage\+StageFunc\+StageAhead\+Await\+Release\+StartTrace\+BeginStep\+EndStep\+StopTrace\+Close\+StageInline)$'
	newest_tests='^(TestMappedMemoryOnCUDA|TestKernelsLoadFromCubins|TestPolicyInferenceOnCUDA|TestGatherInOnCUDA|TestSequenceAcrossCaptureBounds|TestSequencesOffHoldNothing|TestUploadsWithoutWaitKeepTheirBytes|TestGemmJoinTF32OnCUDA|TestGATWarpsOnCUDA|TestSideStreamsOnCUDA|TestAllocatorReusesQueuedFrees|TestSwitchDefaults|TestToHostMany|TestAllocatorSlabs|TestAllocatorReuses)$'
	echo "== kernels/cuda tests of the newest code, first"
	step "kernels/cuda newest conformance" 60 "$out/kernels_cuda_newest_conformance.log" \
		"$bin/kernels_cuda.test" -test.v -test.count=1 -test.run "^TestConformance\$/$newest_conformance"
	step "kernels/cuda newest tests" 60 "$out/kernels_cuda_newest.log" \
		"$bin/kernels_cuda.test" -test.v -test.count=1 -test.run "$newest_tests"
	grep -hE '^(\s*--- FAIL|ok|FAIL|PASS)' "$out/kernels_cuda_newest_conformance.log" "$out/kernels_cuda_newest.log" | tail -20
	grep -hE '^\s*--- FAIL' "$out/kernels_cuda_newest_conformance.log" "$out/kernels_cuda_newest.log" | head -20 | sed 's/^/  /' >>"$summary"
	echo "== kernels/cuda tests"
	step "kernels/cuda tests" 120 "$out/kernels_cuda.log" \
		"$bin/kernels_cuda.test" -test.v -test.count=1
	grep -E '^(--- |ok|FAIL|PASS)' "$out/kernels_cuda.log" | grep -v -- '--- PASS' | tail -20
	# How long opening the device took, and whether its kernels came
	# from cubins or the driver's compile of the PTX; the failing tests by
	# name, in the summary too.
	grep -m1 '^cuda tests: opened' "$out/kernels_cuda.log" | sed 's/^/  /' >>"$summary"
	grep -E '^--- FAIL' "$out/kernels_cuda.log" | head -20 | sed 's/^/  /' >>"$summary"
	checkpoint
fi
if has train; then
	# The demo (esper train's defaults: 45 epochs and the host alone
	# beside) on the GPU and on this machine's CPU: the final table must
	# agree within a point. Then autocast, then three PPO rounds.
	mkdir -p "$out/runs"
	echo "== esper train --device cuda (the demo's flags)"
	step "esper train cuda" 60 "$out/train_cuda.log" \
		"$bin/esper" train --device cuda --quiet --run-dir "$out/runs"
	tail -6 "$out/train_cuda.log"
	echo "== esper train --device cpu (the same, for comparison)"
	step "esper train cpu" 60 "$out/train_cpu.log" \
		"$bin/esper" train --device cpu --quiet --run-dir "$out/runs"
	tail -6 "$out/train_cpu.log"
	# Issue 24's check: the final validation accuracies with seeds within
	# one point of each other (a missing table fails it too).
	step "train cuda within 1 point of cpu" 10 "$out/train_compare.log" \
		awk '/^with seeds/ { gsub("%", "", $4); acc[FILENAME] = $4 }
			END { c = acc[ARGV[1]]; p = acc[ARGV[2]]
				if (c == "" || p == "") { print "no table in one of the logs"; exit 1 }
				d = c - p; if (d < 0) d = -d
				printf "cuda %.2f%%, cpu %.2f%%: %.2f points apart\n", c, p, d
				exit d > 1 }' "$out/train_cuda.log" "$out/train_cpu.log"
	cat "$out/train_compare.log"
	for amp in bf16 fp16; do
		echo "== esper train --device cuda --amp $amp"
		step "esper train cuda amp $amp" 45 "$out/train_cuda_$amp.log" \
			"$bin/esper" train --device cuda --amp "$amp" --quiet --run-dir "$out/runs"
		tail -4 "$out/train_cuda_$amp.log"
	done
	echo "== esper ppo --device cuda --rounds 3"
	step "esper ppo cuda" 90 "$out/ppo_cuda.log" \
		env ESPER_TRACE=1 "$bin/esper" ppo --device cuda --rounds 3 --run-dir "$out/runs"
	tail -6 "$out/ppo_cuda.log"
	checkpoint
fi
if has memcheck; then
	sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
	if [ -n "$sanitizer" ] && [ -x "$sanitizer" ]; then
		# The 10 000-replay memory tests alone take minutes under the
		# sanitizer (six on an H200 of 2026-11-26), and the allocator's
		# fill-the-device test would have it shadow the whole memory; they
		# run in the plain tests above, and memcheck covers every other.
		# The allocator's slabs are off (ESPER_CUDA_SLABS=off): every
		# block its own driver allocation, so that a write past a block's
		# end is out of bounds for the sanitizer, not in the next block.
		echo "== compute-sanitizer memcheck on the kernel tests (all but the 10 000-replay tests), slabs off"
		step "memcheck" 120 "$out/memcheck.log" \
			env ESPER_CUDA_SLABS=off "$sanitizer" --tool memcheck --error-exitcode 3 \
			"$bin/kernels_cuda.test" -test.count=1 -test.skip 'TestCapturedCNNStepEqualsEagerAndHoldsMemory|TestTrainerCapturedStepHoldsMemory|TestAllocatorCollectsUnreachableTensors'
		tail -3 "$out/memcheck.log"
		# Exit 3 is the sanitizer's errors; another non-zero exit a test
		# failure, or a device the sanitizer does not support.
		grep -m1 -E 'ERROR SUMMARY|not supported' "$out/memcheck.log" | sed 's/^/  memcheck: /' >>"$summary"
		checkpoint
	else
		echo "memcheck: compute-sanitizer not found, skipped" | tee -a "$summary"
	fi
fi
if has bench; then
	echo "== kernels/cuda benchmarks (H2D pinned vs pageable; W4's convolutions, direct vs im2col)"
	step "kernels/cuda benchmarks" 60 "$out/kernels_cuda_bench.log" \
		"$bin/kernels_cuda.test" -test.run '^$' -test.bench . -test.benchtime 200x
	torch_ok=0
	if [ "${ESPER_GPU_PEERS:-1}" = 0 ]; then
		# A rerun's choice: esper alone, its peers' figures those of an
		# earlier run on the same GPU.
		echo "PyTorch peers: skipped (ESPER_GPU_PEERS=0)" | tee -a "$summary"
	else
		timeout 60 python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && torch_ok=1
		((torch_ok)) || echo "PyTorch peers: no CUDA-enabled PyTorch, skipped" | tee -a "$summary"
	fi
	mkdir -p "$out/esper"
	# One workload at a time, the peer first, so that each pair that
	# finishes compares like with like even when the budget runs out.
	for w in $workloads; do
		rm -f "$out/pytorch_$w.json" # a previous run's, in the same OUTDIR
		# The peer's command, run before esper (none for W4: esper runs
		# its peer itself, with its run's work trace).
		case $w in
		w2) peercmd=(python3 "$here/pytorch/w2_gnn.py" --device cuda --json "$out/pytorch_$w.json") ;;
		w4) peercmd=() ;;
		*) peercmd=(python3 "$here/pytorch/gpu_peers.py" "$w" --json "$out/pytorch_$w.json") ;;
		esac
		if ((torch_ok && ${#peercmd[@]})); then
			echo "== PyTorch peer $w"
			# w2_gnn.py rewrites its JSON after each mode: a peer stopped
			# by its time limit (the compiled mode compiles per batch
			# size) still leaves the modes that finished.
			step "PyTorch peer $w" 150 "$out/pytorch_$w.log" "${peercmd[@]}"
			tail -5 "$out/pytorch_$w.log"
		fi
		echo "== esper bench --device cuda --workload $w"
		peer=(--peer-dir "$here/pytorch")
		cap=90
		if [ -s "$out/pytorch_$w.json" ]; then
			peer+=(--peer-results "$out")
		elif [ "$w" = w4 ] && ((torch_ok)); then
			peer+=(--compare pytorch)
			cap=180 # esper's run, then its peer's
		fi
		# W2 and W4 with a Go CPU profile of the host (esper_<w>.pprof,
		# symbolized: `go tool pprof -top esper_<w>.pprof` reads it
		# anywhere): where their host time goes, beside the device's.
		# Sampling costs about 1 % of the host's time; a run stopped by
		# the clock leaves no profile.
		prof=()
		case $w in
		w2 | w4) prof=(ESPER_CPUPROFILE="$out/esper_$w.pprof") ;;
		esac
		step "esper $w" "$cap" "$out/esper_$w.log" \
			env "${prof[@]}" "$bin/esper" bench --device cuda --workload "$w" --json "$out/esper" "${peer[@]}"
		rc=$?
		tail -14 "$out/esper_$w.log"
		if [ "$w" = w4 ] && ((rc == 0)) && [ ! -e "$out/pytorch_w4.json" ] && [ -s "$out/esper/W4.json" ]; then
			# The W4 peer's figures, beside the others' (none when it did
			# not run).
			timeout 30 python3 -c 'import json, sys
p = json.load(open(sys.argv[1])).get("peer")
p and json.dump(p, open(sys.argv[2], "w"), indent=2)' "$out/esper/W4.json" "$out/pytorch_w4.json"
		fi
		# W2 again with the joined launches off (ESPER_CUDA_JOINS=off), W1
		# with the block sequences off (ESPER_CUDA_SEQUENCES=off) and W4
		# with host-to-device copies that do not wait for the device
		# (ESPER_CUDA_UPLOAD_WAIT=off), esper alone: each against the
		# default in one sitting, and a workload's figures even when one
		# of the joined kernels fails.
		case $w in
		w2) apart=(ESPER_CUDA_JOINS=off "esper w2 joins off") ;;
		w1) apart=(ESPER_CUDA_SEQUENCES=off "esper w1 sequences off") ;;
		w4) apart=(ESPER_CUDA_UPLOAD_WAIT=off "esper w4 upload wait off") ;;
		*) apart=() ;;
		esac
		if ((${#apart[@]})); then
			echo "== esper bench --device cuda --workload $w, ${apart[0]}"
			mkdir -p "$out/esper_apart"
			before=$status
			step "${apart[1]}" 60 "$out/esper_${w}_apart.log" \
				env "${apart[0]}" "$bin/esper" bench --device cuda --workload "$w" --json "$out/esper_apart"
			arc=$?
			# A comparison: stopped by the clock is no failure of the run.
			((arc == 124 || arc == 137)) && status=$before
			tail -8 "$out/esper_${w}_apart.log"
		fi
		if [ "$w" = w2 ] && ((rc == 0)); then
			w2lines "default" "$out/esper_w2.log"
			# W2 again with each switch away from its default: the TF32
			# product joins on (ESPER_CUDA_JOINS_TF32=on: gemm_join_tf32
			# against cuBLAS for the batch-64 layers' products, in its
			# captured-tf32 mode), the block GAT kernels
			# (ESPER_CUDA_GAT_WARPS=off), cuBLAS's products on the
			# device's stream (ESPER_CUDA_SIDE_STREAMS=off), and the
			# last two together (the defaults before 2026-11-28), and the
			# inputs gathered in launches of their own before the
			# encoders and heads, the logits joined after them
			# (ESPER_CUDA_GATHER_IN=off: the graph before 2026-11-28's
			# second session).
			# Since 2026-11-28's third session the features and the
			# logits cross through mapped memory: without it
			# (ESPER_CUDA_MAPPED_INPUTS=off ESPER_CUDA_MAPPED_OUTPUTS=off,
			# "copied") and with the outputs alone mapped ("inputs
			# copied") come first. The TF32 joins and both GAT and side
			# stream switches off (measured in three calls on
			# 2026-11-28) are left out for the time.
			for variant in "copied ESPER_CUDA_MAPPED_INPUTS=off ESPER_CUDA_MAPPED_OUTPUTS=off" "incopied ESPER_CUDA_MAPPED_INPUTS=off" \
				"gathers ESPER_CUDA_GATHER_IN=off" "blocks ESPER_CUDA_GAT_WARPS=off" "nosides ESPER_CUDA_SIDE_STREAMS=off"; do
				read -r vname venv <<<"$variant"
				echo "== esper bench --device cuda --workload w2, $venv"
				mkdir -p "$out/esper_$vname"
				before=$status
				# shellcheck disable=SC2086 # venv: one or two NAME=on|off words
				step "esper w2 $vname" 60 "$out/esper_w2_$vname.log" \
					env $venv "$bin/esper" bench --device cuda --workload w2 --json "$out/esper_$vname"
				trc=$?
				((trc == 124 || trc == 137)) && status=$before
				grep -E "batch 64 captured|captured-tf32" "$out/esper_w2_$vname.log" | tail -8
				w2lines "$vname" "$out/esper_w2_$vname.log"
			done
			# W2 once more, 2000 forwards a mode, under a Go CPU profile
			# (esper_w2_hot.pprof): enough samples of each mode's host
			# work, which the profile labels w2=<phase> tell apart
			# (go tool pprof -tagfocus 'w2=batch 64 captured-tf32').
			echo "== esper bench --device cuda --workload w2 --reps 2000, profiled"
			mkdir -p "$out/esper_hot"
			before=$status
			step "esper w2 hot profile" 60 "$out/esper_w2_hot.log" \
				env ESPER_CPUPROFILE="$out/esper_w2_hot.pprof" "$bin/esper" bench --device cuda --workload w2 --reps 2000 --json "$out/esper_hot"
			trc=$?
			((trc == 124 || trc == 137)) && status=$before
			w2lines "hot" "$out/esper_w2_hot.log"
		fi
		if [ "$w" = w4 ] && ((rc == 0)); then
			# W4 again with the direct convolution kernels
			# (ESPER_CUDA_CONV=direct), its bare loop only: the direct
			# kernels against the default im2col and cuBLAS in one sitting.
			echo "== esper bench --device cuda --workload w4, ESPER_CUDA_CONV=direct"
			mkdir -p "$out/esper_direct"
			step "esper w4 direct" 60 "$out/esper_w4_direct.log" \
				env ESPER_CUDA_CONV=direct "$bin/esper" bench --device cuda --workload w4 --ppo-rounds -1 --json "$out/esper_direct"
			grep -E "esper bare|captured regions" "$out/esper_w4_direct.log"
			# And with the allocator's slabs off (ESPER_CUDA_SLABS=off:
			# a driver allocation per block it cannot find cached), its
			# bare loop only: what the slabs save its captures.
			echo "== esper bench --device cuda --workload w4, ESPER_CUDA_SLABS=off"
			mkdir -p "$out/esper_noslabs"
			step "esper w4 slabs off" 60 "$out/esper_w4_noslabs.log" \
				env ESPER_CUDA_SLABS=off "$bin/esper" bench --device cuda --workload w4 --ppo-rounds -1 --json "$out/esper_noslabs"
			for f in esper_w4 esper_w4_noslabs; do
				grep -E "^bare loop [0-9.]+ env-epochs|^bare loop time|captured regions|from the driver" "$out/$f.log" | sed "s/^/  $f: /" >>"$summary"
			done
		fi
		checkpoint
	done
fi
if has profile; then
	# Where each workload's GPU time goes: Nsight Compute's duration of
	# every kernel of a short run (graph nodes profiled one by one), summed
	# by kernel, then by kernel and grid, into profile_<w>.txt by
	# ncu_top.py; the CSV is kept,
	# gzipped. ncu replays every kernel alone, which takes a while (each
	# workload's run is capped at 120 s; it starts only with 60 s of the
	# budget left, W4 with 90 s), and its times are shares, not
	# graph-replay times. ncu writes its CSV only when the program exits:
	# a run stopped by the clock leaves no rows, which the summary says,
	# and, the phase being optional, is no failure of the run.
	# Caches are left warm and clocks unlocked (--cache-control none
	# --clock-control none): a kernel then reads what the previous node
	# left in L2 and runs at the clocks a replay gets, as in the graph,
	# instead of from a flushed cache at base clocks.
	ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	if [ -n "$ncu" ] && [ -x "$ncu" ]; then
		for w in $profiled; do
			need=60
			case $w in
			w1) args=(--epochs 2 --warmup 1) ;;
			w2) args=(--reps 1 --warmup 1) ;;
			w4) args=(--steps 2 --warmup 1 --ppo-rounds -1) need=90 ;;
			w5) args=(--steps 3 --warmup 1 --eval-batches 3) ;;
			*)
				echo "profile: $w has no profile run (w1, w2, w4 or w5)" | tee -a "$summary"
				continue
				;;
			esac
			if (($(left) < need)); then
				# An optional phase: too little time is no failure.
				echo "ncu profile $w: not run (under ${need}s of the budget left)" | tee -a "$summary"
				continue
			fi
			echo "== ncu profile of $w"
			# At most 3000 kernels, W2 4300 (W4's first 2000 skipped: its set-up and
			# most of its warm-up step; W2's batch 1 skipped).
			# W2's first 1800 or so are batch 1's (about 154 forwards: two
			# eager, then each captured mode's warm-up, capture, forward,
			# 51 back-to-back replays and 21 lone ones); its batch-64
			# forwards, as many, fill about 4200 after them.
			skip=0 count=3000
			[ "$w" = w4 ] && skip=2000
			[ "$w" = w2 ] && skip=1800 count=4300
			# Every profile runs the defaults (W2's with the TF32 joins
			# on is call 1's of 2026-11-28, its block GAT kernels call
			# 2's of 2026-11-27b).
			envs=()
			before=$status
			step "ncu profile $w" 120 "$out/profile_${w}.log" \
				env "${envs[@]}" "$ncu" --csv --metrics gpu__time_duration.sum --graph-profiling node \
				--cache-control none --clock-control none -s "$skip" -c "$count" \
				"$bin/esper" bench --device cuda --workload "$w" "${args[@]}"
			rc=$?
			((rc == 124 || rc == 137)) && status=$before # stopped by the clock: optional
			rows=$(grep -c '^"' "$out/profile_${w}.log")
			grep '^"' "$out/profile_${w}.log" | gzip >"$out/profile_${w}.csv.gz"
			grep -v '^"' "$out/profile_${w}.log" >"$out/profile_${w}.log.tmp"
			mv -f "$out/profile_${w}.log.tmp" "$out/profile_${w}.log"
			if ((rows == 0)); then
				echo "ncu profile $w: no kernel rows (ncu stopped before the program exited)" | tee -a "$summary"
			else
				timeout 60 python3 "$here/ncu_top.py" "$out/profile_${w}.csv.gz" >"$out/profile_${w}.txt" 2>&1
				timeout 60 python3 "$here/ncu_top.py" --by-grid "$out/profile_${w}.csv.gz" >>"$out/profile_${w}.txt" 2>&1
				head -14 "$out/profile_${w}.txt"
			fi
			if [ "$w" = w2 ] && (($(left) >= 45)); then
				# Why W2's latency-bound kernels take what they take: their
				# stall reasons, issue rates, occupancy and memory traffic
				# (ncu's WarpStateStats, SchedulerStats, Occupancy,
				# LaunchStats, MemoryWorkloadAnalysis and SpeedOfLight
				# sections) for ten launches at batch 64 (the first 900
				# matching launches skipped: batch 1's 154 or so forwards of
				# five each), in profile_w2_stalls.txt. The GAT joins take about 17 µs a
				# launch for a few hundred nodes of one to three edges.
				echo "== ncu stall sections of W2's GAT, gather-sum and heads kernels"
				before=$status
				step "ncu stalls w2" 45 "$out/profile_w2_stalls.txt" \
					"$ncu" --graph-profiling node --cache-control none --clock-control none \
					--kernel-name regex:'gat_mean_join_warp_f32|gather_sum_join_f32|relu_heads_f32' \
					--launch-skip 900 --launch-count 10 \
					--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
					--section LaunchStats --section MemoryWorkloadAnalysis \
					"$bin/esper" bench --device cuda --workload w2 --reps 1 --warmup 1
				rc=$?
				((rc != 0)) && status=$before # optional
			fi
			checkpoint
		done
	else
		echo "profile: ncu not found, skipped" | tee -a "$summary"
	fi
fi
echo "== summary ($((SECONDS - start))s of ${budget}s)"
cat "$summary"
exit $status
