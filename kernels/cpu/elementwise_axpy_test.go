package cpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// TestChannelAxpy: ChannelAxpy is bitwise Binary Mul of the broadcast
// scale followed by Binary Add, with a scale per channel or one for all,
// on planes shorter and longer than its product buffer; its backward's
// dy is bitwise the Mul of the scale and g, and ds the float64 sum of
// g⊙y per channel. Replays of a capture allocate nothing and repeat the
// result.
func TestChannelAxpy(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, sh := range [][]int{{3, 4, 5, 5}, {2, 3, 40, 30}, {4, 6}} {
			for _, perChannel := range []bool{true, false} {
				what := fmt.Sprintf("%v %v per-channel=%v", dt, sh, perChannel)
				c := sh[1]
				ssh := []int{1}
				if perChannel {
					ssh = make([]int, len(sh))
					for i := range ssh {
						ssh[i] = 1
					}
					ssh[1] = c
				}
				x, y, s := randT(1, dt, sh...), randT(2, dt, sh...), randT(3, dt, ssh...)
				out := tensor.Empty(dt, sh...)
				be.ChannelAxpy(out, x, y, s)
				prod, want := tensor.Empty(dt, sh...), tensor.Empty(dt, sh...)
				be.Binary(kernels.Mul, prod, s, y)
				be.Binary(kernels.Add, want, x, prod)
				require.Equal(t, vals(want), vals(out), "%s: forward", what)

				g := randT(4, dt, sh...)
				dy, ds := tensor.Empty(dt, sh...), tensor.Empty(dt, ssh...)
				be.ChannelAxpyBackward(dy, ds, g, y, s)
				wdy := tensor.Empty(dt, sh...)
				be.Binary(kernels.Mul, wdy, g, s)
				require.Equal(t, vals(wdy), vals(dy), "%s: dy", what)
				ref := make([]float64, s.Numel())
				gv, yv := vals(g), vals(y)
				hw := len(gv) / (sh[0] * c)
				for i := range gv {
					k := 0
					if perChannel {
						k = i / hw % c
					}
					ref[k] += gv[i] * yv[i]
				}
				closeTo(t, what+": ds", vals(ds), ref, 1e-6)

				dsOnly := tensor.Empty(dt, ssh...)
				be.ChannelAxpyBackward(nil, dsOnly, g, y, s)
				require.Equal(t, vals(ds), vals(dsOnly), "%s: ds alone", what)

				out2 := tensor.Empty(dt, sh...)
				require.NoError(t, be.BeginCapture())
				be.ChannelAxpy(out2, x, y, s)
				be.ChannelAxpyBackward(dy, ds, g, y, s)
				gr, err := be.EndCapture()
				require.NoError(t, err)
				require.Zero(t, testing.AllocsPerRun(5, gr.Replay), "%s: replay allocates", what)
				require.Equal(t, vals(want), vals(out2), "%s: replayed", what)
			}
		}
	}
	f32 := func(sh ...int) *T { return tensor.Empty(tensor.F32, sh...) }
	require.PanicsWithValue(t, "cpu: ChannelAxpy: scale of shape [2]: want 1 or 3 elements", func() {
		be.ChannelAxpy(f32(2, 3, 4), f32(2, 3, 4), f32(2, 3, 4), f32(2))
	})
	require.Panics(t, func() { be.ChannelAxpy(f32(2, 3, 4), f32(2, 3, 4), f32(2, 3, 5), f32(3)) })
	require.Panics(t, func() { be.ChannelAxpy(f32(2, 3), f32(2, 3), tensor.Empty(tensor.F64, 2, 3), f32(3)) })
	require.Panics(t, func() { be.ChannelAxpyBackward(f32(2, 3), f32(2), f32(2, 3), f32(2, 3), f32(3)) })
}
