package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/nissa/dashboard"
)

// uiFlagUsage documents --ui of esper train and esper ppo.
const uiFlagUsage = "serve a live dashboard of the run at this address while it goes on (e.g. 127.0.0.1:8080, or :0 for any free port; a bare port is loopback, another interface must be named, e.g. 0.0.0.0:8080); read-only"

// uiCmd is `esper ui RUN_DIR...`: the dashboard of finished runs, read
// from their events.jsonl, side by side, until interrupted.
func uiCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveUI(ctx, args, stdout, nil)
}

// serveUI runs `esper ui` until ctx ends; started, when not nil, gets the
// server once it listens (for tests).
func serveUI(ctx context.Context, args []string, stdout io.Writer, started func(*dashboard.Server)) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	addr := fs.String("addr", dashboard.DefaultAddr, "listen address (a bare port is loopback; another interface must be named, e.g. 0.0.0.0:8080)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dirs := fs.Args()
	if len(dirs) == 0 {
		return errors.New("give one or more run directories: esper ui RUN_DIR [RUN_DIR...] (each holds the events.jsonl of an esper train or esper ppo run)")
	}
	srv := dashboard.New(dashboard.Options{})
	for _, dir := range dirs {
		info, err := srv.AddRunDir(dir)
		if err != nil {
			return err
		}
		st := srv.Runs()[len(srv.Runs())-1].Stream().Stats()
		kind := info.Kind
		if kind == "" {
			kind = "run of unknown kind"
		}
		fmt.Fprintf(stdout, "%s: %s, %d events\n", dir, kind, st.Items)
		for _, w := range info.Warnings {
			fmt.Fprintf(stdout, "warning: %s: %s\n", dir, w)
		}
	}
	if err := startServer(srv, "--addr", *addr, stdout); err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintln(stdout, "Ctrl-C stops it")
	if started != nil {
		started(srv)
	}
	<-ctx.Done()
	return nil
}

// startServer starts srv on addr (given by the flag named flagName) and
// says where, warning when the address is reachable from other machines.
func startServer(srv *dashboard.Server, flagName, addr string, stdout io.Writer) error {
	_, loopback, err := dashboard.ResolveAddr(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	if err := srv.Start(addr); err != nil {
		return err
	}
	if !loopback {
		fmt.Fprintf(stdout, "warning: the dashboard listens on %s, reachable from other machines (read-only, without authentication)\n", addr)
	}
	fmt.Fprintf(stdout, "dashboard at %s\n", srv.URL())
	return nil
}

// liveUI is the dashboard of --ui; a nil *liveUI (no --ui) does nothing.
type liveUI struct{ srv *dashboard.Server }

// startUI starts the live dashboard at addr, or returns nil when addr is
// empty.
func startUI(addr string, stdout io.Writer) (*liveUI, error) {
	if addr == "" {
		return nil, nil
	}
	srv := dashboard.New(dashboard.Options{})
	if err := startServer(srv, "--ui", addr, stdout); err != nil {
		return nil, err
	}
	return &liveUI{srv: srv}, nil
}

// add shows a run on the dashboard: its events come from hub, those
// already in preload (a resumed run's events.jsonl) first.
func (u *liveUI) add(hub *nissa.Hub, info dashboard.RunInfo, preload string) error {
	if u == nil {
		return nil
	}
	return hub.AddBackend(u.srv.AddLive(info, preload))
}

// close stops the dashboard; the browsers keep what they show.
func (u *liveUI) close() {
	if u != nil {
		_ = u.srv.Close()
	}
}

// addTrainRun shows a run of esper train on the --ui dashboard (nothing
// without --ui).
func addTrainRun(c trainConfig, hub *nissa.Hub, dirb *nissa.DirBackend) error {
	label := "with seeds (" + c.controller + ")"
	if c.controller == "none" {
		label = "host alone"
	}
	return c.dash.add(hub, dashboard.RunInfo{Label: label, Kind: "train", Dir: dirb.Dir(), Total: c.epochs, Config: c.flags}, dirb.Path())
}

// hubCloseWait is what closing a hub waits for its backends (the run's
// own defer uses the same).
const hubCloseWait = 10 * time.Second
