// Package preview lets `kvlive switch` show what a switch will do from the
// cache of a running kvlive instead of reading the fleet itself. Every
// replica running the planner answers preview requests on Subject (one
// replica a request: a queue group) by planning them as `kvlive plan`
// does (offline.Plan) on the informer cache its planner plans from, and
// replies with the plans, in parts that fit the server's maximum payload.
// A switch asked with no replica up, or one that cannot answer (its cache
// is of another namespace, it did not answer in time), reads the cluster
// as before: Ask says so with ErrUnavailable.
//
// Read from the replica, the preview costs the API server nothing: read
// by the command, it costs a list of every VM in scope and of their
// revisions, JSON the API server encodes and the command decodes (some
// 2 s of CPU at 10,000 VMs, docs/performance.md).
package preview

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/internal/telemetry"
	"kvlive/planner/offline"
)

// Subject is where preview requests are sent.
const Subject = "kvlive.preview"

// queue is the replicas' queue group: one answers each request.
const queue = "kvlive-preview"

// The headers of a reply: a part of the plans, the request's error (what
// `kvlive plan` would say of it: an object that does not exist), or why
// this replica cannot preview it (the asker reads the cluster).
const (
	headerPart        = "Kvlive-Preview-Part"
	headerError       = "Kvlive-Preview-Error"
	headerUnavailable = "Kvlive-Preview-Unavailable"
)

// Request is a preview on the wire: offline.Request with its selector as
// text.
type Request struct {
	Object         events.Ref  `json:"object"`
	From           *events.Ref `json:"from,omitempty"`
	Namespace      string      `json:"namespace,omitempty"`
	Selector       string      `json:"selector,omitempty"`
	ForceConflicts bool        `json:"forceConflicts,omitempty"`
}

func requestOf(r offline.Request) Request {
	w := Request{Object: r.Object, From: r.From, Namespace: r.Namespace, ForceConflicts: r.ForceConflicts}
	if r.Selector != nil && !r.Selector.Empty() {
		w.Selector = r.Selector.String()
	}
	return w
}

func (w Request) offline() (offline.Request, error) {
	selector, err := labels.Parse(w.Selector)
	if err != nil {
		return offline.Request{}, fmt.Errorf("selector %q: %w", w.Selector, err)
	}
	if w.Object.Name == "" {
		return offline.Request{}, errors.New("no object to preview")
	}
	return offline.Request{Object: w.Object, From: w.From, Namespace: w.Namespace, Selector: selector, ForceConflicts: w.ForceConflicts}, nil
}

// Server answers preview requests from a synced fleet cache.
type Server struct {
	Conn  *nats.Conn
	Fleet offline.Fleet
	// Scope is the namespace the fleet caches, "" for every one; a
	// request beyond it is unavailable here.
	Scope   string
	Log     *slog.Logger
	Metrics *telemetry.Metrics
}

// Run answers requests until ctx ends. Start it once the fleet has
// synced: a preview from a cache still filling would show part of it.
func (s *Server) Run(ctx context.Context) error {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	sub, err := s.Conn.QueueSubscribe(Subject, queue, s.answer)
	if err != nil {
		return fmt.Errorf("preview: subscribe to %s: %w", Subject, err)
	}
	s.Log.Info("answering switch previews from the cache", "subject", Subject)
	<-ctx.Done()
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.Log.Warn("preview: unsubscribe", "err", err)
	}
	return nil
}

// answer plans one request and replies.
func (s *Server) answer(msg *nats.Msg) {
	if msg.Reply == "" {
		s.Metrics.Preview(telemetry.PreviewRefused)
		s.Log.Warn("preview: a request with no reply subject, ignored", "subject", msg.Subject)
		return
	}
	var wire Request
	req, err := offline.Request{}, json.Unmarshal(msg.Data, &wire)
	if err == nil {
		req, err = wire.offline()
	}
	if err != nil {
		s.refuse(msg, headerError, "malformed preview request: "+err.Error())
		return
	}
	if s.Scope != "" && req.Namespace != s.Scope {
		s.refuse(msg, headerUnavailable, fmt.Sprintf("this kvlive caches namespace %s only", s.Scope))
		return
	}
	plans, err := offline.Plan(s.Fleet, req)
	if err != nil {
		s.refuse(msg, headerError, err.Error())
		return
	}
	parts, err := encode(plans, partLimit(s.Conn))
	if err != nil {
		s.refuse(msg, headerError, err.Error())
		return
	}
	for i, data := range parts {
		m := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}, Data: data}
		m.Header.Set(headerPart, fmt.Sprintf("%d/%d", i+1, len(parts)))
		if err := s.Conn.PublishMsg(m); err != nil {
			s.Metrics.Preview(telemetry.PreviewFailed)
			s.Log.Warn("preview: a reply could not be sent; the asker reads the cluster when it times out", "part", i+1, "parts", len(parts), "err", err)
			return
		}
	}
	s.Metrics.Preview(telemetry.PreviewServed)
	s.Log.Debug("previewed", "object", req.Object.String(), "namespace", req.Namespace, "vms", len(plans), "parts", len(parts))
}

