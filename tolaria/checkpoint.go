package tolaria

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/rollback"
)

// StatefulController is a Controller whose state (trackers, penalties,
// rotation) a checkpoint should carry, so that a resumed run decides
// exactly as an uninterrupted one would.
type StatefulController interface {
	Controller
	MarshalState() ([]byte, error)
	UnmarshalState([]byte) error
}

// Checkpoint tensor prefixes inside rollback.PrefixOptim.
const (
	optimHostPrefix = rollback.PrefixOptim + "host/"
	optimSlotPrefix = rollback.PrefixOptim + "slot/"
)

// trainerMeta is the trainer's own state in a checkpoint.
type trainerMeta struct {
	Germinated, Fossilized, Pruned int
	CaptureFallbacks               int
	LastSeeds                      map[string]leyline.SeedStage
	Conservative                   bool
	// EpochsFailed is tolaria.epochs.failed; a failure rollback keeps
	// the current count, only Resume loads it.
	EpochsFailed int `json:",omitempty"`
	// AggRNG is the PCGrad order generator's state (rand.PCG binary).
	AggRNG []byte `json:",omitempty"`
	// OneBased tells that the State's Meta.Epoch is the epoch's 1-based
	// number, as in the checkpoint's name; states written before it hold
	// the epoch's 0-based index there.
	OneBased bool `json:",omitempty"`
	// History holds the summary's epoch reports (see history.go).
	History []epochRecord `json:",omitempty"`
}

// State captures everything needed to continue training after epoch (the
// epoch's index, as RunEpoch's e; the State's Meta.Epoch holds its 1-based
// number, epoch+1, the number RunEpoch gives its checkpoint): the host's
// parameters and buffers, every slot (seed weights and
// lifecycle state), every optimizer's state, the fp16 GradScaler's scale
// and growth tracker, the trainer's counters, epoch reports and PCGrad
// generator and, for a StatefulController, the controller's state.
func (t *Trainer) State(epoch int) (rollback.State, error) {
	var st rollback.State
	st.SetModule(t.model.Host())
	cks, err := t.model.SaveSlots()
	if err != nil {
		return st, err
	}
	if err := st.SetSlots(cks); err != nil {
		return st, err
	}
	st.Put(optimHostPrefix, t.opt.host.StateDict())
	for _, id := range t.opt.slotIDs() {
		st.Put(optimSlotPrefix+id+"/", t.opt.seeds[id].sgd.StateDict())
	}
	if sc := t.prec.scaler; sc != nil {
		st.Put(scalerPrefix, sc.StateDict())
	}
	if err := stateToHost(&st); err != nil {
		return st, err
	}
	st.Meta.Epoch = epoch + 1
	st.Meta.GlobalStep = int64(t.step.globalStep)
	rng, err := t.agg.rngState()
	if err != nil {
		return st, err
	}
	tm, err := json.Marshal(trainerMeta{
		Germinated: t.summary.Germinated, Fossilized: t.summary.Fossilized, Pruned: t.summary.Pruned,
		CaptureFallbacks: t.summary.CaptureFallbacks, LastSeeds: t.lastSeeds,
		Conservative: t.deadlines.Conservative(), AggRNG: rng, EpochsFailed: t.failed,
		OneBased: true, History: t.historyRecords(),
	})
	if err != nil {
		return st, err
	}
	st.Meta.Extra = map[string]json.RawMessage{"trainer": tm}
	if sc, ok := t.o.Controller.(StatefulController); ok {
		cs, err := sc.MarshalState()
		if err != nil {
			return st, fmt.Errorf("controller state: %w", err)
		}
		st.Meta.Extra["controller"] = json.RawMessage(cs)
	}
	return st, nil
}

