package cpu

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The optional kernels.ParamGradAccumulator: the CPU has no launch to
// save, so each method runs its overwriting op into temporaries and adds
// them in with Binary Add, which is the interface's definition.

// Conv2dBackwardWeightAdd implements kernels.ParamGradAccumulator.
func (be *Backend) Conv2dBackwardWeightAdd(dw, x, dy *T, p kernels.Conv2dParams) {
	be.addGrads("Conv2dBackwardWeightAdd", dw, nil, func(tw, _ *T) { be.Conv2dBackwardWeight(tw, x, dy, p) })
}

// BatchNormBackwardAdd implements kernels.ParamGradAccumulator.
func (be *Backend) BatchNormBackwardAdd(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool) {
	be.addGrads("BatchNormBackwardAdd", dw, db, func(tw, tb *T) {
		be.BatchNormBackward(dx, tw, tb, dy, x, saveMean, saveRstd, w, training)
	})
}

// BatchNormReluBackwardAdd implements kernels.ParamGradAccumulator.
func (be *Backend) BatchNormReluBackwardAdd(dx, dw, db, dy, x, b, saveMean, saveRstd, w *T, training bool) {
	be.addGrads("BatchNormReluBackwardAdd", dw, db, func(tw, tb *T) {
		be.BatchNormReluBackward(dx, tw, tb, dy, x, b, saveMean, saveRstd, w, training)
	})
}

// BatchNormReluMaxPool2x2BackwardAdd implements
// kernels.ParamGradAccumulator.
func (be *Backend) BatchNormReluMaxPool2x2BackwardAdd(dx, dw, db, g, argmax, x, b, saveMean, saveRstd, w *T, training bool) {
	be.addGrads("BatchNormReluMaxPool2x2BackwardAdd", dw, db, func(tw, tb *T) {
		be.BatchNormReluMaxPool2x2Backward(dx, tw, tb, g, argmax, x, b, saveMean, saveRstd, w, training)
	})
}

// GroupNormBackwardAdd implements kernels.ParamGradAccumulator.
func (be *Backend) GroupNormBackwardAdd(dx, dw, db, dy, x, mean, rstd, w *T, groups int) {
	be.addGrads("GroupNormBackwardAdd", dw, db, func(tw, tb *T) {
		be.GroupNormBackward(dx, tw, tb, dy, x, mean, rstd, w, groups)
	})
}

// GroupNormReluBackwardAdd implements kernels.ParamGradAccumulator.
func (be *Backend) GroupNormReluBackwardAdd(dx, dw, db, dy, x, b, mean, rstd, w *T, groups int) {
	be.addGrads("GroupNormReluBackwardAdd", dw, db, func(tw, tb *T) {
		be.GroupNormReluBackward(dx, tw, tb, dy, x, b, mean, rstd, w, groups)
	})
}

// addGrads runs op with new tensors shaped like dw and db (nil for a nil
// one) and adds each into its destination.
func (be *Backend) addGrads(op string, dw, db *T, run func(tw, tb *T)) {
	needCPU(op, dw, db)
	like := func(t *T) *T {
		if t == nil {
			return nil
		}
		return tensor.Empty(t.DType(), t.Shape()...)
	}
	tw, tb := like(dw), like(db)
	run(tw, tb)
	for _, p := range [][2]*T{{dw, tw}, {db, tb}} {
		if p[0] != nil {
			be.Binary(kernels.Add, p[0], p[0], p[1])
		}
	}
}
