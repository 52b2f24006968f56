package tamiyo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/internal/fuzzcheck"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

// FuzzLoadPolicy feeds the policy loader arbitrary files: ReadPolicyHeader
// and LoadPolicy return an error or a policy, never panic, and allocate
// in proportion to the file (a header may not make them build a network
// the file does not hold).
func FuzzLoadPolicy(f *testing.F) {
	dir := f.TempDir()
	slots := leyline.DefaultSlotConfig()
	p, err := NewPolicy(smallOptions(tensor.F32))
	if err != nil {
		f.Fatal(err)
	}
	seed := filepath.Join(dir, "seed.safetensors")
	if err := SavePolicy(seed, p, slots); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:200])
	path := filepath.Join(dir, "fuzz.safetensors")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		// A policy that loads is built beside the file's tensors: about
		// twice the file, plus the network's own structures.
		fuzzcheck.Budget(t, "LoadPolicy", len(data), fuzzcheck.Linear(len(data), 6, 4<<20), func() {
			if h, err := ReadPolicyHeader(path); err == nil {
				_, _ = LoadPolicy(path, h.Options, slots)
			}
			_, _ = LoadPolicy(path, smallOptions(tensor.F32), slots)
		})
	})
}
