package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/simic"
)

// The browser test drives Debian's chromium (headless) with chromedp: it
// opens the --ui dashboard of a real esper train run (the demo: the
// impaired host, the heuristic germinating and fossilizing a seed, then
// the host alone) while the run goes on, and checks what a person would
// look at; then `esper ui` on the finished runs, one of them corrupted.
// Screenshots go to $ESPER_UI_SCREENSHOTS, by default
// $TMPDIR/esper-ui-screenshots; with ESPER_UI_DOCS=1 the final one is also
// copied to docs/dashboard.png (the README's).

// chromiumPath finds a Chromium, or skips the test in one line.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ESPER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("browser test skipped: no Chromium on PATH (make chromium-deps installs Debian's chromium; ESPER_CHROMIUM names another)")
	return ""
}

// writeRunEvents writes the events a function emits into a new run
// directory, through a hub and its directory backend as a run does.
func writeRunEvents(t *testing.T, emit func(hub *nissa.Hub)) string {
	t.Helper()
	hub := nissa.NewHub(nissa.HubOptions{})
	dirb, err := nissa.NewDirBackend(t.TempDir(), nissa.DirOptions{})
	require.NoError(t, err)
	require.NoError(t, hub.AddBackend(dirb))
	emit(hub)
	require.NoError(t, hub.Close(10*time.Second))
	return dirb.Dir()
}

// writeLifecycleRun writes a training run in which slot r0c0's seed is
// fossilized and slot r0c1's is pruned, embargoed, reset and replaced,
// with a rollback and a decision logged with its reason.
func writeLifecycleRun(t *testing.T) string {
	return writeRunEvents(t, func(hub *nissa.Hub) {
		seed := func(typ leyline.EventType, slot, id string, p leyline.Payload) {
			ev := leyline.NewEvent(typ, p)
			ev.SlotID, ev.SeedID = slot, id
			hub.Emit(ev)
		}
		gate := func(slot, id, g string, passed bool, msg string) {
			seed(leyline.EventSeedGateEvaluated, slot, id, &leyline.SeedGateEvaluatedPayload{SlotID: slot, Gate: g, Passed: passed, TargetStage: leyline.StageGerminated,
				ChecksPassed: []string{}, ChecksFailed: []string{}, Message: msg})
		}
		stage := func(slot, id string, from, to leyline.SeedStage, alpha float64) {
			seed(leyline.EventSeedStageChanged, slot, id, &leyline.SeedStageChangedPayload{SlotID: slot, From: from, To: to, Alpha: alpha})
		}
		epoch := func(e int) {
			loss := 2.3 - 0.05*float64(e)
			ev := leyline.NewEvent(leyline.EventEpochCompleted, &leyline.EpochCompletedPayload{InnerEpoch: e, ValAccuracy: 10 + float64(e), ValLoss: loss, TrainLoss: &loss})
			ev.Epoch = leyline.IntPtr(e)
			hub.Emit(ev)
		}
		epoch(1)
		gate("r0c0", "r0c0-a", "G0", true, "G0 passed")
		seed(leyline.EventSeedGerminated, "r0c0", "r0c0-a", &leyline.SeedGerminatedPayload{SlotID: "r0c0", BlueprintID: "conv_light", Params: 156})
		gate("r0c1", "r0c1-b", "G0", true, "G0 passed")
		seed(leyline.EventSeedGerminated, "r0c1", "r0c1-b", &leyline.SeedGerminatedPayload{SlotID: "r0c1", BlueprintID: "norm", Params: 40})
		epoch(2)
		stage("r0c0", "r0c0-a", leyline.StageGerminated, leyline.StageTraining, 0)
		stage("r0c1", "r0c1-b", leyline.StageGerminated, leyline.StageTraining, 0)
		epoch(3)
		stage("r0c1", "r0c1-b", leyline.StageTraining, leyline.StagePruned, 0)
		seed(leyline.EventSeedPruned, "r0c1", "r0c1-b", &leyline.SeedPrunedPayload{SlotID: "r0c1", Reason: "no improvement after 3 epochs", BlueprintID: "norm", Initiator: "policy"})
		cl := leyline.NewEvent(leyline.EventMorphologyCausalLog, &leyline.MorphologyCausalLogPayload{Epoch: 4, Op: "PRUNE", Success: true, SlotID: "r0c1", Reason: "Plateau detected (5 epochs)"})
		hub.Emit(cl)
		epoch(4)
		stage("r0c1", "r0c1-b", leyline.StagePruned, leyline.StageEmbargoed, 0)
		stage("r0c0", "r0c0-a", leyline.StageTraining, leyline.StageFossilized, 1)
		seed(leyline.EventSeedFossilized, "r0c0", "r0c0-a", &leyline.SeedFossilizedPayload{SlotID: "r0c0", BlueprintID: "conv_light", Improvement: 2, ParamsAdded: 156, Alpha: 1})
		epoch(5)
		hub.Emit(leyline.NewEvent(leyline.EventGovernorRollback, &leyline.GovernorRollbackPayload{Device: "cpu", Reason: "loss exploded", PanicReason: leyline.PanicReasonDivergence}))
		stage("r0c1", "r0c1-b", leyline.StageEmbargoed, leyline.StageResetting, 0)
		epoch(6)
		stage("r0c1", "r0c1-b", leyline.StageResetting, leyline.StageDormant, 0)
		gate("r0c1", "r0c1-x", "G0", false, "G0 failed: blueprint_id_present")
		gate("r0c1", "r0c1-c", "G0", true, "G0 passed")
		seed(leyline.EventSeedGerminated, "r0c1", "r0c1-c", &leyline.SeedGerminatedPayload{SlotID: "r0c1", BlueprintID: "conv_heavy", Params: 900})
		epoch(7)
	})
}

