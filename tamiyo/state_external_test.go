package tamiyo_test

import (
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tolaria"
)

// The trainer checkpoints a Tracked (and a bare Heuristic) as a
// tolaria.StatefulController.
var (
	_ tolaria.StatefulController = (*tamiyo.Tracked)(nil)
	_ tolaria.StatefulController = (*tamiyo.Heuristic)(nil)
)
