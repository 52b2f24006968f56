package simic

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/internal/fuzzcheck"
)

// FuzzPPOState feeds the PPO checkpoint reader (LoadPPOCheckpoint) an
// arbitrary state file (seeded with the one a real one-round run
// writes): it is refused with an error or accepted within its documented
// ranges, never a panic, and read with allocations in proportion to the
// file.
func FuzzPPOState(f *testing.F) {
	good, err := os.ReadFile(filepath.Join(onePPOCheckpoint(f, 1), PPOStateFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"version":2,"round":-1000000}`))
	f.Add([]byte(`{"version":2,"round":1,"history":[{"round":1,"return":1e308}]}`))
	dir := filepath.Join(f.TempDir(), "fuzz")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		if err := os.WriteFile(filepath.Join(dir, PPOStateFile), js, 0o644); err != nil {
			t.Fatal(err)
		}
		var st PPOCheckpoint
		var err error
		fuzzcheck.Budget(t, "LoadPPOCheckpoint", len(js), fuzzcheck.Linear(len(js), 32, 256<<10), func() {
			st, err = LoadPPOCheckpoint(dir)
		})
		if err != nil {
			return
		}
		if st.Round < 0 || st.Round > MaxPPORounds || len(st.History) != st.Round || st.Version != PPOCheckpointVersion {
			t.Fatalf("accepted version %d, round %d with %d history entries", st.Version, st.Round, len(st.History))
		}
	})
}