// stateToHost replaces every tensor of st that lives on a device with a
// host copy, all of them gathered and copied at once (nn.HostCopies: one
// host sync per device and dtype), so that a State is always host memory:
// checkpoints are written from it and the fast rollback tier keeps it,
// whatever the model's device.
func stateToHost(st *rollback.State) error {
	var names []string
	var ts []*tensor.Tensor
	for name, x := range st.Tensors {
		if x != nil && !x.Device().IsCPU() {
			names, ts = append(names, name), append(ts, x)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	host, err := nn.HostCopies(ts)
	if err != nil {
		return fmt.Errorf("state to the host: %w", err)
	}
	for i, name := range names {
		st.Tensors[name] = host[i]
	}
	return nil
}

// stateOnHost returns st with its tensors readable on the host: st
// itself when they all are (every State a Trainer makes is host memory),
// else a copy (a new Tensors map; st is left as it is) whose device
// tensors were gathered and copied at once (stateToHost: one host sync
// per device and dtype). ResumeFrom and LoadState take a State a caller
// may have put on a device; what they check and load must not read a
// device tensor on the host.
func stateOnHost(st rollback.State) (rollback.State, error) {
	onDevice := false
	for _, x := range st.Tensors {
		onDevice = onDevice || (x != nil && !x.Device().IsCPU())
	}
	if !onDevice {
		return st, nil
	}
	out := st
	out.Tensors = maps.Clone(st.Tensors)
	if err := stateToHost(&out); err != nil {
		return st, err
	}
	return out, nil
}

// stateToDevice returns st with its host's and optimizers' tensors copied
// to dev (host-to-device copies; st itself is left as it is): what the
// model's and optimizers' state dicts load, on their device. The slots'
// weights stay on the host: kasmina builds each seed on the host, loads
// it and moves it to the slot's device. On the CPU st is returned as is.
func stateToDevice(st rollback.State, dev tensor.Device) (rollback.State, error) {
	if dev.IsCPU() {
		return st, nil
	}
	out := st
	out.Tensors = make(map[string]*tensor.Tensor, len(st.Tensors))
	for name, x := range st.Tensors {
		if x != nil && x.Device() != dev && !strings.HasPrefix(name, rollback.PrefixSlots) {
			d, err := x.ToDevice(dev)
			if err != nil {
				return st, fmt.Errorf("state tensor %s to %v: %w", name, dev, err)
			}
			x = d
		}
		out.Tensors[name] = x
	}
	return out, nil
}

// Resume loads the latest intact checkpoint of TrainerOptions.Checkpoints
// and makes Fit continue with the epoch after it. It returns that epoch's
// index, which is also the number of epochs done (the checkpoint's
// number: ckpt-epoch-N is the state after epochs 1..N).
//
// Without a checkpoint yet it returns rollback.ErrNoCheckpoint (check
// with errors.Is) and changes nothing. When the latest checkpoint (or the
// WAL) is corrupt, Resume falls back to the newest older one that
// verifies (rollback.Store.LatestIntact) and sends a warning
// CHECKPOINT_LOADED event naming both; when none does it returns the
// *rollback.CorruptError before anything is loaded. Callers that must
// see the fallback themselves (esper train prints it) call LatestIntact
// and ResumeFrom.
func (t *Trainer) Resume() (next int, err error) {
	if t.o.Checkpoints == nil {
		return 0, fmt.Errorf("%w: Resume needs Checkpoints", ErrOptions)
	}
	in, err := t.o.Checkpoints.LatestIntact()
	if err != nil {
		return 0, err
	}
	if err := CheckIntact(in); err != nil {
		return 0, err
	}
	if next, err = t.ResumeFrom(in.State); err != nil {
		return 0, fmt.Errorf("tolaria: resume from %s: %w", filepath.Base(in.Path), err)
	}
	if len(in.Skipped) > 0 && t.o.Sink != nil {
		ev := leyline.NewEvent(leyline.EventCheckpointLoaded, &leyline.CheckpointLoadedPayload{Path: in.Path, Source: "tolaria"})
		ev.Severity, ev.Epoch = leyline.SeverityWarning, leyline.IntPtr(next)
		ev.Message = FallbackMessage(in)
		t.o.Sink.Emit(ev)
	}
	return next, nil
}

// FallbackMessage is the one line that says a resume skipped corrupt
// checkpoints: which, why, and which checkpoint it used instead.
func FallbackMessage(in rollback.Intact) string {
	var b strings.Builder
	for i, ce := range in.Skipped {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s is corrupt (%s)", filepath.Base(ce.File), ce.Reason)
	}
	fmt.Fprintf(&b, ": resuming from the previous intact checkpoint, %s", filepath.Base(in.Path))
	return b.String()
}

// ResumeFrom loads st, a checkpoint of this run read by the caller (from
// rollback.Store.LatestIntact, say), and makes Fit continue with the epoch
// after it: it is Resume without the reading. It returns the next epoch's
// index (the number of epochs done). The summary's epoch reports and
// counters become the checkpoint's, so that Summary covers the whole run
// (for a run resumed after its last epoch, Summary is its final result).
//
// A checkpoint whose tensors hold NaN or ±Inf (written by a diverged run)
// is refused. st's tensors may live on a device: they are checked through
// one gathered copy per device and dtype (host syncs of that device).
// With a governor, the loaded state becomes its snapshot and its loss
// history starts over.
func (t *Trainer) ResumeFrom(st rollback.State) (next int, err error) {
	last, err := stateEpoch(st)
	if err != nil {
		return 0, err
	}
	if st, err = stateOnHost(st); err != nil {
		return 0, err
	}
	if err := checkFinite(st); err != nil {
		return 0, err
	}
	if err := t.LoadState(st); err != nil {
		return 0, err
	}
	if t.governor != nil {
		// Taken at NewTrainer, the snapshot holds the untrained model.
		if err := t.governor.Reset(); err != nil {
			return 0, err
		}
	}
	// Meta.Epoch is the number in the checkpoint's name, in either
	// numbering (see CheckIntact).
	t.start, t.lastGood, t.rollbacksInRow = last+1, st.Meta.Epoch, 0
	return t.start, nil
}

// CheckIntact checks that the checkpoint LatestIntact found is one a
// Trainer wrote for its epoch: its metadata's epoch is the one its name
// and its WAL record give (both the numbering from 1 and the older one
// from 0 write the same number in both places), and every number of its
// trainer state is in range (see EpochsDone). A resume from a store
// should call it before ResumeFrom; Resume does.
func CheckIntact(in rollback.Intact) error {
	if in.State.Meta.Epoch != in.Epoch {
		return fmt.Errorf("tolaria: %s: checkpoint field epoch = %d, but the checkpoint is of epoch %d", filepath.Base(in.Path), in.State.Meta.Epoch, in.Epoch)
	}
	if _, err := stateEpoch(in.State); err != nil {
		return fmt.Errorf("tolaria: %s: %w", filepath.Base(in.Path), err)
	}
	return nil
}

// EpochsDone returns the number of epochs a State (a checkpoint of a
// Trainer) was taken after: its epoch's 1-based number, the index of the
// epoch a resumed run starts with. A State whose epoch, global step,
// counters or epoch reports are out of the range a trainer writes (an
// epoch beyond MaxEpochs, a negative count, an accuracy above 100) is an
// error naming the field; so it is for ResumeFrom and LoadState.
func EpochsDone(st rollback.State) (int, error) {
	last, err := stateEpoch(st)
	return last + 1, err
}

// stateEpoch returns the index of the epoch st was taken after (see
// trainerMeta.OneBased), after checking every number of its trainer
// state.
func stateEpoch(st rollback.State) (int, error) {
	_, last, err := decodeTrainerMeta(st)
	return last, err
}

// LoadState restores a State made by State: slots first (so the seeds
// exist), then the host, then the optimizers, the GradScaler, counters,
// epoch reports and controller. A checkpoint of an fp16 run loads into a trainer
// without fp16 (the scaler state is ignored); an fp16 trainer refuses a
// checkpoint without scaler state, since its first steps would otherwise
// run at the initial scale and diverge from the saved run. st's tensors
// may live on any device (State's are host memory): they are copied to
// the trainer's, through the host.
func (t *Trainer) LoadState(st rollback.State) error { return t.loadState(st, false) }

// loadState is LoadState; a failure rollback (keepRun set) keeps the
// current conservative mode and failed-epoch count, which describe the
// run rather than the snapshot. The seeds, the lifecycle counters and
// everything else revert with the snapshot.
func (t *Trainer) loadState(st rollback.State, keepRun bool) error {
	st, err := stateOnHost(st)
	if err != nil {
		return err
	}
	if st, err = stateToDevice(st, t.dev); err != nil {
		return err
	}
	cks, err := st.SlotCheckpoints()
	if err != nil {
		return err
	}
	tm, _, err := decodeTrainerMeta(st)
	if err != nil {
		return err
	}
	scalerState := st.Sub(scalerPrefix)
	if t.prec.scaler != nil && len(scalerState) == 0 {
		return fmt.Errorf("checkpoint has no GradScaler state for an fp16 run")
	}
	if err := t.model.LoadSlots(cks); err != nil {
		return err
	}
	if err := st.ApplyModule(t.model.Host()); err != nil {
		return err
	}
	if err := t.opt.sync(t.model); err != nil {
		return err
	}
	if err := t.opt.host.LoadStateDict(st.Sub(optimHostPrefix)); err != nil {
		return fmt.Errorf("host optimizer: %w", err)
	}
	for _, id := range t.opt.slotIDs() {
		sd := st.Sub(optimSlotPrefix + id + "/")
		if len(sd) == 0 {
			return fmt.Errorf("no optimizer state for the seed in slot %s", id)
		}
		if err := t.opt.seeds[id].sgd.LoadStateDict(sd); err != nil {
			return fmt.Errorf("optimizer of slot %s: %w", id, err)
		}
	}
	if t.prec.scaler != nil {
		if err := t.prec.scaler.LoadStateDict(scalerState); err != nil {
			return fmt.Errorf("grad scaler: %w", err)
		}
	}
	if len(tm.AggRNG) > 0 {
		if err := t.agg.setRNGState(tm.AggRNG); err != nil {
			return fmt.Errorf("PCGrad generator: %w", err)
		}
	}
	if raw, ok := st.Meta.Extra["controller"]; ok {
		sc, ok := t.o.Controller.(StatefulController)
		if !ok {
			return fmt.Errorf("checkpoint carries controller state but the controller (%T) cannot load it", t.o.Controller)
		}
		if err := sc.UnmarshalState(raw); err != nil {
			return fmt.Errorf("controller state: %w", err)
		}
	}
	t.step.globalStep = int(st.Meta.GlobalStep)
	t.summary.Germinated, t.summary.Fossilized, t.summary.Pruned = tm.Germinated, tm.Fossilized, tm.Pruned
	t.summary.CaptureFallbacks = tm.CaptureFallbacks
	t.lastSeeds = tm.LastSeeds
	if t.lastSeeds == nil {
		t.lastSeeds = map[string]leyline.SeedStage{}
	}
	if keepRun {
		return nil
	}
	t.restoreHistory(tm.History)
	t.failed = tm.EpochsFailed
	if tm.Conservative {
		t.deadlines.EnterConservative("resumed in conservative mode")
	} else {
		t.deadlines.ClearConservative()
	}
	return nil
}
