package cuda

import (
	"fmt"
	"os"
	"sync/atomic"
)

// Switches for a GPU run: the joined launches, the block sequence, the
// cubins, the uploads' wait, the allocator's slabs and the gathered
// inputs can be turned off
// for the process, so
// that a run can time a workload both ways in one sitting (gpu/run.sh
// runs W2 again without joins, W1 without sequences and W4 without the
// uploads' wait), and so that a fault in one of their kernels can be
// told from a fault elsewhere.
//
//   - ESPER_CUDA_JOINS=off: GatherSums and GATMeansAct launch each call
//     as its own GatherSum or GATMeanAct would, and LinearActLayerNorms
//     and ReluHeads report false (their callers then make the calls
//     apart: each encoder's LinearActLayerNorm, and each group of heads
//     as stacked cuBLAS products), so Device.Joins stays 0. The results
//     are the same bits for the first three; the heads' products round
//     differently. The callers have allocated the joins' outputs before
//     asking, so the figures with joins off count those allocations
//     too.
//
//   - ESPER_CUDA_SEQUENCES=off: BeginSequence and EndSequence still pair
//     up, but nothing is held back: every call launches at once, as
//     outside a sequence (the same bits).
//
//   - ESPER_CUDA_CUBIN=off: every kernel module loads from its PTX,
//     compiled by the driver, instead of from the cubin made for the
//     device's architecture ahead of time (cubin.go).
//
//   - ESPER_CUDA_UPLOAD_WAIT=off: a copy from host memory to a tensor on
//     the device (tensor.ToDevice, CopyHostToDevice) returns once the
//     driver has staged the bytes instead of waiting for the device's
//     stream, which is a counted host sync by default. An experiment:
//     it relies on the driver staging pageable memory before it returns
//     (TestUploadsWithoutWaitKeepTheirBytes checks it on a GPU).
//
//   - ESPER_CUDA_SLABS=off: the caching allocator asks the driver for
//     each block it cannot find cached, instead of for a slab of several
//     blocks of a small class at once (slab.go): compute-sanitizer's
//     memcheck then tells a write past a block's end from a write into
//     the next block.
//
//   - ESPER_CUDA_GATHER_IN=off: ReluHeads declines a call with a gathered
//     input or a joined output, and LinearActLayerNorms one with a
//     gathered input (kernels.GatherInput), so that their callers gather
//     the input first, in a gather_concat_f32 launch of its own, and join
//     the heads' outputs after them (autograd.ReluHeadGroupsJoined and
//     LinearActLayerNorms ask again without them): W2's forward as it was
//     before 2026-11-28's second session, four graph nodes more. The
//     results are the same bits.
//
// Two more switches are on by default and can be turned off:
//
//   - ESPER_CUDA_GAT_WARPS=off: GATMean, GATMeanAct and GATMeansAct run
//     every relation on the block kernels (a block per destination node)
//     instead of a relation of at most 4 heads and 128 channels a head
//     with a warp per destination node (gat_mean_warp_f32,
//     gat_mean_join_warp_f32: the node's accumulator in registers and no
//     barrier between nodes or edges; W2's batch-64 GAT launch is 480
//     blocks of 4 nodes in one wave, where the block kernels' 1 920
//     blocks take two). The results are the same bits (TestGATWarpsOnCUDA
//     holds them to each other, eager and captured; the conformance
//     suite holds GATMean to GATAggregate, which stays on the block
//     kernel). On an H200 (2026-11-28) W2's batch-64 forward took 153 µs
//     of device time with the warps against 159 µs without, in TF32.
//
//   - ESPER_CUDA_SIDE_STREAMS=off: MatMulsT leaves the products past the
//     joins' bounds (W2's batch-64 stacked projections, three a layer)
//     to the caller, which runs them one after another on the device's
//     stream, instead of running two or more at once on side streams,
//     each forked from the device's stream and joined back by events
//     (graph edges in a capture, not nodes), each with a cuBLAS handle
//     and workspace of its own. Each product is MatMul's, bit for bit
//     (TestSideStreamsOnCUDA). On an H200 (2026-11-28) W2's batch-64
//     forward took 138 µs of device time with the side streams against
//     159 µs without (the block GAT kernels both times), and 132 to
//     133 µs with both switches on (p50 183 to 200 µs against 212 to
//     224 µs with both off), in TF32.
//
//   - ESPER_CUDA_MAPPED_INPUTS=off and ESPER_CUDA_MAPPED_OUTPUTS=off:
//     tensor.EmptyMapped declines that use (mapped.go), so that its
//     caller keeps to device memory and copies: tamiyo's Inference then
//     stages a forward's features through the Stager (three driver calls
//     and a copy-engine transfer before the replay) instead of writing
//     them into write-combined mapped memory that the graph's kernels
//     read across the bus, and reads the logits with a device-to-host
//     copy after the replay instead of from the mapped memory the heads'
//     launch wrote. The results are the same bits.
//
// One is off by default and turned on:
//
//   - ESPER_CUDA_JOINS_TF32=on: MatMulsT in the matmul precision High
//     (TF32) joins products of more than 8 rows on tensor cores
//     (gemm_join_tf32, up to 2^28 multiply-adds a product, on mma.sync)
//     instead of leaving those past 2^25 to cuBLAS. It passes the
//     conformance suite on an H200 (2026-11-28) but does not pay beside
//     the side streams: W2's batch-64 forward took 150 µs of device time
//     with it and the other two on, 133 µs without it (its 416-block
//     launch 22 µs under ncu).
//
// An unset variable leaves the setting as it is; any other
// value than on or off is an error at Open naming the variable. The
// setting is the process's, read at every Open; tests set the variables
// below directly.
var joinsOff, sequencesOff, cubinOff, uploadWaitOff, slabsOff, gatherInOff atomic.Bool