// writePPORun writes a PPO run of three rounds, as esper ppo emits them.
func writePPORun(t *testing.T) string {
	return writeRunEvents(t, func(hub *nissa.Hub) {
		for r := 1; r <= 3; r++ {
			ent := []float64{0.5, math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), 1}
			simic.PPORound{Round: r, Return: float64(r), KL: 1e-4, ExplainedVariance: 0.5, EnvEpochsPerSec: 40, Entropy: ent}.Emit(hub)
		}
	})
}

// evalInt evaluates a JavaScript expression giving a number.
func evalInt(t *testing.T, ctx context.Context, expr string) int {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](expr))
	require.NoError(t, err, expr)
	return int(v)
}

// waitTrue polls a JavaScript condition until it holds.
func waitTrue(t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		require.NoError(t, err, expr)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %s (%s)", what, expr)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// shoot saves a full-page screenshot as dir/name and returns its path.
func shoot(t *testing.T, ctx context.Context, dir, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, png, 0o644))
	return p
}

// The points of run r0's validation accuracy curve, as drawn.
const valAccPoints = `(() => { const p = document.querySelector('figure[data-chart="accuracy"] .series[data-run="r0"][data-series$="· val"]'); return p ? Number(p.dataset.points) : 0 })()`

func TestUIBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	shots := os.Getenv("ESPER_UI_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "esper-ui-screenshots")
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	t.Logf("screenshots in %s", shots)

	start := time.Now()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-dev-shm-usage", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	defer cancelCtx()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// The browser starts (and idles on a blank page) before the run, so
	// that the run is still young when the page opens.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))

	runDir := t.TempDir()
	var out, errOut syncBuffer
	done := make(chan struct{})
	var code int
	go func() {
		defer close(done)
		code = run([]string{"train", "--run-dir", runDir, "--ui", "127.0.0.1:0"}, &out, &errOut)
	}()
	url := waitURL(t, &out, done)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`article.card[data-run="r0"]`))))

	// The curves gain points while the run goes on, pushed live.
	waitTrue(t, ctx, "the first epochs", valAccPoints+` >= 2`, 30*time.Second)
	first := evalInt(t, ctx, valAccPoints)
	waitTrue(t, ctx, "the curve growing", fmt.Sprintf(`%s > %d`, valAccPoints, first), 30*time.Second)
	grown := evalInt(t, ctx, valAccPoints)
	select {
	case <-done:
		t.Fatalf("the run ended before the page could watch it grow (%d → %d points)", first, grown)
	default:
	}
	assert.Greater(t, evalInt(t, ctx, `esperDash.liveEvents`), 0, "no event came live")
	t.Logf("accuracy curve: %d then %d points while the run trained", first, grown)

	// The timeline shows the germinated seed, in its slot's lane.
	waitTrue(t, ctx, "a germinated seed on the timeline",
		`document.querySelector('figure.timeline[data-run="r0"] rect.seg[data-stage="GERMINATED"]') !== null`, 60*time.Second)
	shoot(t, ctx, shots, "live.png")

	<-done
	require.Equal(t, 0, code, "%s\n%s", out.String(), errOut.String())
	text := out.String()
	t.Logf("esper train --ui:\n%s", text)

	// The page ends as the run did: finished, the baseline beside it.
	waitTrue(t, ctx, "both runs finished",
		`document.querySelector('article.card[data-run="r0"]')?.dataset.state === "finished" && document.querySelector('article.card[data-run="r1"]')?.dataset.state === "finished"`,
		30*time.Second)
	epochs := evalInt(t, ctx, valAccPoints)
	assert.Equal(t, 45, epochs, "the accuracy curve has one point per epoch")

	// The seed table matches the run's final state: the trainer's last
	// epoch line ([slot:STAGE α=x.xx, ...]) and its summary counts.
	seedsRun, _, _ := strings.Cut(text, "\nbaseline:")
	lines := regexp.MustCompile(`(?m)^\s+epoch\s+45/45 .*$`).FindAllString(seedsRun, -1)
	require.NotEmpty(t, lines, "no last epoch line in the run's output")
	final := regexp.MustCompile(`(\w+):([A-Z]+) α=([0-9.]+)`).FindAllStringSubmatch(lines[len(lines)-1], -1)
	require.NotEmpty(t, final, "the demo ends with a seed in a slot: %s", lines[len(lines)-1])
	for _, m := range final {
		slot, stage, alpha := m[1], m[2], m[3]
		row := fmt.Sprintf(`[...document.querySelectorAll('table.seeds[data-run="r0"] tbody tr[data-slot="%s"]')].pop()`, slot)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`(() => { const r = %s; return r ? [r.dataset.stage, r.querySelector('td.alpha').textContent] : [] })()`, row)))
		require.NoError(t, err)
		require.Len(t, got, 2, "no row for slot %s in the seed table", slot)
		assert.Equal(t, stage, got[0], "slot %s's stage", slot)
		assert.Equal(t, alpha, got[1], "slot %s's alpha", slot)
	}
	summary := regexp.MustCompile(`(?m)^with seeds \(heuristic\)\s+\S+\s+\S+\s+\d+\s+(\d+)\s+(\d+)\s+(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, summary, "no summary row")
	count := func(sel string) int {
		return evalInt(t, ctx, fmt.Sprintf(`document.querySelectorAll('table.seeds[data-run="r0"] tbody tr%s').length`, sel))
	}
	germinated, _ := strconv.Atoi(summary[1])
	fossilized, _ := strconv.Atoi(summary[2])
	pruned, _ := strconv.Atoi(summary[3])
	assert.Equal(t, germinated, count(""), "seeds in the table vs germinated")
	assert.Equal(t, fossilized, count(`[data-outcome="fossilized"]`), "fossilized seeds")
	assert.Equal(t, pruned, count(`[data-outcome="pruned"]`), "pruned seeds")
	// The lifecycle shows on the curves and in the log.
	assert.Positive(t, evalInt(t, ctx, `document.querySelectorAll('figure[data-chart="accuracy"] .mark[data-kind="germinate"]').length`))
	assert.Positive(t, evalInt(t, ctx, `document.querySelectorAll('ol.log[data-run="r0"] li[data-kind="GERMINATE"]').length`))
	final1 := shoot(t, ctx, shots, "finished.png")
	if os.Getenv("ESPER_UI_DOCS") == "1" {
		b, err := os.ReadFile(final1)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "dashboard.png"), b, 0o644))
	}

	// esper ui shows the finished runs side by side, and what it can of
	// a corrupt events.jsonl with a warning.
	dirs, err := filepath.Glob(filepath.Join(runDir, "telemetry_*"))
	require.NoError(t, err)
	require.Len(t, dirs, 2)
	events := filepath.Join(dirs[1], "events.jsonl")
	data, err := os.ReadFile(events)
	require.NoError(t, err)
	rows := bytes.SplitAfter(data, []byte("\n"))
	rows[10] = []byte("{\"event_type\": not json\n")
	require.NoError(t, os.WriteFile(events, append(bytes.Join(rows, nil), `{"event_id":"torn`...), 0o644))
	uiCtx, stopUI := context.WithCancel(context.Background())
	var uiOut syncBuffer
	uiDone := make(chan error, 1)
	go func() { uiDone <- serveUI(uiCtx, []string{"--addr", "127.0.0.1:0", dirs[0], dirs[1]}, &uiOut, nil) }()
	url = waitURL(t, &uiOut, nil)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`article.card[data-run="r1"]`))))
	waitTrue(t, ctx, "both finished runs", valAccPoints+` === 45`, 10*time.Second)
	warns, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('article.card[data-run="r1"] .warnings').textContent`))
	require.NoError(t, err)
	assert.Contains(t, warns, "line 11")
	assert.Contains(t, warns, "torn line")
	shoot(t, ctx, shots, "esper-ui.png")
	stopUI()
	require.NoError(t, <-uiDone)

	// The paths the demo does not take: a seed pruned, its slot embargoed,
	// reset and seeded again, a rollback, a decision with its reason; and
	// a PPO run.
	uiCtx, stopUI = context.WithCancel(context.Background())
	uiOut = syncBuffer{}
	go func() {
		uiDone <- serveUI(uiCtx, []string{"--addr", "127.0.0.1:0", writeLifecycleRun(t), writePPORun(t)}, &uiOut, nil)
	}()
	url = waitURL(t, &uiOut, nil)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`article.card[data-run="r1"]`))))
	waitTrue(t, ctx, "the lifecycle run", `document.querySelectorAll('table.seeds[data-run="r0"] tbody tr').length === 3`, 10*time.Second)
	rowsOf := func(slot string) []string {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
			`[...document.querySelectorAll('table.seeds[data-run="r0"] tbody tr[data-slot="%s"]')].map(r => r.dataset.seed + ' ' + r.dataset.stage + ' ' + r.dataset.outcome)`, slot)))
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, []string{"r0c0-a FOSSILIZED fossilized"}, rowsOf("r0c0"))
	assert.Equal(t, []string{"r0c1-b PRUNED pruned", "r0c1-c GERMINATED "}, rowsOf("r0c1"), "the pruned seed, then the new one")
	for kind, want := range map[string]int{"germinate": 3, "fossilize": 1, "prune": 1, "rollback": 2 /* one per lane */} {
		assert.Equal(t, want, evalInt(t, ctx, fmt.Sprintf(`document.querySelectorAll('figure.timeline[data-run="r0"] .mark[data-kind="%s"]').length`, kind)), kind)
	}
	assert.Positive(t, evalInt(t, ctx, `document.querySelectorAll('figure.timeline[data-run="r0"] rect.seg[data-stage="EMBARGOED"]').length`))
	logText, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('ol.log[data-run="r0"]').textContent`))
	require.NoError(t, err)
	for _, want := range []string{"no improvement after 3 epochs (by the policy)", "governor_divergence", "Plateau detected (5 epochs)", "G0 failed: blueprint_id_present"} {
		assert.Contains(t, logText, want)
	}
	assert.Equal(t, 3, evalInt(t, ctx, `Number(document.querySelector('figure[data-chart="return"] .series[data-run="r1"]').dataset.points)`))
	assert.Equal(t, 2, evalInt(t, ctx, `document.querySelectorAll('figure[data-chart="entropy"] path.series').length`), "the heads with an entropy")
	shoot(t, ctx, shots, "lifecycle-and-ppo.png")
	stopUI()
	require.NoError(t, <-uiDone)
	t.Logf("browser test took %v", time.Since(start).Round(time.Millisecond))
}
