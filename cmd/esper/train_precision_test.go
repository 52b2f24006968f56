package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// TestAmpFlagParse: --amp takes off (the default), bf16 and fp16, is
// stored with the run's configuration, and any other value is one error
// line at start; --tf32 is not stored (its default depends on the
// device).
func TestAmpFlagParse(t *testing.T) {
	for _, v := range []string{"off", "bf16", "fp16"} {
		c, err := parseTrain([]string{"--amp", v}, io.Discard)
		require.NoError(t, err, v)
		require.Equal(t, v, c.amp)
		require.Equal(t, v, c.flags["amp"], "--amp is stored")
	}
	c, err := parseTrain(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "off", c.amp)
	require.False(t, c.tf32Set)
	_, stored := c.flags["tf32"]
	require.False(t, stored, "--tf32 is per invocation")
	c, err = parseTrain([]string{"--tf32=false"}, io.Discard)
	require.NoError(t, err)
	require.True(t, c.tf32Set)
	require.False(t, c.tf32)

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"train", "--amp", "fp32"}, `unknown --amp "fp32" (off, bf16 or fp16)`},
		{[]string{"train", "--amp", "BF16"}, `unknown --amp "BF16"`},
		{[]string{"train", "--amp", ""}, `unknown --amp ""`},
		{[]string{"train", "--tf32"}, "--tf32 on cpu: TF32 is a matmul mode of CUDA devices"},
		{[]string{"train", "--tf32", "--device", "sim"}, "--tf32 on sim:0"},
		{[]string{"train", "--tf32=maybe"}, "invalid boolean value"},
	} {
		var out, errb bytes.Buffer
		tc.args = append(tc.args, "--run-dir", t.TempDir())
		require.Equal(t, 1, run(tc.args, &out, &errb), "%v", tc.args)
		require.Contains(t, errb.String(), tc.msg, "%v", tc.args)
		first, _, _ := strings.Cut(errb.String(), "\n")
		require.Contains(t, first, tc.msg, "%v: the error is its first line", tc.args)
		require.Empty(t, out.String(), "%v: nothing ran", tc.args)
	}
}

// fakeCUDA is a backend standing for a CUDA device of a given compute
// capability (only DeviceDescriber is implemented: resolvePrecision
// calls nothing else).
type fakeCUDA struct {
	kernels.Backend
	major, minor int
	err          error
}

func (f fakeCUDA) Name() string       { return "cuda" }
func (f fakeCUDA) DeviceName() string { return "Fake GPU" }
func (f fakeCUDA) ComputeCapability() (int, int, error) {
	return f.major, f.minor, f.err
}

// TestResolvePrecision: --amp and --tf32 per device. TF32 is on by
// default on a CUDA device of compute capability ≥ 8.0, reported in one
// note, and off below; asking for it where it does not exist is an error
// at start. fp16 runs on CUDA as bf16 does.
func TestResolvePrecision(t *testing.T) {
	cpu, err := device.Open("cpu")
	require.NoError(t, err)
	sim, err := device.Open("sim")
	require.NoError(t, err)
	h100, v100 := fakeCUDA{major: 9}, fakeCUDA{major: 7}
	for _, tc := range []struct {
		name          string
		dev           tensor.Device
		be            kernels.Backend
		amp           string
		tf32, tf32Set bool
		want          precision
		note, err     string
	}{
		{name: "cpu fp32", dev: tensor.CPU, be: cpu, amp: "off"},
		{name: "cpu bf16", dev: tensor.CPU, be: cpu, amp: "bf16", want: precision{amp: tolaria.AMPBF16}},
		{name: "sim fp16", dev: tensor.Sim(1), be: sim, amp: "fp16", want: precision{amp: tolaria.AMPFP16}},
		{name: "cpu --tf32=false", dev: tensor.CPU, be: cpu, amp: "off", tf32Set: true},
		{name: "cpu --tf32", dev: tensor.CPU, be: cpu, amp: "off", tf32: true, tf32Set: true, err: "--tf32 on cpu"},
		{name: "sim --tf32", dev: tensor.Sim(0), be: sim, amp: "bf16", tf32: true, tf32Set: true, err: "--tf32 on sim:0"},
		{name: "sm90 default", dev: tensor.CUDA(0), be: h100, amp: "off", want: precision{tf32: true},
			note: "TF32 on for F32 matmuls and convolutions on cuda:0 (Fake GPU, compute capability 9.0), the default from compute capability 8.0 (--tf32=false turns it off)"},
		{name: "sm90 bf16 --tf32", dev: tensor.CUDA(1), be: h100, amp: "bf16", tf32: true, tf32Set: true, want: precision{amp: tolaria.AMPBF16, tf32: true}, note: "TF32 on for F32 matmuls and convolutions on cuda:1 (Fake GPU, compute capability 9.0) (--tf32)"},
		{name: "sm90 --tf32=false", dev: tensor.CUDA(0), be: h100, amp: "off", tf32Set: true, note: "TF32 off on cuda:0 (Fake GPU, compute capability 9.0) (--tf32=false): F32 matmuls and convolutions in fp32"},
		{name: "sm70 default", dev: tensor.CUDA(0), be: v100, amp: "off", note: "TF32 off on cuda:0 (Fake GPU, compute capability 7.0), which has none: F32 matmuls and convolutions in fp32"},
		{name: "sm70 --tf32", dev: tensor.CUDA(0), be: v100, amp: "off", tf32: true, tf32Set: true, err: "--tf32 on cuda:0 (Fake GPU, compute capability 7.0): TF32 needs compute capability 8.0 or newer"},
		{name: "sm90 fp16", dev: tensor.CUDA(0), be: h100, amp: "fp16", want: precision{amp: tolaria.AMPFP16, tf32: true},
			note: "TF32 on for F32 matmuls and convolutions on cuda:0 (Fake GPU, compute capability 9.0), the default from compute capability 8.0 (--tf32=false turns it off)"},
		{name: "cuda without a describer", dev: tensor.CUDA(0), be: cpu, amp: "off", err: "cannot say its compute capability"},
		{name: "capability unreadable", dev: tensor.CUDA(0), be: fakeCUDA{err: errors.New("driver says no")}, amp: "off", err: "driver says no"},
		{name: "bad amp", dev: tensor.CPU, be: cpu, amp: "fp8", err: `unknown --amp "fp8"`},
	} {
		p, err := resolvePrecision(tc.dev, tc.be, tc.amp, tc.tf32, tc.tf32Set)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.name)
			require.NotContains(t, err.Error(), "\n", tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.note, p.note, tc.name)
		p.note = ""
		require.Equal(t, tc.want, p, tc.name)
	}
}

