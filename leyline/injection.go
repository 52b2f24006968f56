package leyline

import "fmt"

// Surface is where in a host block a slot attaches.
type Surface int

// Injection surfaces (esper-reference.md §1.5).
const (
	SurfaceBlockEnd Surface = 0
	SurfacePrePool  Surface = 1
	SurfacePostPool Surface = 2
	SurfacePostAttn Surface = 3
	SurfacePostMLP  Surface = 4
)

// String returns the surface's upper-case name.
func (s Surface) String() string {
	switch s {
	case SurfaceBlockEnd:
		return "BLOCK_END"
	case SurfacePrePool:
		return "PRE_POOL"
	case SurfacePostPool:
		return "POST_POOL"
	case SurfacePostAttn:
		return "POST_ATTN"
	case SurfacePostMLP:
		return "POST_MLP"
	}
	return fmt.Sprintf("Surface(%d)", int(s))
}

// InjectionSpec describes one slot of a host: where it is and how wide
// the activation passing through it is. It is a plain comparable value.
type InjectionSpec struct {
	SlotID   string
	Channels int
	// Position in [0, 1] along the host, for display only.
	Position float64
	// LayerStart and LayerEnd are the host layers the slot covers
	// (0 <= LayerStart <= LayerEnd).
	LayerStart, LayerEnd int
	Surface              Surface
	// Order is the slot's position in the execution order; unique per
	// host.
	Order    int
	Row, Col int
}

// Validate checks the spec's invariants.
func (s InjectionSpec) Validate() error {
	if err := ValidateSlotID(s.SlotID); err != nil {
		return fmt.Errorf("leyline: InjectionSpec: %w", err)
	}
	if s.Channels <= 0 {
		return fmt.Errorf("leyline: InjectionSpec %s: channels %d must be > 0", s.SlotID, s.Channels)
	}
	if !(s.Position >= 0 && s.Position <= 1) {
		return fmt.Errorf("leyline: InjectionSpec %s: position %g outside [0, 1]", s.SlotID, s.Position)
	}
	if s.LayerStart < 0 || s.LayerEnd < s.LayerStart {
		return fmt.Errorf("leyline: InjectionSpec %s: layer range [%d, %d] needs 0 <= start <= end", s.SlotID, s.LayerStart, s.LayerEnd)
	}
	if s.Surface < SurfaceBlockEnd || s.Surface > SurfacePostMLP {
		return fmt.Errorf("leyline: InjectionSpec %s: unknown surface %d", s.SlotID, int(s.Surface))
	}
	return nil
}

// BlockInfo describes one block of a host (kasmina.Host.Blocks), for
// the controllers that read the host as a graph of layers.
type BlockInfo struct {
	// Depth is the block's 0-based position from the input.
	Depth int
	// Channels is the block's output width.
	Channels int
	// Slots are the ids of the slots attached after this block, in
	// timeline order.
	Slots []string
}
