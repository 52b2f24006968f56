package rollback

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/tensor"
)

func TestStateSize(t *testing.T) {
	s := mixedState(t)
	got, err := s.Size()
	noErr(t, err)
	meta, err := json.Marshal(s.Meta)
	noErr(t, err)
	// 5·4 + 4·8 + 6·2 + 8 + 2·8 + 3·1 + 0 + 6·8 element bytes.
	want := int64(20+32+12+8+16+3+0+48) + int64(len(meta))
	check(t, got == want, "Size = %d, want %d", got, want)

	s.Meta.Extra["bad"] = json.RawMessage(`{not json`)
	_, err = s.Size()
	check(t, err != nil, "Size accepted an invalid json.RawMessage")
}

func TestStateCloneIsDeep(t *testing.T) {
	s := mixedState(t)
	c := s.Clone()
	check(t, sameTensors(s.Tensors, c.Tensors) == "", "clone differs: %s", sameTensors(s.Tensors, c.Tensors))
	check(t, reflect.DeepEqual(s.Meta, c.Meta), "clone meta %+v differs from %+v", c.Meta, s.Meta)
	check(t, c.Tensors["model/strided"].IsContiguous(), "Clone kept a strided view")

	fill(s.Tensors["model/w.f64"], 42)
	s.Meta.RNG[0] = 99
	s.Meta.Slots["r0c1"][0] = '['
	s.Meta.Extra["new"] = json.RawMessage(`1`)
	check(t, testdevice.F64(t, c.Tensors["model/w.f64"])[0] != 42, "clone shares tensor storage")
	check(t, c.Tensors["model/w.f64"].Device() == testdevice.Device(t), "clone on %v", c.Tensors["model/w.f64"].Device())
	check(t, c.Meta.RNG[0] == 0, "clone shares the RNG slice")
	check(t, c.Meta.Slots["r0c1"][0] == '{', "clone shares slot documents")
	check(t, len(c.Meta.Extra) == 1, "clone shares the Extra map")
}

func TestStatePutSub(t *testing.T) {
	var s State
	a, b := tensor.Scalar(tensor.F32, 1), tensor.Scalar(tensor.F32, 2)
	s.Put(PrefixModel, map[string]*tensor.Tensor{"0.weight": a})
	s.Put(PrefixOptim, map[string]*tensor.Tensor{"lr": b})
	m := s.Sub(PrefixModel)
	check(t, len(m) == 1 && m["0.weight"] == a, "Sub(model) = %v", m)
	o := s.Sub(PrefixOptim)
	check(t, len(o) == 1 && o["lr"] == b, "Sub(optim) = %v", o)
	check(t, len(s.Sub("none/")) == 0, "Sub of an absent prefix is not empty")
}

func TestStateSlots(t *testing.T) {
	cks := map[string]kasmina.SlotCheckpoint{
		"r0c0": {Extra: []byte(`{"schema_version":1,"has_seed":true}`), Weights: map[string]*tensor.Tensor{
			"seed.0.weight": testdevice.To(t, tensor.FromSlice([]float32{1, 2}, 2)),
			"seed.0.bias":   testdevice.To(t, tensor.FromSlice([]float32{3}, 1)),
		}},
		"r0c1": {Extra: []byte(`{"schema_version":1,"has_seed":false}`), Weights: map[string]*tensor.Tensor{}},
	}
	var s State
	noErr(t, s.SetSlots(cks))
	check(t, len(s.Tensors) == 2 && s.Tensors["slots/r0c0/seed.0.bias"] != nil, "slot tensors %v", names(s.Tensors))
	back, err := s.SlotCheckpoints()
	noErr(t, err)
	check(t, len(back) == 2, "got %d slots back", len(back))
	for id, ck := range cks {
		check(t, string(back[id].Extra) == string(ck.Extra), "slot %s Extra %s", id, back[id].Extra)
		check(t, sameTensors(back[id].Weights, ck.Weights) == "", "slot %s weights: %s", id, sameTensors(back[id].Weights, ck.Weights))
	}

	// SetSlots replaces every earlier slot tensor.
	noErr(t, s.SetSlots(map[string]kasmina.SlotCheckpoint{"r1c0": {Extra: []byte(`{}`)}}))
	check(t, len(s.Tensors) == 0 && len(s.Meta.Slots) == 1, "old slots survived: %v %v", names(s.Tensors), s.Meta.Slots)

	check(t, s.SetSlots(map[string]kasmina.SlotCheckpoint{"a/b": {Extra: []byte(`{}`)}}) != nil, "slot id with '/' accepted")
	check(t, s.SetSlots(map[string]kasmina.SlotCheckpoint{"r0c0": {Extra: []byte(`{`)}}) != nil, "invalid Extra accepted")

	s.Tensors["slots/ghost/w"] = tensor.Scalar(tensor.F32, 0)
	_, err = s.SlotCheckpoints()
	check(t, err != nil, "a tensor of an unknown slot was accepted")
}
