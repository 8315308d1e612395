package preview

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/internal/telemetry"
	"kvlive/planner/offline"
)

// queue is the replicas' queue group: one answers each request.
const queue = "kvlive-preview"

// maxPart bounds a part of the reply below the server's maximum payload,
// so a large fleet's reply never fills the connection's buffers in a few
// messages.
const maxPart = 1 << 20

// replyWithin is how long after a request its reply may still be sent:
// the planner's NATS role may answer a request for a minute
// (allow_responses), and a part sent later would be refused.
const replyWithin = 50 * time.Second

func requestOf(r offline.Request) events.PreviewRequest {
	w := events.PreviewRequest{Object: r.Object, From: r.From, Namespace: r.Namespace, ForceConflicts: r.ForceConflicts}
	if r.Selector != nil && !r.Selector.Empty() {
		w.Selector = r.Selector.String()
	}
	return w
}

// decodeRequest reads a request, refusing fields it does not know.
func decodeRequest(data []byte) (offline.Request, error) {
	var w events.PreviewRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return offline.Request{}, err
	}
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
	// partLimit, when set, bounds a part below maxPart (tests).
	partLimit int

	mu      sync.Mutex
	closing bool
	// answering counts the answers under way, which Run waits for.
	answering sync.WaitGroup
}

// Run answers requests until ctx ends, and returns once the answers under
// way have stopped. Start it once the fleet has synced: a preview from a
// cache still filling would show part of it.
func (s *Server) Run(ctx context.Context) error {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	sub, err := s.Conn.QueueSubscribe(events.PreviewSubject, queue, func(msg *nats.Msg) {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			s.refuse(msg, events.HeaderPreviewUnavailable, "this kvlive is stopping")
			return
		}
		s.answering.Add(1)
		s.mu.Unlock()
		defer s.answering.Done()
		s.answer(ctx, msg)
	})
	if err != nil {
		return fmt.Errorf("preview: subscribe to %s: %w", events.PreviewSubject, err)
	}
	s.Log.Info("answering switch previews from the cache", "subject", events.PreviewSubject)
	<-ctx.Done()
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.Log.Warn("preview: unsubscribe", "err", err)
	}
	s.answering.Wait()
	return nil
}

// answer plans one request and replies, part by part as each fills.
func (s *Server) answer(ctx context.Context, msg *nats.Msg) {
	received := time.Now()
	if msg.Reply == "" {
		s.Metrics.Preview(telemetry.PreviewRefused)
		s.Log.Warn("preview: a request with no reply subject, ignored", "subject", msg.Subject)
		return
	}
	defer func() {
		// offline.Plan ran only in the command before; a request must not
		// end the replica that answers it.
		if r := recover(); r != nil {
			s.Log.Error("preview: planning a request failed; refused", "panic", r, "stack", string(debug.Stack()))
			s.refuse(msg, events.HeaderPreviewError, fmt.Sprintf("the replica failed planning it: %v", r))
		}
	}()
	req, err := decodeRequest(msg.Data)
	if err != nil {
		s.refuse(msg, events.HeaderPreviewError, "malformed preview request: "+err.Error())
		return
	}
	if s.Scope != "" && req.Namespace != s.Scope {
		s.refuse(msg, events.HeaderPreviewUnavailable, fmt.Sprintf("this kvlive caches namespace %s only", s.Scope))
		return
	}
	plans, err := offline.Plan(s.Fleet, req)
	if err != nil {
		s.refuse(msg, events.HeaderPreviewError, err.Error())
		return
	}
	parts, err := s.send(ctx, msg.Reply, plans, received)
	if err != nil {
		s.Metrics.Preview(telemetry.PreviewFailed)
		s.Log.Warn("preview: the reply was not sent whole; the asker reads the cluster", "parts", parts, "err", err)
		return
	}
	s.Metrics.Preview(telemetry.PreviewServed)
	s.Log.Debug("previewed", "object", req.Object.String(), "namespace", req.Namespace, "vms", len(plans), "parts", parts)
}

// send publishes plans to reply, one JSON document a line, a part each
// time one fills (the last one saying how many there are), and returns
// how many parts it sent. It stops when ctx ends or the reply is due.
func (s *Server) send(ctx context.Context, reply string, plans []events.Plan, received time.Time) (int, error) {
	limit := maxPart
	if s.partLimit > 0 {
		limit = s.partLimit
	}
	limit = min(limit, int(s.Conn.MaxPayload())-4096)
	var part bytes.Buffer
	sent := 0
	publish := func(last bool) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(received) > replyWithin {
			return fmt.Errorf("not sent within %v of the request", replyWithin)
		}
		m := &nats.Msg{Subject: reply, Header: nats.Header{}, Data: part.Bytes()}
		m.Header.Set(events.HeaderPreviewPart, strconv.Itoa(sent+1))
		if last {
			m.Header.Set(events.HeaderPreviewParts, strconv.Itoa(sent+1))
		}
		if err := s.Conn.PublishMsg(m); err != nil {
			return err
		}
		sent++
		part.Reset()
		return nil
	}
	for _, p := range plans {
		line, err := json.Marshal(p)
		if err != nil {
			return sent, fmt.Errorf("plan of %s: %w", p.VM.String(), err)
		}
		if len(line)+1 > limit {
			return sent, fmt.Errorf("the plan of %s takes %d bytes, more than a part holds (%d)", p.VM.String(), len(line), limit)
		}
		if part.Len()+len(line)+1 > limit {
			if err := publish(false); err != nil {
				return sent, err
			}
		}
		part.Write(line)
		part.WriteByte('\n')
	}
	if err := publish(true); err != nil {
		return sent, err
	}
	return sent, nil
}

