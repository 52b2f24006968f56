package leyline

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlotIDRoundTrip(t *testing.T) {
	for _, rc := range [][2]int{{0, 0}, {0, 2}, {1, 0}, {3, 17}, {10, 100}} {
		id := FormatSlotID(rc[0], rc[1])
		r, c, err := ParseSlotID(id)
		require.NoError(t, err)
		assert.Equal(t, rc, [2]int{r, c})
	}
	assert.Equal(t, "r1c2", FormatSlotID(1, 2))
	assert.Panics(t, func() { FormatSlotID(-1, 0) })
}

func TestSlotIDRejected(t *testing.T) {
	cases := []struct {
		id, contains string
	}{
		{"early", "r0c0"},
		{"mid", "r0c1"},
		{"late", "r0c2"},
		{"r-1c0", "r{row}c{col}"},
		{"r0c-1", "r{row}c{col}"},
		{"", "r{row}c{col}"},
		{"r0", "r{row}c{col}"},
		{"rc", "r{row}c{col}"},
		{"r0c", "r{row}c{col}"},
		{"x0c0", "r{row}c{col}"},
		{"r01c0", "r{row}c{col}"},
		{"r0c0 ", "r{row}c{col}"},
		{"R0C0", "r{row}c{col}"},
		{"r1.5c0", "r{row}c{col}"},
	}
	for _, c := range cases {
		err := ValidateSlotID(c.id)
		require.Error(t, err, "%q", c.id)
		assert.True(t, errors.Is(err, ErrInvalidSlotID))
		assert.Contains(t, err.Error(), c.contains, "%q", c.id)
	}
}

func TestSlotSortRowMajor(t *testing.T) {
	ids := []string{"r1c0", "r0c10", "r0c2", "r10c0", "r0c0", "r2c1"}
	SortSlotIDs(ids)
	assert.Equal(t, []string{"r0c0", "r0c2", "r0c10", "r1c0", "r2c1", "r10c0"}, ids)
}

func TestSlotConfig(t *testing.T) {
	d := DefaultSlotConfig()
	assert.Equal(t, []string{"r0c0", "r0c1", "r0c2"}, d.IDs())
	assert.Equal(t, DefaultNumSlots, d.Len())

	g, err := SlotConfigForGrid(2, 3)
	require.NoError(t, err)
	assert.Equal(t, []string{"r0c0", "r0c1", "r0c2", "r1c0", "r1c1", "r1c2"}, g.IDs())

	for _, rc := range [][2]int{{0, 3}, {3, 0}, {0, 0}, {-1, 2}} {
		_, err := SlotConfigForGrid(rc[0], rc[1])
		assert.Error(t, err, "%v", rc)
	}
	_, err = NewSlotConfig()
	assert.Error(t, err)
	_, err = NewSlotConfig("r0c0", "r0c0")
	assert.ErrorContains(t, err, "duplicate")
	_, err = NewSlotConfig("r0c0", "mid")
	assert.ErrorContains(t, err, "r0c1")

	for _, i := range []int{-1, 3, 100} {
		_, err := d.At(i)
		assert.Error(t, err, "%d", i)
	}
	id, err := d.At(2)
	require.NoError(t, err)
	assert.Equal(t, "r0c2", id)
	i, err := d.Index("r0c1")
	require.NoError(t, err)
	assert.Equal(t, 1, i)
	_, err = d.Index("r5c5")
	assert.Error(t, err)
	assert.True(t, d.Contains("r0c0"))
	assert.False(t, d.Contains("r1c0"))
	assert.Equal(t, 0, d.ChannelsForSlot("r0c0"))
}

func TestSlotConfigFromSpecs(t *testing.T) {
	specs := []InjectionSpec{
		{SlotID: "r1c0", Channels: 32, Order: 1, Row: 1},
		{SlotID: "r0c1", Channels: 64, Order: 2, Col: 1},
		{SlotID: "r0c0", Channels: 32, Order: 0},
	}
	c, err := SlotConfigFromSpecs(specs)
	require.NoError(t, err)
	assert.Equal(t, []string{"r0c0", "r1c0", "r0c1"}, c.IDs())
	assert.Equal(t, 64, c.ChannelsForSlot("r0c1"))
	assert.Equal(t, 0, c.ChannelsForSlot("r9c9"))

	specs[0].Order = 2
	_, err = SlotConfigFromSpecs(specs)
	assert.ErrorContains(t, err, "share order")
	_, err = SlotConfigFromSpecs(nil)
	assert.Error(t, err)
}

func TestInjectionSpecValidate(t *testing.T) {
	ok := InjectionSpec{SlotID: "r0c0", Channels: 16, Position: 0.5, LayerStart: 1, LayerEnd: 2}
	cases := []struct {
		name  string
		edit  func(*InjectionSpec)
		valid bool
	}{
		{"ok", func(*InjectionSpec) {}, true},
		{"position 0", func(s *InjectionSpec) { s.Position = 0 }, true},
		{"position 1", func(s *InjectionSpec) { s.Position = 1 }, true},
		{"position -0.01", func(s *InjectionSpec) { s.Position = -0.01 }, false},
		{"position 1.01", func(s *InjectionSpec) { s.Position = 1.01 }, false},
		{"channels 0", func(s *InjectionSpec) { s.Channels = 0 }, false},
		{"channels -1", func(s *InjectionSpec) { s.Channels = -1 }, false},
		{"start > end", func(s *InjectionSpec) { s.LayerStart, s.LayerEnd = 3, 2 }, false},
		{"start == end", func(s *InjectionSpec) { s.LayerStart, s.LayerEnd = 2, 2 }, true},
		{"negative start", func(s *InjectionSpec) { s.LayerStart = -1 }, false},
		{"bad slot", func(s *InjectionSpec) { s.SlotID = "early" }, false},
		{"bad surface", func(s *InjectionSpec) { s.Surface = 5 }, false},
	}
	for _, c := range cases {
		s := ok
		c.edit(&s)
		err := s.Validate()
		assert.Equal(t, c.valid, err == nil, "%s: %v", c.name, err)
	}
	// A plain comparable value: usable as a map key.
	m := map[InjectionSpec]int{ok: 1}
	assert.Equal(t, 1, m[ok])
}
