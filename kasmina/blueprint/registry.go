package blueprint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"

	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// Topologies the catalog knows.
const (
	TopologyCNN = "cnn"
	TopologyMLP = "mlp"
)

// Reference widths at which the catalog's ParamEstimate values hold.
const (
	// CNNReferenceChannels is the width of the G2 cnn table's estimates
	// (conv_light: 64·64·9 + 2·64 = 36 992 ≈ 37 000).
	CNNReferenceChannels = 64
	// MLPReferenceChannels is the embedding width of the G2 reference
	// transformer, whose seed estimates the mlp catalog reuses (lora:
	// 2·384·8 = 6144 ≈ 6000).
	MLPReferenceChannels = 384
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
	// DType of the parameters (and of the activations the seed expects);
	// zero means F32. Gradient checks build seeds in F64.
	DType tensor.DType
}

// Factory builds one seed module for the given options; opts is already
// validated (Channels > 0, RNG set, DType a floating-point type, never
// zero). Build applies ZeroFinal afterwards to modules that implement
// FinalZeroer, so a factory may ignore opts.ZeroFinal.
type Factory func(opts Options) (nn.Module, error)

// Spec is one catalog entry.
type Spec struct {
	Topology string
	Name     string
	// ParamEstimate is the documented parameter count at the topology's
	// reference width (CNNReferenceChannels, MLPReferenceChannels), used
	// for ordering; the actual count at that width is within 25% of it.
	ParamEstimate int
	Description   string
	New           Factory
}

// Key returns "topology:name".
func (s Spec) Key() string { return s.Topology + ":" + s.Name }

var (
	mu       sync.RWMutex
	registry = map[string]Spec{}

	// builtinsOnce registers the built-in catalog on first use of the
	// package rather than at init, so importing the package has no side
	// effects and a failure to register is reported where it is used.
	builtinsOnce sync.Once
	builtinsErr  error
)

// ensureBuiltins registers the built-in cnn and mlp catalogs once. A
// failure (a programming error in this package) panics, at every call.
func ensureBuiltins() {
	builtinsOnce.Do(func() {
		for _, s := range append(cnnCatalog(), mlpCatalog()...) {
			if err := register(s); err != nil {
				builtinsErr = err
				return
			}
		}
	})
	if builtinsErr != nil {
		panic(builtinsErr)
	}
}

// Register adds spec to the catalog. A duplicate key (including one of
// the built-in blueprints), an empty name, a topology other than
// TopologyCNN or TopologyMLP (Build knows no probe shape for others), or
// a nil factory is an error.
func Register(spec Spec) error {
	ensureBuiltins()
	return register(spec)
}

func register(spec Spec) error {
	if spec.Topology == "" || spec.Name == "" || spec.New == nil {
		return fmt.Errorf("blueprint: Register: topology, name and factory are required (got %q, %q)", spec.Topology, spec.Name)
	}
	if probeShape(spec.Topology, 1) == nil {
		return fmt.Errorf("blueprint: Register %s: %w topology %q (known: %s, %s)", spec.Key(), ErrUnknown, spec.Topology, TopologyCNN, TopologyMLP)
	}
	if strings.Contains(spec.Name, ":") {
		return fmt.Errorf("blueprint: Register: name %q contains ':'", spec.Name)
	}
	if spec.ParamEstimate < 0 {
		return fmt.Errorf("blueprint: Register %s: negative ParamEstimate %d", spec.Key(), spec.ParamEstimate)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[spec.Key()]; dup {
		return fmt.Errorf("blueprint: Register: %s is already registered", spec.Key())
	}
	registry[spec.Key()] = spec
	return nil
}

// unregister removes key; tests use it to undo their registrations.
func unregister(key string) {
	mu.Lock()
	defer mu.Unlock()
	delete(registry, key)
}

// Topologies returns the registered topologies, sorted.
func Topologies() []string {
	ensureBuiltins()
	return topologies()
}

func topologies() []string {
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
	ensureBuiltins()
	mu.RLock()
	var out []Spec
	for _, s := range registry {
		if s.Topology == topology {
			out = append(out, s)
		}
	}
	mu.RUnlock()
	if len(out) == 0 {
		return nil, fmt.Errorf("blueprint: %w topology %q (known: %s)", ErrUnknown, topology, strings.Join(topologies(), ", "))
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
	ensureBuiltins()
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