// refuse replies with a header alone: the request's error, or why this
// replica cannot answer it.
func (s *Server) refuse(msg *nats.Msg, header, why string) {
	result := telemetry.PreviewRefused
	if header == events.HeaderPreviewUnavailable {
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

// ErrUnavailable is a preview no running kvlive gave: none runs the
// planner, the one that answered cannot (its cache is of another
// namespace, the request was beyond what it could plan), the asker may
// not ask, or no part came in time. The asker reads the cluster instead.
var ErrUnavailable = errors.New("no running kvlive previewed it")

// ErrNoReplica is ErrUnavailable because no replica answers previews: no
// kvlive run with the planner is up (NATS has no responder).
var ErrNoReplica = fmt.Errorf("%w: no kvlive run with the planner answers on %s", ErrUnavailable, events.PreviewSubject)

// ErrRefused is ErrUnavailable because the request was refused: by the
// replica that answered (beyond its namespace, or refused by offline
// planning: an object its cache does not show), or by the server (the
// asker's NATS user may not ask).
var ErrRefused = fmt.Errorf("%w: refused", ErrUnavailable)

// Ask asks a running kvlive to preview req and returns its plans, as
// offline.Plan orders them, waiting at most wait for each part of the
// reply. A preview not given is ErrUnavailable, wrapped with why: the
// cluster, read by the caller, says what the request's own errors are (an
// object a replica's cache does not show yet may have just been created).
// ctx ending is ctx's error.
func Ask(ctx context.Context, nc *nats.Conn, req offline.Request, wait time.Duration) ([]events.Plan, error) {
	body, err := json.Marshal(requestOf(req))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
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
	if err := nc.PublishMsg(&nats.Msg{Subject: events.PreviewSubject, Reply: inbox, Data: body}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := refusedPublish(ctx, nc, wait); err != nil {
		return nil, err
	}
	plans := []events.Plan{}
	for want := 1; ; want++ {
		msg, err := next(ctx, sub, wait)
		if err != nil {
			return nil, err
		}
		last, err := part(msg, want)
		if err != nil {
			return nil, err
		}
		for line := range bytes.Lines(msg.Data) {
			var p events.Plan
			if err := json.Unmarshal(line, &p); err != nil {
				return nil, fmt.Errorf("%w: part %d of the reply: %w", ErrUnavailable, want, err)
			}
			plans = append(plans, p)
		}
		if last {
			return plans, nil
		}
	}
}

// refusedPublish waits, at most wait, for the server to have read the
// request, and says whether it refused it: a NATS user whose permissions
// do not name events.PreviewSubject is told so on the connection before
// the flush's answer, and no reply comes.
func refusedPublish(ctx context.Context, nc *nats.Conn, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), events.PreviewSubject) {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return nil
}

// next waits at most wait for the reply's next message.
func next(ctx context.Context, sub *nats.Subscription, wait time.Duration) (*nats.Msg, error) {
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg, err := sub.NextMsgWithContext(waitCtx)
	switch {
	case err == nil:
		return msg, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, nats.ErrNoResponders):
		return nil, ErrNoReplica
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: no reply within %v", ErrUnavailable, wait)
	}
	return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// part checks msg is part want of the reply, and says whether it is the
// last.
func part(msg *nats.Msg, want int) (last bool, _ error) {
	if why := msg.Header.Get(events.HeaderPreviewUnavailable); why != "" {
		return false, fmt.Errorf("%w: %s", ErrRefused, why)
	}
	if why := msg.Header.Get(events.HeaderPreviewError); why != "" {
		return false, fmt.Errorf("%w: %s", ErrRefused, why)
	}
	index, err := strconv.Atoi(msg.Header.Get(events.HeaderPreviewPart))
	if err != nil || index != want {
		return false, fmt.Errorf("%w: reply part %q, want part %d", ErrUnavailable, msg.Header.Get(events.HeaderPreviewPart), want)
	}
	total := msg.Header.Get(events.HeaderPreviewParts)
	if total != "" && total != strconv.Itoa(want) {
		return false, fmt.Errorf("%w: the last part says %q parts, it is part %d", ErrUnavailable, total, want)
	}
	return total != "", nil
}

// AskOrRead is a switch's preview: a running kvlive's (Ask), or, when
// none gives one, what read returns (the cluster, read by the command),
// which also says what is wrong with a request a replica refused. A
// preview of no VM from a replica is read again too: nothing to switch
// ends the command with nothing requested, and a cache that trails the
// API server by a moment (VMs just created) must not be what says so.
// No reply within wait is logged as a warning; ctx ending reads nothing.
func AskOrRead(ctx context.Context, nc *nats.Conn, req offline.Request, wait time.Duration, log *slog.Logger,
	read func(context.Context) ([]events.Plan, error)) ([]events.Plan, error) {
	plans, err := Ask(ctx, nc, req, wait)
	switch {
	case err == nil && len(plans) > 0:
		log.Debug("previewed from a running kvlive's cache", "vms", len(plans))
		return plans, nil
	case err == nil:
		log.Debug("a running kvlive previewed no VM; reading the cluster to be sure")
	case ctx.Err() != nil:
		return nil, err
	case errors.Is(err, ErrNoReplica) || errors.Is(err, ErrRefused):
		log.Debug("reading the cluster for the preview", "why", err)
	default:
		log.Warn("a running kvlive did not preview the switch; reading the cluster", "why", err)
	}
	return read(ctx)
}
