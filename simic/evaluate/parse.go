package evaluate

import (
	"fmt"
	"strconv"
	"strings"
)

// Controller is one controller under evaluation.
type Controller struct {
	// Name labels the controller in reports: "heuristic", "none" or
	// "gnn:FILE" as given.
	Name string
	// Kind is "heuristic" (tamiyo's rules), "gnn" (a learned policy) or
	// "none" (the host trained alone, no seeds).
	Kind string
	// Policy is the policy checkpoint of a gnn controller; empty means
	// the shipped policy (recipe.DefaultPolicyName).
	Policy string
	// Sample samples the policy's actions (seeded by the run's seed)
	// instead of taking the most likely one.
	Sample bool
}

// ParseControllers parses a comma-separated list such as
// "heuristic,gnn:policy.safetensors,none" (a bare "gnn" is the shipped
// policy; "gnn-sample:FILE" samples the
// policy's actions). Names must be distinct.
func ParseControllers(s string) ([]Controller, error) {
	var out []Controller
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		c := Controller{Name: f}
		kind, file, hasFile := strings.Cut(f, ":")
		switch {
		case kind == "heuristic" && !hasFile, kind == "none" && !hasFile:
			c.Kind = kind
		case (kind == "gnn" || kind == "gnn-sample") && !hasFile:
			c.Kind, c.Sample = "gnn", kind == "gnn-sample" // the shipped policy
		case kind == "gnn" || kind == "gnn-sample":
			if file == "" {
				return nil, fmt.Errorf("controller %q: want %s:POLICY_FILE, or %s for the shipped policy", f, kind, kind)
			}
			c.Kind, c.Policy, c.Sample = "gnn", file, kind == "gnn-sample"
		default:
			return nil, fmt.Errorf("controller %q: want heuristic, none, gnn, gnn:FILE or gnn-sample:FILE", f)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("controller %q is listed twice", f)
		}
		seen[c.Name] = true
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no controller given (e.g. heuristic,gnn:FILE,none)")
	}
	return out, nil
}

// maxSeeds bounds a seed list, so that a typo such as 1-1000000 is an
// error rather than a week of training.
const maxSeeds = 10000

// ParseSeeds parses seeds such as "101-120" or "1,5,7-9" (inclusive
// ranges, each seed once, in the order given).
func ParseSeeds(s string) ([]uint64, error) {
	var out []uint64
	seen := map[uint64]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		loS, hiS, isRange := strings.Cut(f, "-")
		lo, err := strconv.ParseUint(loS, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seeds %q: %q is not a seed or a range such as 101-120", s, f)
		}
		hi := lo
		if isRange {
			if hi, err = strconv.ParseUint(hiS, 10, 64); err != nil {
				return nil, fmt.Errorf("seeds %q: %q is not a range such as 101-120", s, f)
			}
			if hi < lo {
				return nil, fmt.Errorf("seeds %q: the range %q is empty", s, f)
			}
		}
		if hi-lo >= maxSeeds || len(out)+int(hi-lo+1) > maxSeeds {
			return nil, fmt.Errorf("seeds %q: more than %d seeds", s, maxSeeds)
		}
		for v := lo; ; v++ {
			if seen[v] {
				return nil, fmt.Errorf("seeds %q: seed %d is listed twice", s, v)
			}
			seen[v] = true
			out = append(out, v)
			if v == hi {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("seeds %q: no seed (e.g. 101-120)", s)
	}
	return out, nil
}