// tf32JoinsOn is ESPER_CUDA_JOINS_TF32's setting (off by default),
// gatWarpsOn ESPER_CUDA_GAT_WARPS's and sideStreamsOn
// ESPER_CUDA_SIDE_STREAMS's (on by default: init).
var tf32JoinsOn, gatWarpsOn, sideStreamsOn atomic.Bool

// mappedInputsOn and mappedOutputsOn are ESPER_CUDA_MAPPED_INPUTS's and
// ESPER_CUDA_MAPPED_OUTPUTS's settings (on by default: init).
var mappedInputsOn, mappedOutputsOn atomic.Bool

func init() {
	gatWarpsOn.Store(true)
	sideStreamsOn.Store(true)
	mappedInputsOn.Store(true)
	mappedOutputsOn.Store(true)
}

// switchesFromEnv applies ESPER_CUDA_JOINS, ESPER_CUDA_SEQUENCES,
// ESPER_CUDA_CUBIN, ESPER_CUDA_UPLOAD_WAIT, ESPER_CUDA_SLABS,
// ESPER_CUDA_GATHER_IN, ESPER_CUDA_JOINS_TF32, ESPER_CUDA_GAT_WARPS,
// ESPER_CUDA_SIDE_STREAMS, ESPER_CUDA_MAPPED_INPUTS and
// ESPER_CUDA_MAPPED_OUTPUTS (an unset variable
// leaves its setting as it is, so a test's stays).
func switchesFromEnv() error {
	for _, s := range []struct {
		name string
		on   *atomic.Bool
	}{{"ESPER_CUDA_JOINS_TF32", &tf32JoinsOn}, {"ESPER_CUDA_GAT_WARPS", &gatWarpsOn}, {"ESPER_CUDA_SIDE_STREAMS", &sideStreamsOn},
		{"ESPER_CUDA_MAPPED_INPUTS", &mappedInputsOn}, {"ESPER_CUDA_MAPPED_OUTPUTS", &mappedOutputsOn}} {
		off, set, err := parseSwitch(s.name, os.Getenv(s.name))
		if err != nil {
			return err
		}
		if set {
			s.on.Store(!off)
		}
	}
	for _, s := range []struct {
		name string
		off  *atomic.Bool
	}{{"ESPER_CUDA_JOINS", &joinsOff}, {"ESPER_CUDA_SEQUENCES", &sequencesOff}, {"ESPER_CUDA_CUBIN", &cubinOff},
		{"ESPER_CUDA_UPLOAD_WAIT", &uploadWaitOff}, {"ESPER_CUDA_SLABS", &slabsOff}, {"ESPER_CUDA_GATHER_IN", &gatherInOff}} {
		off, set, err := parseSwitch(s.name, os.Getenv(s.name))
		if err != nil {
			return err
		}
		if set {
			s.off.Store(off)
		}
	}
	return nil
}

// parseSwitch reads an on/off variable's value v: set is false for ""
// (the setting stays), off true for "off"; anything but "", "on" and
// "off" is an error naming the variable.
func parseSwitch(name, v string) (off, set bool, err error) {
	switch v {
	case "":
		return false, false, nil
	case "on":
		return false, true, nil
	case "off":
		return true, true, nil
	}
	return false, false, fmt.Errorf("cuda: %s=%q: want on or off", name, v)
}
