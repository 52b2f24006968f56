package cpu

import "github.com/esper-go/esper/kernels"

// The error-message names of the ops that take an op code ("Binary add"),
// built once: every eager call names itself before validating, and
// concatenating the name on each call showed in W1's profile.
var (
	unaryNames         = opNames("Unary ", kernels.UnaryOps())
	unaryBackwardNames = opNames("UnaryBackward ", kernels.UnaryOps())
	binaryNames        = opNames("Binary ", kernels.BinaryOps())
	binaryScalarNames  = opNames("BinaryScalar ", kernels.BinaryOps())
	reduceNames        = opNames("Reduce ", kernels.ReduceOps())
	segmentNames       = opNames("SegmentReduce ", kernels.ReduceOps())
)

// opCode is an op selector of kernels (UnaryOp, BinaryOp, ReduceOp).
type opCode interface {
	~uint8
	String() string
}

// opNames is prefix followed by each op's name, indexed by op code.
func opNames[O opCode](prefix string, ops []O) []string {
	out := make([]string, len(ops))
	for _, o := range ops {
		out[o] = prefix + o.String()
	}
	return out
}

// opName is names[op], or prefix and op's String for a code out of range
// (an unknown op, which validation then rejects by that name).
func opName[O opCode](names []string, prefix string, op O) string {
	if int(op) < len(names) {
		return names[op]
	}
	return prefix + op.String()
}
