package dashboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
	s.live(w, r, func(c change) bool { return c.stream != "KVLIVE_SPANS" }, func(ctx context.Context) (func(*markup), error) {
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
	s.live(w, r, want, func(ctx context.Context) (func(*markup), error) {
		v, err := s.rolloutView(ctx, id, filter)
		mu.Lock()
		traceID = v.Trace.ID
		mu.Unlock()
		return v.live, err
	})
}

// live serves a server-sent event stream: the fragment read makes,
// pushed at once and again after each change want keeps (at most every
// liveEvery, and only when it differs), until the browser goes away.
func (s *Server) live(w http.ResponseWriter, r *http.Request, want func(change) bool, read func(context.Context) (func(*markup), error)) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		s.cfg.Log.Warn("dashboard: a live page cannot be streamed", "path", r.URL.Path, "err", err)
		return
	}
	f, unsubscribe := s.hub.subscribe(want)
	defer unsubscribe()
	ctx := r.Context()
	last := ""
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	push := true
	for {
		if push {
			write, err := read(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				write = func(m *markup) { m.wrap(`<p class="error">`, err.Error(), `</p>`) }
			}
			body := render(write)
			if body != last {
				if err := writeEvent(w, body); err != nil || rc.Flush() != nil {
					return
				}
				last = body
			}
			push = false
			select {
			case <-ctx.Done():
				return
			case <-time.After(liveEvery):
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-f.poke:
			push = true
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// writeEvent writes html as one server-sent event, a data line per line.
func writeEvent(w io.Writer, html string) error {
	var b strings.Builder
	for line := range strings.Lines(html) {
		b.WriteString("data: ")
		b.WriteString(strings.TrimSuffix(line, "\n"))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
