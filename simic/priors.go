package simic

import (
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
)

// OpPriors returns per-head logit priors for a new policy (nil rows
// where nothing is set): prune is added to the op head's PRUNE, and
// germinate to the germination arguments the heuristic uses (tamiyo's
// GerminateStyle, GerminateTempo, GerminateAlphaTarget) and to the
// conv_light and conv_heavy blueprints — esper ppo's --prune-prior and
// --germinate-prior.
func OpPriors(prune, germinate float64) [leyline.NumActionHeads][]float64 {
	var p [leyline.NumActionHeads][]float64
	sizes := leyline.HeadSizes(1)
	set := func(h, option int, v float64) {
		if v == 0 {
			return
		}
		if p[h] == nil {
			p[h] = make([]float64, sizes[h])
		}
		p[h][option] += v
	}
	set(leyline.HeadOp, int(leyline.OpPrune), prune)
	set(leyline.HeadStyle, int(tamiyo.GerminateStyle), germinate)
	set(leyline.HeadTempo, int(tamiyo.GerminateTempo), germinate)
	set(leyline.HeadAlphaTarget, int(tamiyo.GerminateAlphaTarget), germinate)
	set(leyline.HeadBlueprint, int(leyline.BlueprintConvLight), germinate)
	set(leyline.HeadBlueprint, int(leyline.BlueprintConvHeavy), germinate)
	return p
}
