package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// followed are the streams whose new messages change what a page shows:
// events (a rollout appears), outcomes (VMs move; verdicts are stored
// there too), dead letters, spans (the trace grows), and the buckets of
// rollout records, control records and the migration budget.
var followed = []string{
	events.StreamEvents, events.StreamOutcomes, events.StreamDLQ, "KVLIVE_SPANS",
	"KV_" + events.BucketRollouts, "KV_" + events.BucketControl, "KV_" + events.BucketBus,
}

// Live pages are rendered again at most every liveEvery (changes in
// between are taken together), and say they are alive every keepAlive.
const (
	liveEvery = time.Second
	keepAlive = 15 * time.Second
)

// change is one new message on a followed stream.
type change struct {
	stream, subject string
}

// hub fans the followed streams' new messages out to the live pages.
type hub struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu   sync.Mutex
	subs map[*follower]struct{}
}

// follower is one live page: it is poked when a change it wants arrives.
type follower struct {
	poke chan struct{}
	want func(change) bool
}

func newHub(js jetstream.JetStream, log *slog.Logger) *hub {
	return &hub{js: js, log: log, subs: map[*follower]struct{}{}}
}

// start follows every followed stream with an ordered consumer of new
// messages' headers until ctx ends; a stream kvlive has not made yet is
// waited for (and said so once).
func (h *hub) start(ctx context.Context) error {
	for _, stream := range followed {
		go bus.Follow(ctx, h.js, stream, "dashboard: live pages", h.log, func() {}, func(subject string) {
			h.publish(change{stream: stream, subject: subject})
		})
	}
	return nil
}

// publish pokes every follower that wants c; a follower already poked
// stays poked once.
func (h *hub) publish(c change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for f := range h.subs {
		if f.want(c) {
			select {
			case f.poke <- struct{}{}:
			default:
			}
		}
	}
}

// subscribe adds a follower; the returned func removes it.
func (h *hub) subscribe(want func(change) bool) (*follower, func()) {
	f := &follower{poke: make(chan struct{}, 1), want: want}
	h.mu.Lock()
	h.subs[f] = struct{}{}
	h.mu.Unlock()
	return f, func() {
		h.mu.Lock()
		delete(h.subs, f)
		h.mu.Unlock()
	}
}

// liveRollouts pushes the rollouts table again whenever a rollout changes.
func (s *Server) liveRollouts(w http.ResponseWriter, r *http.Request) {
	s.live(w, r, "rollouts", func(c change) bool { return c.stream != "KVLIVE_SPANS" }, func(ctx context.Context) (func(*markup), error) {
		v, err := s.rolloutsView(ctx)
		return v.live, err
	})
}

// liveRollout pushes a rollout's live part again whenever a record of it
// changes: its outcomes, verdicts, control or rollout record, dead
// letters, spans of its trace, or the migration budget.
func (s *Server) liveRollout(w http.ResponseWriter, r *http.Request) {
	id, filter := r.PathValue("id"), r.URL.Query().Get("vms")
	token := events.EventToken(id)
	var traceID string
	var mu sync.Mutex
	want := func(c change) bool {
		switch c.stream {
		case "KV_" + events.BucketBus:
			return true
		case "KVLIVE_SPANS":
			mu.Lock()
			defer mu.Unlock()
			return traceID != "" && strings.HasSuffix(c.subject, "."+traceID)
		}
		return strings.Contains(c.subject, token) || strings.Contains(c.subject, id)
	}
	s.live(w, r, "rollout "+id+"?vms="+filter, want, func(ctx context.Context) (func(*markup), error) {
		v, err := s.rolloutView(ctx, id, filter)
		mu.Lock()
		traceID = v.Trace.ID
		mu.Unlock()
		return v.live, err
	})
}

// A live view renders at most every liveEvery, and never more than a
// renderShare-th of the time: after a render that took d it waits at
// least renderShare times d. So however many pages are open and however
// fast changes come, the live pages cost a rollout at most about 1/20 of
// a core. A page that takes nothing for liveWriteTimeout (a stalled
// reader) is closed; its browser reconnects when it can.
const (
	renderShare      = 20
	liveWriteTimeout = 10 * time.Second
)

