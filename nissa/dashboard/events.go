package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"time"

	"github.com/esper-go/esper/nissa"
)

// The event stream (/api/events) is Server-Sent Events. Each connection
// gets, in order:
//
//	event: hello   {"title": ...}
//	event: run     a RunInfo, for every run (and later for each run added)
//	event: ev      {"run": ID, "seq": N, "e": EVENT} for the run's history
//	event: live    {} once every run's history is sent
//	event: ev      ... each new event, as it comes
//	event: end     {"run": ID} when a run's stream ends
//	event: bye     {} when the server closes
//
// EVENT is the telemetry event's JSON (leyline's), its METRICS cut to
// what the page draws (encodeEvent). A browser reconnecting starts over
// with hello and the histories, so the page resets on hello.

// sseConn writes one event stream; the first write error sticks.
type sseConn struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func (c *sseConn) event(name string, data []byte) {
	if c.err != nil {
		return
	}
	_, c.err = fmt.Fprintf(c.w, "event: %s\ndata: %s\n\n", name, data)
}

// item writes one of a run's events.
func (c *sseConn) item(run string, it nissa.StreamItem) {
	if c.err != nil {
		return
	}
	// The run id is the server's own ("r0"): no quoting needed beyond
	// JSON's, which strconv.Quote matches for it.
	_, c.err = fmt.Fprintf(c.w, "event: ev\ndata: {\"run\":%s,\"seq\":%d,\"e\":%s}\n\n", strconv.Quote(run), it.Seq, it.Data)
}

// flush sends what was written, within the write timeout.
func (c *sseConn) flush() error {
	if c.err != nil {
		return c.err
	}
	c.err = c.rc.Flush()
	return c.err
}

// deadline gives the next writes the write timeout.
func (c *sseConn) deadline() {
	if c.err == nil {
		// Not every ResponseWriter supports deadlines (a recorder in a
		// test); the stream works without.
		_ = c.rc.SetWriteDeadline(time.Now().Add(c.timeout))
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only the server's own types: a bug
	}
	return b
}

// active is a run an event stream follows.
type active struct {
	run *Run
	sub *nissa.StreamSubscription
}

func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	s.served.Add(1)
	s.clients.Add(1)
	defer s.clients.Add(-1)

	c := &sseConn{w: w, rc: http.NewResponseController(w), timeout: s.opts.WriteTimeout}
	var subs []active
	defer func() {
		slow := false
		for _, a := range subs {
			slow = slow || errors.Is(a.sub.Err(), nissa.ErrSlowSubscriber)
			a.sub.Close()
		}
		// A write that outlived the write timeout is a slow browser too.
		if slow || errors.Is(c.err, os.ErrDeadlineExceeded) {
			s.clientsDropped.Add(1)
		}
	}()
	c.deadline()
	_, _ = fmt.Fprint(w, "retry: 2000\n\n")
	c.event("hello", mustJSON(map[string]any{"title": s.opts.Title}))
	seen, first := 0, true
	for {
		runs, changed := s.snapshot()
		c.deadline()
		for _, run := range runs[seen:] {
			sub := run.stream.Subscribe()
			info := run.Info()
			info.HistoryDropped = sub.HistoryDropped
			c.event("run", mustJSON(info))
			for _, it := range sub.History {
				c.item(info.ID, it)
			}
			subs = append(subs, active{run: run, sub: sub})
		}
		seen = len(runs)
		if first {
			c.event("live", []byte("{}"))
			first = false
		}
		if c.flush() != nil {
			return
		}

		// Wait for the first of: the browser leaving, a run added, the
		// server closing, an item or the end of a run's stream.
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.Context().Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(changed)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.quit)},
		}
		const fixed = 3
		for _, a := range subs {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.sub.C())})
		}
		chosen, v, ok := reflect.Select(cases)
		c.deadline()
		switch chosen {
		case 0:
			return
		case 1:
			continue
		case 2:
			// Send what the subscriptions hold (and the end of the runs
			// whose streams ended as the server closed), then say
			// goodbye.
			for _, a := range subs {
				s.drain(c, a)
			}
			c.event("bye", []byte("{}"))
			_ = c.flush()
			return
		}
		a := subs[chosen-fixed]
		if ok {
			c.item(a.run.info.ID, v.Interface().(nissa.StreamItem))
			if s.drain(c, a) { // what else came meanwhile, in one flush
				subs = append(subs[:chosen-fixed], subs[chosen-fixed+1:]...)
			}
			continue
		}
		if errors.Is(a.sub.Err(), nissa.ErrSlowSubscriber) {
			return // counted above; the browser reconnects and starts over
		}
		c.event("end", mustJSON(map[string]string{"run": a.run.info.ID}))
		subs = append(subs[:chosen-fixed], subs[chosen-fixed+1:]...)
	}
}

// drain writes the items a subscription holds now, without waiting, and
// the run's end if the stream ended, reporting that (the caller then
// drops the subscription). A slow drop is left for the next wait, which
// ends the connection.
func (s *Server) drain(c *sseConn, a active) (ended bool) {
	for {
		select {
		case it, ok := <-a.sub.C():
			if !ok {
				if errors.Is(a.sub.Err(), nissa.ErrSlowSubscriber) {
					return false
				}
				c.event("end", mustJSON(map[string]string{"run": a.run.info.ID}))
				return true
			}
			c.item(a.run.info.ID, it)
		default:
			return false
		}
	}
}
