package blueprint

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/esper-go/esper/nn"
)

// names returns the names of specs, in order.
func names(specs []Spec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}

// registerForTest registers spec and removes it when the test ends.
func registerForTest(t *testing.T, spec Spec) {
	t.Helper()
	if err := Register(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unregister(spec.Key()) })
}

func TestCatalogOrder(t *testing.T) {
	tests := []struct {
		topology string
		want     []string
	}{
		{TopologyCNN, []string{"noop", "norm", "attention", "conv_small", "bottleneck", "depthwise", "conv_light", "conv_heavy"}},
		{TopologyMLP, []string{"noop", "norm", "lora", "lora_large", "mlp_small", "mlp"}},
	}
	for _, tt := range tests {
		list, err := List(tt.topology)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(list); !slices.Equal(got, tt.want) {
			t.Errorf("List(%q) = %v, want %v", tt.topology, got, tt.want)
		}
		for i := 1; i < len(list); i++ {
			if list[i-1].ParamEstimate > list[i].ParamEstimate {
				t.Errorf("List(%q): %s (%d) before %s (%d)", tt.topology, list[i-1].Name, list[i-1].ParamEstimate, list[i].Name, list[i].ParamEstimate)
			}
		}
		for _, s := range list {
			if s.Topology != tt.topology || s.Description == "" || s.New == nil {
				t.Errorf("%s: incomplete spec %+v", s.Key(), s)
			}
		}
	}
	if got := Topologies(); !slices.Equal(got, []string{TopologyCNN, TopologyMLP}) {
		t.Errorf("Topologies() = %v", got)
	}
}

func TestListTiesSortByName(t *testing.T) {
	noop := func(Options) (nn.Module, error) { return newSeed(TopologyMLP, "x", 1), nil }
	// Registered out of order, with the estimate of the built-in lora.
	registerForTest(t, Spec{Topology: TopologyMLP, Name: "zz_test", ParamEstimate: 6000, New: noop})
	registerForTest(t, Spec{Topology: TopologyMLP, Name: "aa_test", ParamEstimate: 6000, New: noop})
	list, err := List(TopologyMLP)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"noop", "norm", "aa_test", "lora", "zz_test", "lora_large", "mlp_small", "mlp"}
	if got := names(list); !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
}

func TestRegisterRejects(t *testing.T) {
	f := func(Options) (nn.Module, error) { return nil, nil }
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"duplicate built-in", Spec{Topology: TopologyCNN, Name: "conv_light", New: f}, "already registered"},
		{"duplicate built-in mlp", Spec{Topology: TopologyMLP, Name: "noop", New: f}, "already registered"},
		{"empty name", Spec{Topology: TopologyCNN, New: f}, "required"},
		{"empty topology", Spec{Name: "x", New: f}, "required"},
		{"nil factory", Spec{Topology: TopologyCNN, Name: "x"}, "required"},
		{"unknown topology", Spec{Topology: "transformer", Name: "x", New: f}, "unknown"},
		{"colon in name", Spec{Topology: TopologyCNN, Name: "a:b", New: f}, "':'"},
		{"negative estimate", Spec{Topology: TopologyCNN, Name: "x", ParamEstimate: -1, New: f}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Register(tt.spec)
			if err == nil {
				unregister(tt.spec.Key())
				t.Fatal("Register succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestRegisterDuplicateCustom(t *testing.T) {
	f := func(Options) (nn.Module, error) { return newSeed(TopologyCNN, "x", 1), nil }
	spec := Spec{Topology: TopologyCNN, Name: "dup_test", ParamEstimate: 1, New: f}
	registerForTest(t, spec)
	if err := Register(spec); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("second Register: %v", err)
	}
}

func TestUnknownErrorsListWhatExists(t *testing.T) {
	_, err := Lookup(TopologyCNN, "lora")
	if !errors.Is(err, ErrUnknown) {
		t.Fatalf("Lookup(cnn, lora) = %v, want ErrUnknown", err)
	}
	for _, n := range []string{"noop", "conv_light", "conv_heavy", "depthwise"} {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %s", err, n)
		}
	}

	for _, f := range []func() error{
		func() error { _, err := Lookup("transformer", "lora"); return err },
		func() error { _, err := List("transformer"); return err },
		func() error { _, err := Build("transformer", "lora", Options{Channels: 4, RNG: testRNG()}); return err },
	} {
		err := f()
		if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "cnn, mlp") {
			t.Errorf("unknown topology error %v: want ErrUnknown listing cnn, mlp", err)
		}
	}
	if _, err := Build(TopologyMLP, "conv_light", Options{Channels: 4, RNG: testRNG()}); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "lora_large") {
		t.Errorf("Build(mlp, conv_light) = %v", err)
	}
}
