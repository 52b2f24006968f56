package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/internal/fuzzcheck"
)

// FuzzPPOState feeds esper ppo's checkpoint reader an arbitrary
// state.json (seeded with the one a real one-round run writes): it is
// refused with an error or accepted within its documented ranges, never a
// panic, and read with allocations in proportion to the file.
func FuzzPPOState(f *testing.F) {
	dir := f.TempDir()
	ck := filepath.Join(dir, "ck")
	var out, errb bytes.Buffer
	if code := run(tinyPPO(dir, "--rounds", "1", "--checkpoint", ck), &out, &errb); code != 0 {
		f.Fatalf("seed run: %s", errb.String())
	}
	good, err := os.ReadFile(filepath.Join(ck, ppoStateFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"version":2,"round":-1000000}`))
	f.Add([]byte(`{"version":2,"round":1,"history":[{"round":1,"return":1e308}]}`))
	fdir := filepath.Join(dir, "fuzz")
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		if err := os.WriteFile(filepath.Join(fdir, ppoStateFile), js, 0o644); err != nil {
			t.Fatal(err)
		}
		var st ppoState
		var err error
		fuzzcheck.Budget(t, "loadPPOState", len(js), fuzzcheck.Linear(len(js), 32, 256<<10), func() {
			st, err = loadPPOState(fdir)
		})
		if err != nil {
			return
		}
		if st.Round < 0 || st.Round > maxPPORounds || len(st.History) != st.Round {
			t.Fatalf("accepted round %d with %d history entries", st.Round, len(st.History))
		}
	})
}