// views are the live fragments being pushed, one per page and filter,
// each read and rendered once for every page open on it.
type views struct {
	mu sync.Mutex
	m  map[string]*view
}

// view is one live fragment: a goroutine renders it after each change its
// pages want and hands every page the same event; a page that is behind
// skips to the newest.
type view struct {
	viewers int
	stop    context.CancelFunc

	mu      sync.Mutex
	event   []byte        // the newest render as a server-sent event
	seq     uint64        // counts the renders that changed the event
	changed chan struct{} // closed when event changes
}

// latest returns the newest event, its number, and a channel closed when
// a newer one is set.
func (v *view) latest() ([]byte, uint64, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.event, v.seq, v.changed
}

func (v *view) set(event []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.event, v.seq = event, v.seq+1
	close(v.changed)
	v.changed = make(chan struct{})
}

// join returns the view key names, starting it (its goroutine and its
// follower of the hub) when no page has it open; leave when done with it.
func (s *Server) join(key string, want func(change) bool, read func(context.Context) (func(*markup), error)) *view {
	s.views.mu.Lock()
	defer s.views.mu.Unlock()
	v := s.views.m[key]
	if v == nil {
		ctx, cancel := context.WithCancel(context.Background())
		v = &view{stop: cancel, changed: make(chan struct{})}
		s.views.m[key] = v
		// Follow before the first read, so no change after it is missed.
		f, unsubscribe := s.hub.subscribe(want)
		go func() {
			defer unsubscribe()
			s.render(ctx, v, f, read)
		}()
	}
	v.viewers++
	return v
}

// leave closes a page's hold on v, stopping v with the last one.
func (s *Server) leave(key string, v *view) {
	s.views.mu.Lock()
	defer s.views.mu.Unlock()
	if v.viewers--; v.viewers == 0 {
		v.stop()
		delete(s.views.m, key)
	}
}

// render reads and renders v at once, and again after each change f is
// poked with, paced by liveEvery and renderShare, until ctx ends.
func (s *Server) render(ctx context.Context, v *view, f *follower, read func(context.Context) (func(*markup), error)) {
	last := ""
	for {
		began := time.Now()
		write, err := read(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			write = func(m *markup) { m.wrap(`<p class="error">`, err.Error(), `</p>`) }
		}
		body := render(write)
		took := time.Since(began)
		s.renders.Add(1)
		if body != last {
			v.set(sseEvent(body))
			last = body
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(liveEvery, renderShare*took)):
		}
		select {
		case <-ctx.Done():
			return
		case <-f.poke:
		}
	}
}

// live serves a server-sent event stream of the view key: its newest
// render at once and each newer one, until the browser goes away or
// takes nothing for liveWriteTimeout.
func (s *Server) live(w http.ResponseWriter, r *http.Request, key string, want func(change) bool, read func(context.Context) (func(*markup), error)) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		s.cfg.Log.Warn("dashboard: a live page cannot be streamed", "path", r.URL.Path, "err", err)
		return
	}
	v := s.join(key, want, read)
	defer s.leave(key, v)
	send := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		_, err := w.Write(b)
		if err == nil {
			err = rc.Flush()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.cfg.Metrics.PageClosed()
			s.cfg.Log.Info("dashboard: closed a live page that took nothing for a while; its browser reconnects when it can",
				"path", r.URL.Path, "remote", r.RemoteAddr, "waited", s.writeTimeout)
		}
		return err == nil
	}
	ctx := r.Context()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	var sent uint64
	for {
		event, seq, changed := v.latest()
		if seq > sent {
			if !send(event) {
				return
			}
			sent = seq
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
			if !send([]byte(": alive\n\n")) {
				return
			}
		}
	}
}

// sseEvent is html as one server-sent event, a data line per line.
func sseEvent(html string) []byte {
	var b strings.Builder
	for line := range strings.Lines(html) {
		b.WriteString("data: ")
		b.WriteString(strings.TrimSuffix(line, "\n"))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return []byte(b.String())
}
