// Package dashboard is the operator's window on a run: a web page, served
// from the binary, that shows a training or PPO run as it goes on — loss
// and accuracy curves with the seeds' lifecycle marked on them, each
// seed's alpha, a timeline with one lane per slot, the seed table, the
// decision log, PPO's return, per-head entropy, KL, explained variance
// and throughput, the run's configuration and its progress with an ETA —
// and finished runs read back from their events.jsonl, side by side.
//
// # Live runs
//
// Server.AddLive registers a run and returns a nissa backend (a
// nissa.StreamBackend) for the run's hub: the hub never waits for it, and
// the stream never waits for a browser. Each browser reads one
// Server-Sent Events stream (/api/events) that first replays every run's
// history (a late joiner sees the whole run) and then pushes each new
// event; a browser too slow to keep up is dropped and reconnects, getting
// the history again. Server.AddRun adds a finished run (ReadRunDir).
//
// # Safe by default
//
// The server only answers GET (and HEAD); it binds to loopback unless the
// address names another interface (ResolveAddr), and then refuses
// requests whose Host is not a loopback name, so a web page elsewhere
// cannot read it through DNS rebinding. It serves its embedded assets by
// name, the runs' events, and of a run directory only its plot files
// (training.png, alpha.png, ppo.png), opened inside the directory
// (os.Root): no request names a path. The page is hand-written SVG and
// JavaScript, embedded with go:embed: no CDN, no build step.
package dashboard
