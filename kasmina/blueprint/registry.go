package blueprint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"

	"github.com/esper-go/esper/nn"
)

// Topologies the catalog knows.
const (
	TopologyCNN = "cnn"
	TopologyMLP = "mlp"
)

// ErrUnknown is wrapped by errors about an unknown topology or blueprint.
var ErrUnknown = errors.New("unknown blueprint")

// Options configures one Build.
type Options struct {
	// Channels is the width of the activation at the slot (C of
	// [N, C, H, W] or [N, C]); required, > 0.
	Channels int
	// RNG initialises the parameters; required.
	RNG *rand.Rand
	// ZeroFinal zero-initialises the final affine layer (Linear or Conv)
	// so that a MULTIPLY seed starts as the identity valve. Blueprints
	// without parameters ignore it.
	ZeroFinal bool
}

// Factory builds one seed module for the given options; opts is already
// validated (Channels > 0, RNG set).
type Factory func(opts Options) (nn.Module, error)

// Spec is one catalog entry.
type Spec struct {
	Topology string
	Name     string
	// ParamEstimate is the documented parameter count (at the reference
	// width of 64 channels), used for ordering; the actual count at that
	// width is within 25% of it.
	ParamEstimate int
	Description   string
	New           Factory
}

// Key returns "topology:name".
func (s Spec) Key() string { return s.Topology + ":" + s.Name }

var (
	mu       sync.RWMutex
	registry = map[string]Spec{}
)

// Register adds spec to the catalog. A duplicate key, an empty topology
// or name, or a nil factory is an error.
func Register(spec Spec) error {
	if spec.Topology == "" || spec.Name == "" || spec.New == nil {
		return fmt.Errorf("blueprint: Register: topology, name and factory are required (got %q, %q)", spec.Topology, spec.Name)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[spec.Key()]; dup {
		return fmt.Errorf("blueprint: Register: %s is already registered", spec.Key())
	}
	registry[spec.Key()] = spec
	return nil
}

// Topologies returns the registered topologies, sorted.
func Topologies() []string {
	mu.RLock()
	defer mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, s := range registry {
		if !seen[s.Topology] {
			seen[s.Topology] = true
			out = append(out, s.Topology)
		}
	}
	sort.Strings(out)
	return out
}

// List returns the topology's blueprints sorted by (ParamEstimate, Name).
// An unknown topology is an error.
func List(topology string) ([]Spec, error) {
	mu.RLock()
	var out []Spec
	for _, s := range registry {
		if s.Topology == topology {
			out = append(out, s)
		}
	}
	mu.RUnlock()
	if len(out) == 0 {
		return nil, fmt.Errorf("blueprint: %w topology %q (known: %s)", ErrUnknown, topology, strings.Join(Topologies(), ", "))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ParamEstimate != out[j].ParamEstimate {
			return out[i].ParamEstimate < out[j].ParamEstimate
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Lookup returns the spec of topology:name; the error for an unknown name
// lists the topology's blueprints.
func Lookup(topology, name string) (Spec, error) {
	mu.RLock()
	s, ok := registry[topology+":"+name]
	mu.RUnlock()
	if ok {
		return s, nil
	}
	list, err := List(topology)
	if err != nil {
		return Spec{}, err
	}
	names := make([]string, len(list))
	for i, l := range list {
		names[i] = l.Name
	}
	return Spec{}, fmt.Errorf("blueprint: %w %q for topology %q (available: %s)", ErrUnknown, name, topology, strings.Join(names, ", "))
}
