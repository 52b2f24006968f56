package main

import (
	"io"
	"strconv"
	"strings"

	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/nissa/dashboard"
)

// startPPOUI serves the live dashboard of esper ppo --ui, showing the run
// whose telemetry goes through hub (the run directory's events.jsonl
// first, on a resume), and returns what stops it: the hub is closed
// first (a closed hub's Close is a no-op later), so that the page sees
// the run end before the server goes. Without --ui it does nothing.
func startPPOUI(c ppoConfig, hub *nissa.Hub, dirb *nissa.DirBackend, stdout io.Writer) (stop func(), err error) {
	ui, err := startUI(c.ui, stdout)
	if err != nil || ui == nil {
		return func() {}, err
	}
	info := dashboard.RunInfo{Label: "PPO (" + c.reward + " reward)", Kind: "ppo", Dir: dirb.Dir(), Total: c.rounds, Config: ppoFlags(c)}
	if err := ui.add(hub, info, dirb.Path()); err != nil {
		ui.close()
		return func() {}, err
	}
	return func() {
		_ = hub.Close(hubCloseWait)
		ui.close()
	}, nil
}

// ppoFlags is the run's configuration as the dashboard shows it.
func ppoFlags(c ppoConfig) map[string]string {
	itoa := strconv.Itoa
	devs := make([]string, len(c.devs))
	for i, d := range c.devs {
		devs[i] = d.String()
	}
	return map[string]string{
		"rounds": itoa(c.rounds), "envs": itoa(c.envs), "max-epochs": itoa(c.maxEpochs), "blocks": itoa(c.blocks),
		"base-channels": itoa(c.baseChannels), "train-size": itoa(c.trainSize), "val-size": itoa(c.valSize),
		"batch": itoa(c.batch), "hidden": itoa(c.hidden), "gat-hidden": itoa(c.gatHidden), "gat-heads": itoa(c.gatHeads),
		"head-hidden": itoa(c.headHidden), "minibatch": itoa(c.minibatch), "lr": strconv.FormatFloat(c.lr, 'g', -1, 64),
		"reward": c.reward, "seed": strconv.FormatUint(c.seed, 10), "devices": strings.Join(devs, ","),
		"capture": strconv.FormatBool(c.capture), "checkpoint": c.checkpoint, "resume": strconv.FormatBool(c.resume),
	}
}
