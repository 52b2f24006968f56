package leyline

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrInvalidSlotID is wrapped by every error about a malformed slot id.
var ErrInvalidSlotID = errors.New("invalid slot id")

// legacySlotNames maps the first-generation slot names to their
// replacements, for the error message.
var legacySlotNames = map[string]string{"early": "r0c0", "mid": "r0c1", "late": "r0c2"}

// FormatSlotID returns the canonical id "r{row}c{col}". It panics on a
// negative row or column, which is a programming error.
func FormatSlotID(row, col int) string {
	if row < 0 || col < 0 {
		panic(fmt.Sprintf("leyline.FormatSlotID: negative row or column (%d, %d)", row, col))
	}
	return "r" + strconv.Itoa(row) + "c" + strconv.Itoa(col)
}

// ParseSlotID splits "r{row}c{col}" into its row and column. Legacy names
// ("early", "mid", "late") are rejected with the id to use instead.
func ParseSlotID(id string) (row, col int, err error) {
	if repl, ok := legacySlotNames[strings.ToLower(id)]; ok {
		return 0, 0, fmt.Errorf("%w: %q is a legacy slot name; use the grid id %q (format r{row}c{col})", ErrInvalidSlotID, id, repl)
	}
	bad := func() (int, int, error) {
		return 0, 0, fmt.Errorf("%w: %q (want r{row}c{col} with non-negative integers, e.g. r0c1)", ErrInvalidSlotID, id)
	}
	if len(id) < 4 || id[0] != 'r' {
		return bad()
	}
	c := strings.IndexByte(id, 'c')
	if c < 2 || c == len(id)-1 {
		return bad()
	}
	row, err1 := parseDigits(id[1:c])
	col, err2 := parseDigits(id[c+1:])
	if err1 != nil || err2 != nil {
		return bad()
	}
	return row, col, nil
}

// parseDigits accepts only ASCII digits (no sign, no spaces) and rejects
// leading zeros so that every slot has one spelling.
func parseDigits(s string) (int, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, errors.New("bad digits")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, errors.New("bad digits")
		}
	}
	return strconv.Atoi(s)
}

// ValidateSlotID returns nil when id is a well-formed slot id.
func ValidateSlotID(id string) error {
	_, _, err := ParseSlotID(id)
	return err
}

// SlotIDLess orders slot ids row-major: by row, then column. Malformed
// ids sort after well-formed ones, by string.
func SlotIDLess(a, b string) bool {
	ra, ca, ea := ParseSlotID(a)
	rb, cb, eb := ParseSlotID(b)
	switch {
	case ea != nil && eb != nil:
		return a < b
	case ea != nil:
		return false
	case eb != nil:
		return true
	case ra != rb:
		return ra < rb
	default:
		return ca < cb
	}
}

// SortSlotIDs sorts ids in place, row-major.
func SortSlotIDs(ids []string) {
	sort.SliceStable(ids, func(i, j int) bool { return SlotIDLess(ids[i], ids[j]) })
}

// SlotConfig is an immutable, ordered set of slot ids: the slot head's
// options, in action order. The zero value is not valid; build one with
// NewSlotConfig, DefaultSlotConfig, SlotConfigForGrid or
// SlotConfigFromSpecs.
type SlotConfig struct {
	ids      []string
	channels map[string]int
}

// DefaultSlotConfig returns the three slots r0c0, r0c1, r0c2
// (G2 DEFAULT_NUM_SLOTS).
func DefaultSlotConfig() SlotConfig {
	c, _ := NewSlotConfig("r0c0", "r0c1", "r0c2")
	return c
}

// NewSlotConfig builds a configuration of the given ids in the given
// order. Ids must be well formed and unique, and there must be at least
// one.
func NewSlotConfig(ids ...string) (SlotConfig, error) {
	if len(ids) == 0 {
		return SlotConfig{}, errors.New("leyline: SlotConfig needs at least one slot")
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if err := ValidateSlotID(id); err != nil {
			return SlotConfig{}, fmt.Errorf("leyline: SlotConfig: %w", err)
		}
		if seen[id] {
			return SlotConfig{}, fmt.Errorf("leyline: SlotConfig: duplicate slot id %q", id)
		}
		seen[id] = true
	}
	return SlotConfig{ids: append([]string(nil), ids...)}, nil
}

// SlotConfigForGrid returns the rows×cols slots in row-major order. A grid
// with no cells is an error.
func SlotConfigForGrid(rows, cols int) (SlotConfig, error) {
	if rows < 0 || cols < 0 {
		return SlotConfig{}, fmt.Errorf("leyline: SlotConfigForGrid(%d, %d): negative size", rows, cols)
	}
	ids := make([]string, 0, rows*cols)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			ids = append(ids, FormatSlotID(r, c))
		}
	}
	return NewSlotConfig(ids...)
}

// SlotConfigFromSpecs orders the specs' slots by their Order field (which
// must be unique) and remembers each slot's channel count.
func SlotConfigFromSpecs(specs []InjectionSpec) (SlotConfig, error) {
	sorted := append([]InjectionSpec(nil), specs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Order < sorted[j].Order })
	ids := make([]string, len(sorted))
	ch := make(map[string]int, len(sorted))
	for i, s := range sorted {
		if i > 0 && sorted[i-1].Order == s.Order {
			return SlotConfig{}, fmt.Errorf("leyline: SlotConfigFromSpecs: slots %q and %q share order %d", sorted[i-1].SlotID, s.SlotID, s.Order)
		}
		if err := s.Validate(); err != nil {
			return SlotConfig{}, err
		}
		ids[i] = s.SlotID
		ch[s.SlotID] = s.Channels
	}
	c, err := NewSlotConfig(ids...)
	if err != nil {
		return SlotConfig{}, err
	}
	c.channels = ch
	return c, nil
}

// Len returns the number of slots (the size of the slot head).
func (c SlotConfig) Len() int { return len(c.ids) }

// IDs returns the slot ids in order (a copy).
func (c SlotConfig) IDs() []string { return append([]string(nil), c.ids...) }

// At returns the id of slot i; i outside [0, Len) is an error.
func (c SlotConfig) At(i int) (string, error) {
	if i < 0 || i >= len(c.ids) {
		return "", fmt.Errorf("leyline: slot index %d out of range [0, %d)", i, len(c.ids))
	}
	return c.ids[i], nil
}

// Index returns the position of id; an id not in the configuration is an
// error.
func (c SlotConfig) Index(id string) (int, error) {
	for i, v := range c.ids {
		if v == id {
			return i, nil
		}
	}
	return -1, fmt.Errorf("leyline: slot %q is not in the configuration %v", id, c.ids)
}

// Contains reports whether id is one of the slots.
func (c SlotConfig) Contains(id string) bool {
	_, err := c.Index(id)
	return err == nil
}

// ChannelsForSlot returns the channel count recorded for id by
// SlotConfigFromSpecs, or 0 when unknown.
func (c SlotConfig) ChannelsForSlot(id string) int { return c.channels[id] }
