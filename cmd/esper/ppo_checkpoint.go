package main

// The checkpoint of `esper ppo`: what a resumed run needs to continue bit
// for bit, and how it is written so that kill -9 never leaves a torn one.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/esper-go/esper/internal/atomicfile"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/simic"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor/safetensors"
)

// Checkpoint files inside --checkpoint.
const (
	ppoPolicyFile    = "policy.safetensors"
	ppoOptimizerFile = "optimizer.safetensors"
	ppoStateFile     = "state.json"
	// ppoStagingDir is where a checkpoint is written before it is moved
	// into place (see savePPO).
	ppoStagingDir = ".next"
)

// ppoCheckpointFiles are a checkpoint's files in the order they are moved
// into place: the state file, which commits them, last.
var ppoCheckpointFiles = []string{ppoPolicyFile, ppoOptimizerFile, ppoStateFile}

// ppoStateVersion is the version of the state file. Version 2 added the
// trainer's generator and skip count and the environments' episodes;
// a version-1 state (no version field) cannot be continued exactly.
const ppoStateVersion = 2

// ppoState is the checkpoint's JSON part: with the policy's parameters and
// the optimizer's state it is everything a run carries from one round to
// the next. The environments stand at the start of an episode between
// rounds (simic.TrainerOptions.EpisodicRollouts), so each needs only its
// episode's number (simic.EsperEnvOptions.FirstEpisode); the data's
// order is a function of the epoch.
type ppoState struct {
	Version int `json:"version"`
	Round   int `json:"round"` // rounds completed
	simic.TrainerState
	// Episodes are the environments' episodes, the ones the next round
	// starts with.
	Episodes []int      `json:"episodes"`
	History  []ppoRound `json:"history"`
}

// ppoSaveHook, when set by a test, runs after each step of savePPO; an
// error stops the save there, as kill -9 would.
var ppoSaveHook func(step string) error

func ppoSaveStep(step string) error {
	if ppoSaveHook == nil {
		return nil
	}
	return ppoSaveHook(step)
}

// savePPO writes the checkpoint of the rounds in st. Its three files are
// written (each atomically) into dir/.next, where the state file, written
// last, commits them; then they are renamed into dir, the state file
// last. Whenever the process dies, dir holds a whole checkpoint, either
// the previous one or, once .next/state.json exists, the new one after
// recoverPPOCheckpoint has finished the move.
func savePPO(dir string, net *tamiyo.Policy, slots leyline.SlotConfig, st *ppoState, tr *simic.Trainer[simic.TamiyoObs], envs []*simic.EsperEnv) error {
	if err := recoverPPOCheckpoint(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	ts, err := tr.State()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	st.Version, st.TrainerState, st.Episodes = ppoStateVersion, ts, make([]int, len(envs))
	for i, e := range envs {
		st.Episodes[i] = e.Episode()
	}
	js, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return fmt.Errorf("checkpoint state: %w", err)
	}
	next := filepath.Join(dir, ppoStagingDir)
	if err := os.MkdirAll(next, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := tamiyo.SavePolicy(filepath.Join(next, ppoPolicyFile), net, slots); err != nil {
		return err
	}
	if err := ppoSaveStep("staged " + ppoPolicyFile); err != nil {
		return err
	}
	sd := tr.PPO().Optimizer().StateDict()
	err = atomicfile.Write(filepath.Join(next, ppoOptimizerFile), func(w io.Writer) error {
		return safetensors.Encode(w, sd, nil)
	}, atomicfile.Options{})
	if err != nil {
		return fmt.Errorf("checkpoint optimizer: %w", err)
	}
	if err := ppoSaveStep("staged " + ppoOptimizerFile); err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(next, ppoStateFile), js); err != nil {
		return fmt.Errorf("checkpoint state: %w", err)
	}
	if err := ppoSaveStep("staged " + ppoStateFile); err != nil {
		return err
	}
	if err := movePPOCheckpoint(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// movePPOCheckpoint moves the committed checkpoint in dir/.next into dir,
// the files still there, in order, and removes .next.
func movePPOCheckpoint(dir string) error {
	next := filepath.Join(dir, ppoStagingDir)
	for _, f := range ppoCheckpointFiles {
		err := os.Rename(filepath.Join(next, f), filepath.Join(dir, f))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // moved before an interruption
		case err != nil:
			return err
		}
		if err := atomicfile.SyncDir(dir); err != nil {
			return err
		}
		if err := ppoSaveStep("moved " + f); err != nil {
			return err
		}
	}
	return os.RemoveAll(next)
}

// recoverPPOCheckpoint leaves dir holding one whole checkpoint after an
// interrupted savePPO: it finishes moving a committed one (.next with its
// state file) and drops an uncommitted one.
func recoverPPOCheckpoint(dir string) error {
	next := filepath.Join(dir, ppoStagingDir)
	_, err := os.Stat(filepath.Join(next, ppoStateFile))
	switch {
	case err == nil:
		return movePPOCheckpoint(dir)
	case errors.Is(err, fs.ErrNotExist):
		return os.RemoveAll(next)
	}
	return err
}

// loadPPOState reads the checkpoint's state, first finishing or dropping
// an interrupted save.
func loadPPOState(dir string) (ppoState, error) {
	var st ppoState
	if err := recoverPPOCheckpoint(dir); err != nil {
		return st, fmt.Errorf("--resume: %w", err)
	}
	js, err := os.ReadFile(filepath.Join(dir, ppoStateFile))
	if err != nil {
		return st, fmt.Errorf("--resume: %w", err)
	}
	if err := json.Unmarshal(js, &st); err != nil {
		return st, fmt.Errorf("--resume: %s: %w", ppoStateFile, err)
	}
	if st.Version != ppoStateVersion {
		return st, fmt.Errorf("--resume: %s is of version %d, not %d: it was written by an esper ppo that did not save the sampler's and the environments' state, so its run cannot be continued exactly (start it again without --resume)",
			filepath.Join(dir, ppoStateFile), st.Version, ppoStateVersion)
	}
	return st, nil
}

// restorePPO loads the checkpoint's optimizer state and st's trainer
// state into tr.
func restorePPO(dir string, st ppoState, tr *simic.Trainer[simic.TamiyoObs]) error {
	f, err := safetensors.ReadFile(filepath.Join(dir, ppoOptimizerFile))
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	if err := tr.PPO().Optimizer().LoadStateDict(f.Tensors); err != nil {
		return fmt.Errorf("--resume: optimizer: %w", err)
	}
	if err := tr.LoadState(st.TrainerState); err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	return nil
}
