package leyline

import "fmt"

// AlphaMode is the direction an alpha controller is moving.
type AlphaMode int

// Alpha modes (esper-reference.md §1.2).
const (
	AlphaHold AlphaMode = 0
	AlphaUp   AlphaMode = 1
	AlphaDown AlphaMode = 2
)

// String returns "HOLD", "UP" or "DOWN".
func (m AlphaMode) String() string {
	switch m {
	case AlphaHold:
		return "HOLD"
	case AlphaUp:
		return "UP"
	case AlphaDown:
		return "DOWN"
	}
	return fmt.Sprintf("AlphaMode(%d)", int(m))
}

// Valid reports whether m is one of the three modes.
func (m AlphaMode) Valid() bool { return m >= AlphaHold && m <= AlphaDown }

// AlphaCurve is the easing of an alpha ramp.
type AlphaCurve int

// Alpha curves (esper-reference.md §1.2).
const (
	CurveLinear  AlphaCurve = 1
	CurveCosine  AlphaCurve = 2
	CurveSigmoid AlphaCurve = 3
)

// String returns "LINEAR", "COSINE" or "SIGMOID".
func (c AlphaCurve) String() string {
	switch c {
	case CurveLinear:
		return "LINEAR"
	case CurveCosine:
		return "COSINE"
	case CurveSigmoid:
		return "SIGMOID"
	}
	return fmt.Sprintf("AlphaCurve(%d)", int(c))
}

// Valid reports whether c is one of the three curves.
func (c AlphaCurve) Valid() bool { return c >= CurveLinear && c <= CurveSigmoid }

// ParseAlphaCurve returns the curve with the given name.
func ParseAlphaCurve(name string) (AlphaCurve, error) {
	for c := CurveLinear; c <= CurveSigmoid; c++ {
		if c.String() == name {
			return c, nil
		}
	}
	return 0, fmt.Errorf("leyline: unknown alpha curve %q (LINEAR, COSINE, SIGMOID)", name)
}

// AlphaAlgorithm is how a seed's output is blended with the host's.
type AlphaAlgorithm int

// Blend algorithms (esper-reference.md §1.2).
const (
	// BlendAdd is the convex cross-fade h + α(s − h).
	BlendAdd AlphaAlgorithm = 1
	// BlendMultiply is the valve h·(1 + α·tanh(s − x)).
	BlendMultiply AlphaAlgorithm = 2
	// BlendGate is ADD with α scaled per sample by a learned gate.
	BlendGate AlphaAlgorithm = 3
)

// String returns "ADD", "MULTIPLY" or "GATE".
func (a AlphaAlgorithm) String() string {
	switch a {
	case BlendAdd:
		return "ADD"
	case BlendMultiply:
		return "MULTIPLY"
	case BlendGate:
		return "GATE"
	}
	return fmt.Sprintf("AlphaAlgorithm(%d)", int(a))
}

// Valid reports whether a is one of the three algorithms.
func (a AlphaAlgorithm) Valid() bool { return a >= BlendAdd && a <= BlendGate }

// ParseAlphaAlgorithm returns the algorithm with the given name.
func ParseAlphaAlgorithm(name string) (AlphaAlgorithm, error) {
	for a := BlendAdd; a <= BlendGate; a++ {
		if a.String() == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("leyline: unknown alpha algorithm %q (ADD, MULTIPLY, GATE)", name)
}