// refuse replies with a header alone: the request's error, or why this
// replica cannot answer it.
func (s *Server) refuse(msg *nats.Msg, header, why string) {
	result := telemetry.PreviewRefused
	if header == headerUnavailable {
		result = telemetry.PreviewUnavailable
	}
	s.Metrics.Preview(result)
	s.Log.Info("preview: not answered with plans", "why", why)
	m := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}}
	m.Header.Set(header, why)
	if err := s.Conn.PublishMsg(m); err != nil {
		s.Log.Warn("preview: a refusal could not be sent; the asker reads the cluster when it times out", "err", err)
	}
}

// partLimit is the most a reply's data may hold: the server's maximum
// payload, less room for the headers.
func partLimit(nc *nats.Conn) int {
	return max(int(nc.MaxPayload())-4096, 4096)
}

// encode writes plans one JSON document a line, in parts of at most limit
// bytes, at least one (an empty plan list is one empty part).
func encode(plans []events.Plan, limit int) ([][]byte, error) {
	var parts [][]byte
	var part bytes.Buffer
	for _, p := range plans {
		line, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("preview: plan of %s: %w", p.VM.String(), err)
		}
		if len(line)+1 > limit {
			return nil, fmt.Errorf("preview: the plan of %s takes %d bytes, more than a message holds (%d)", p.VM.String(), len(line), limit)
		}
		if part.Len()+len(line)+1 > limit {
			parts = append(parts, bytes.Clone(part.Bytes()))
			part.Reset()
		}
		part.Write(line)
		part.WriteByte('\n')
	}
	return append(parts, part.Bytes()), nil
}

// ErrUnavailable is a preview no running kvlive gave: none runs the
// planner, the one that answered cannot (its cache is of another
// namespace, the request was beyond what it could plan), or none answered
// in time. The asker reads the cluster instead.
var ErrUnavailable = errors.New("no running kvlive previewed it")

// ErrNoReplica is ErrUnavailable because no replica answers previews: no
// kvlive run with the planner is up (NATS has no responder).
var ErrNoReplica = fmt.Errorf("%w: no kvlive run with the planner answers on %s", ErrUnavailable, Subject)

// ErrRefused is ErrUnavailable because the replica that answered would
// not plan the request: beyond its namespace, or refused by offline
// planning (an object its cache does not show).
var ErrRefused = fmt.Errorf("%w: the replica that answered refused it", ErrUnavailable)

// Ask asks a running kvlive to preview req and returns its plans, as
// offline.Plan orders them, waiting at most wait for each part of the
// reply. Any failure is ErrUnavailable, wrapped with why: the cluster,
// read by the caller, says what the request's own errors are (an object a
// replica's cache does not show yet may have just been created).
func Ask(ctx context.Context, nc *nats.Conn, req offline.Request, wait time.Duration) ([]events.Plan, error) {
	body, err := json.Marshal(requestOf(req))
	if err != nil {
		return nil, err
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The parts of a large fleet's preview (some 100 MB at 100,000 VMs)
	// come faster than they are decoded: none may be dropped as a slow
	// consumer's.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: Subject, Reply: inbox, Data: body}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	plans := []events.Plan{}
	for got, total := 0, 1; got < total; got++ {
		msg, err := next(ctx, sub, wait)
		if err != nil {
			return nil, err
		}
		if total, err = part(msg, got+1); err != nil {
			return nil, err
		}
		for line := range bytes.Lines(msg.Data) {
			var p events.Plan
			if err := json.Unmarshal(line, &p); err != nil {
				return nil, fmt.Errorf("%w: part %d of the reply: %w", ErrUnavailable, got+1, err)
			}
			plans = append(plans, p)
		}
	}
	return plans, nil
}

// next waits at most wait for the reply's next message.
func next(ctx context.Context, sub *nats.Subscription, wait time.Duration) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg, err := sub.NextMsgWithContext(ctx)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, ErrNoReplica
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: no reply within %v", ErrUnavailable, wait)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return msg, nil
}

// part checks msg is part want of the reply and returns how many parts
// there are.
func part(msg *nats.Msg, want int) (int, error) {
	for _, h := range []string{headerUnavailable, headerError} {
		if why := msg.Header.Get(h); why != "" {
			return 0, fmt.Errorf("%w: %s", ErrRefused, why)
		}
	}
	i, n, ok := strings.Cut(msg.Header.Get(headerPart), "/")
	index, err1 := strconv.Atoi(i)
	total, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || index != want || total < want {
		return 0, fmt.Errorf("%w: reply part %q, want part %d", ErrUnavailable, msg.Header.Get(headerPart), want)
	}
	return total, nil
}