// TestTrainAmpBF16OnCPUAndSim: a short esper train --amp bf16 prints the
// same table on cpu and sim (bitwise: the same kernels), its epochs'
// losses are the same to the last bit on both and not those of an fp32
// run (bf16 autocast is on: telemetry says so), and --device sim adds its
// host-sync line.
func TestTrainAmpBF16OnCPUAndSim(t *testing.T) {
	seconds := regexp.MustCompile(`[0-9.]+\s*$`)
	train := func(dev, amp string) (table []string, losses []float64) {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		code := run([]string{"train", "--train-size", "256", "--test-size", "128", "--epochs", "3", "--batch", "64",
			"--base-channels", "2", "--quiet", "--baseline=false", "--device", dev, "--amp", amp, "--run-dir", dir}, &out, &errb)
		require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
		for _, l := range strings.Split(out.String(), "\n") {
			if !strings.HasPrefix(l, "run directory:") && !strings.HasPrefix(l, "host syncs on ") {
				table = append(table, seconds.ReplaceAllString(l, ""))
			}
		}
		runs, err := filepath.Glob(filepath.Join(dir, "telemetry_*", "events.jsonl"))
		require.NoError(t, err)
		require.Len(t, runs, 1)
		return table, epochLosses(t, runs[0], amp != "off")
	}
	cpuTable, cpuLosses := train("cpu", "bf16")
	simTable, simLosses := train("sim", "bf16")
	require.Equal(t, cpuTable, simTable)
	require.Equal(t, cpuLosses, simLosses, "bf16 on sim computes the CPU's losses bit for bit")
	_, fp32Losses := train("cpu", "off")
	require.NotEqual(t, fp32Losses, cpuLosses, "--amp bf16 changes the arithmetic")
}

// epochLosses reads a run's events.jsonl: the train and validation
// losses of each EPOCH_COMPLETED, checking that every
// tolaria.train.amp_enabled metric says amp.
func epochLosses(t *testing.T, path string, amp bool) []float64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var losses []float64
	seen := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var ev struct {
			Type string          `json:"event_type"`
			Data json.RawMessage `json:"data"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		switch ev.Type {
		case "EPOCH_COMPLETED":
			var d struct {
				Train float64 `json:"train_loss"`
				Val   float64 `json:"val_loss"`
			}
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			losses = append(losses, d.Train, d.Val)
		case "METRICS":
			var d struct {
				Metrics []struct {
					Name  string  `json:"name"`
					Value float64 `json:"value"`
				} `json:"metrics"`
			}
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			for _, m := range d.Metrics {
				if m.Name == leyline.MetricTolariaTrainAMPEnabled {
					seen = true
					require.Equal(t, amp, m.Value == 1, "%s in %s", m.Name, path)
				}
			}
		}
	}
	require.NoError(t, sc.Err())
	require.True(t, seen, "no %s metric in %s", leyline.MetricTolariaTrainAMPEnabled, path)
	require.NotEmpty(t, losses)
	return losses
}
