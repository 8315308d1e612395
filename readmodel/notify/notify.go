package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"

	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/internal/consumer"
	"kvlive/internal/webhook"
	"kvlive/readmodel/inspect"
	"kvlive/rollout"
)

// Config is what a Notifier watches and whom it tells.
type Config struct {
	JetStream jetstream.JetStream
	// Streams are kvlive run's stream options (replicas, the replay
	// horizon), with which the notifications stream is made if missing.
	Streams   events.StreamOptions
	Receivers []Receiver
	// Client posts to the receivers (the gate webhooks' client).
	Client *webhook.Client
	// Dashboard is the dashboard's address as people reach it; each
	// notification links to its rollout's page there. Empty: no link.
	Dashboard string
	// Timeout bounds one post (webhook.DefaultTimeout when zero).
	Timeout time.Duration
	// MaxDeliver is how many times a notification is posted before it is
	// dead-lettered (DefaultMaxDeliver when zero); Backoff spaces the tries
	// (1 s doubling to 5 min when zero).
	MaxDeliver int
	Backoff    consumer.Backoff
	Log        *slog.Logger
	Metrics    Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OutcomesEvery is how often, at most, a rollout whose only changes
	// are outcomes and verdicts is looked at again (DefaultOutcomesEvery
	// when zero).
	OutcomesEvery time.Duration
}

// Metrics are what the notifier counts: its receivers' deliveries (the
// consumer runtime's), and its looks at rollouts that failed.
type Metrics interface {
	consumer.Metrics
	NotifyCheckFailed()
}

// DefaultMaxDeliver gives a receiver about half an hour, at the default
// backoff, before a notification is dead-lettered.
const DefaultMaxDeliver = 12

// Stage names the notifier in logs, metrics and dead-letter subjects.
const Stage = "notify"

// checkEvery is how often changed rollouts are looked at again.
const checkEvery = time.Second

// DefaultOutcomesEvery is how often, at most, a rollout whose only changes
// are new outcomes and verdicts is looked at again: each look reads all of
// them (rollout.AccountOf), so a rollout of 10,000 VMs looked at every
// second would be read some 70 times while it moves, hundreds of thousands
// of messages for the one notification its last outcome brings. A change
// of its rollout or control record (a gate holding, a pause) is looked at
// within checkEvery.
const DefaultOutcomesEvery = 10 * time.Second

// Notifier watches rollouts and tells the receivers of their changes.
type Notifier struct {
	cfg Config

	mu sync.Mutex
	// dirty are the rollouts to look at: true when their rollout or
	// control record changed, false when only outcomes came.
	dirty map[string]bool
	// looked is when each rollout looked at in the last OutcomesEvery was.
	looked map[string]time.Time
}

// New checks cfg.
func New(cfg Config) (*Notifier, error) {
	switch {
	case cfg.JetStream == nil:
		return nil, errors.New("notify: no JetStream")
	case cfg.Client == nil:
		return nil, errors.New("notify: no webhook client")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = DefaultMaxDeliver
	}
	if cfg.OutcomesEvery <= 0 {
		cfg.OutcomesEvery = DefaultOutcomesEvery
	}
	if cfg.Streams.Replicas == 0 {
		cfg.Streams = events.DefaultStreamOptions()
	}
	if cfg.Backoff == (consumer.Backoff{}) {
		cfg.Backoff = consumer.Backoff{Min: time.Second, Max: 5 * time.Minute, Jitter: 0.2}
	}
	return &Notifier{cfg: cfg, dirty: map[string]bool{}, looked: map[string]time.Time{}}, nil
}

// Run makes the notifications stream if it is missing, then watches the
// rollouts and sends to every receiver until ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	if !n.makeUntilDone(ctx, "the notifications stream", []any{"stream", events.StreamNotify}, func(ctx context.Context) error {
		return events.EnsureStream(ctx, n.cfg.JetStream, events.NotifyStreamConfig(n.cfg.Streams))
	}) {
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.watch(ctx) })
	for _, r := range n.cfg.Receivers {
		g.Go(func() error { return n.send(ctx, r) })
	}
	return g.Wait()
}

// makeRetry is how often a stream or consumer the notifier needs is tried
// again after it could not be made.
const makeRetry = 5 * time.Second

// makeUntilDone calls try until it succeeds, every makeRetry, saying each
// failure with what and attrs; false when ctx ended first.
func (n *Notifier) makeUntilDone(ctx context.Context, what string, attrs []any, try func(context.Context) error) bool {
	return wait.PollUntilContextCancel(ctx, makeRetry, true, func(ctx context.Context) (bool, error) {
		if err := try(ctx); err != nil {
			n.cfg.Log.Warn("notify: "+what+" could not be made; trying again", append(attrs, "err", err, "retry", makeRetry)...)
			return false, nil
		}
		return true, nil
	}) == nil
}

// watchedStreams hold the records whose changes may change a rollout's
// state: its record, its control record, its outcomes and verdicts.
var watchedStreams = []string{"KV_" + events.BucketRollouts, "KV_" + events.BucketControl, events.StreamOutcomes}

// watch marks the rollouts whose records change and publishes their new
// states every checkEvery, starting with every rollout recorded and not
// settled (changes made while no notifier ran). It follows the streams
// before it lists the rollouts, so a rollout recorded in between is seen.
func (n *Notifier) watch(ctx context.Context) error {
	var following sync.WaitGroup
	for _, stream := range watchedStreams {
		following.Add(1)
		records := stream != events.StreamOutcomes
		go bus.Follow(ctx, n.cfg.JetStream, stream, "notify", n.cfg.Log, following.Done, func(subject string) { n.mark(records, eventOf(subject)) })
	}
	following.Wait()
	ids, err := rollout.EventIDs(ctx, n.cfg.JetStream, "")
	if err != nil {
		n.cfg.Log.Warn("notify: the recorded rollouts could not be listed; only rollouts that change from now on are looked at", "err", err)
	}
	n.mark(true, ids...)
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for _, id := range n.due(n.cfg.Now()) {
			if err := n.check(ctx, id); err != nil && ctx.Err() == nil {
				n.cfg.Log.Warn("notify: a rollout's state could not be read or published; trying again", "event", id, "err", err, "retry", checkEvery)
				if n.cfg.Metrics != nil {
					n.cfg.Metrics.NotifyCheckFailed()
				}
				n.mark(true, id)
			}
		}
	}
}

// mark notes rollouts to look at; records says their rollout or control
// record changed, not only their outcomes.
func (n *Notifier) mark(records bool, ids ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		if id != "" {
			n.dirty[id] = n.dirty[id] || records
		}
	}
}

// due takes the rollouts to look at now: those whose records changed, and
// those with new outcomes not looked at in the last OutcomesEvery; the
// rest stay marked. It forgets when rollouts were looked at once that is
// OutcomesEvery ago.
func (n *Notifier) due(now time.Time) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ids []string
	for id, records := range n.dirty {
		if !records && now.Sub(n.looked[id]) < n.cfg.OutcomesEvery {
			continue
		}
		ids = append(ids, id)
		delete(n.dirty, id)
		n.looked[id] = now
	}
	for id, at := range n.looked {
		if now.Sub(at) >= n.cfg.OutcomesEvery {
			delete(n.looked, id)
		}
	}
	return ids
}

// eventOf is the event a record's subject belongs to: a rollout or control
// record's key, an outcome's or verdict's event token; "" for a rollout's
// VM list and anything else.
func eventOf(subject string) string {
	for _, bucket := range []string{events.BucketRollouts, events.BucketControl} {
		if key, ok := strings.CutPrefix(subject, "$KV."+bucket+"."); ok {
			if strings.Contains(key, ".vms.") {
				return ""
			}
			return key
		}
	}
	tokens := strings.Split(subject, ".")
	if len(tokens) > 0 && tokens[len(tokens)-1] == "again" {
		tokens = tokens[:len(tokens)-1]
	}
	if len(tokens) < 4 {
		return ""
	}
	id, err := events.EventOfToken(tokens[len(tokens)-1])
	if err != nil {
		return ""
	}
	return id
}

// check reads one rollout's account and publishes the notifications of its
// state that are not published yet.
func (n *Notifier) check(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a, err := rollout.AccountOf(ctx, n.cfg.JetStream, id)
	if errors.Is(err, rollout.ErrNoRollout) {
		return nil
	}
	if err == nil {
		err = rollout.CountVerdicts(ctx, n.cfg.JetStream, &a)
	}
	if err != nil {
		return err
	}
	for _, s := range States(a, n.cfg.Dashboard) {
		s.SeenAt = n.cfg.Now().UTC()
		if err := n.publish(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// publish stores one state's notification where none is yet.
func (n *Notifier) publish(ctx context.Context, s State) error {
	id := events.NotifyID(s.EventID, s.Kind, s.Occurrence)
	body, err := events.Encode(events.TypeNotification, id, "kvlive/notify", s.EventID, s.SeenAt, &s.Notification)
	if err != nil {
		return err
	}
	msg := events.NewMsg(events.NotifySubject(s.EventID, s.Kind, s.Occurrence), id, events.TypeNotification, body)
	_, err = n.cfg.JetStream.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(0))
	switch {
	case events.Conflict(err):
		return nil // told already, by this replica or another
	case err != nil:
		return fmt.Errorf("publish %s: %w", id, err)
	}
	n.cfg.Log.Info("notify: "+s.Kind, "event", s.EventID, "text", s.Text)
	return nil
}

// State is one state a rollout is in that people are told of once:
// Occurrence tells apart states of one kind (a second pause).
type State struct {
	events.Notification
	Occurrence string
}

// States are the notifiable states account a is in, in the order a
// rollout meets them; dashboard, when set, is where its page is linked.
func States(a rollout.Account, dashboard string) []State {
	if !a.Recorded {
		return nil
	}
	base := events.Notification{
		EventID: a.EventID, Object: a.Record.Object.String(), Phase: string(a.Phase), Planned: a.Planned, Settled: a.Settled(),
		Outcomes: a.Outcomes, Verdicts: a.Verdicts, Differ: a.Differ, Batches: len(a.Batches),
	}
	if len(a.Batches) > 0 {
		base.Batch = a.Batch + 1
	}
	if dashboard != "" {
		base.Link = strings.TrimSuffix(dashboard, "/") + "/rollouts/" + inspect.EventPath(a.EventID)
	}
	var out []State
	add := func(kind, occurrence, text, why string, commands ...string) {
		nt := base
		nt.Kind, nt.Text, nt.Why, nt.Commands = kind, text, why, commands
		out = append(out, State{Notification: nt, Occurrence: occurrence})
	}
	id, what := a.EventID, "rollout "+a.EventID+" of "+base.Object
	undo := events.IsUndo(id)
	add(events.NotifyStarted, "1", fmt.Sprintf("kvlive: %s started: %d VMs planned (%s)%s", what, a.Planned, counts(a.Record.Counts), batches(a)), "")

	c := a.Control
	for _, p := range pauses(c) {
		at := strconv.FormatInt(p.At.UnixNano(), 10)
		current := c.State == events.StatePaused && p.At.Equal(c.At)
		switch {
		case current && a.Done():
			// A rollout that has nothing left to move is not held by it.
		case current && p.By == rollout.GatedBy:
			add(events.NotifyHeld, at, fmt.Sprintf("kvlive: %s is held after batch %d of %d", what, a.Batch+1, len(a.Batches)), p.Reason,
				"kvlive rollout promote "+id, "kvlive rollout abort "+id+` --reason "…"`)
		case current:
			add(events.NotifyPaused, at, fmt.Sprintf("kvlive: %s was paused by %s", what, orSomeone(p.By)), p.Reason,
				"kvlive rollout resume "+id, "kvlive rollout abort "+id+` --reason "…"`)
		case p.By == rollout.GatedBy:
			add(events.NotifyHeld, at, fmt.Sprintf("kvlive: %s was held at %s, a hold lifted since", what, p.At.Format(time.RFC3339)), p.Reason)
		default:
			add(events.NotifyPaused, at, fmt.Sprintf("kvlive: %s was paused by %s at %s, a pause lifted since", what, orSomeone(p.By), p.At.Format(time.RFC3339)), p.Reason)
		}
	}
	batch := strconv.Itoa(a.Batch)
	if a.Differ > 0 {
		add(events.NotifyDiffer, batch, fmt.Sprintf("kvlive: KubeVirt's verdict on %d VMs of %s differs from the prediction", a.Differ, what),
			"verdicts: "+inspect.VerdictList(verdictNames(a)), "kvlive outcomes --event "+id+" --differs")
	}
	if failed := a.Outcomes[events.ResultFailed]; failed > 0 {
		add(events.NotifyFailed, batch, fmt.Sprintf("kvlive: %d VMs of %s failed", failed, what), "",
			"kvlive outcomes --event "+id+" --result failed", "kvlive rollout retry "+id)
	}
	switch {
	case a.Phase == rollout.PhaseComplete && undo:
		add(events.NotifyUndone, "1", fmt.Sprintf("kvlive: undo %s is complete: %s", id, counts(a.Outcomes)), "")
	case a.Phase == rollout.PhaseComplete || a.Phase == rollout.PhaseIncomplete:
		text := fmt.Sprintf("kvlive: %s is %s: %s; KubeVirt's verdicts: %s", what, a.Phase, counts(a.Outcomes), inspect.VerdictList(verdictNames(a)))
		var commands []string
		if !undo {
			commands = []string{"kvlive rollout undo " + id}
		}
		add(events.NotifyCompleted, "1", text, "", commands...)
	case a.Phase == rollout.PhaseAborted && a.Done():
		add(events.NotifyAborted, "1", fmt.Sprintf("kvlive: %s was aborted by %s: %s", what, orSomeone(c.By), counts(a.Outcomes)), c.Reason)
	}
	return out
}

// pauses are the pauses c records, and the one it is in where a record
// written before kvlive kept them lists none.
func pauses(c events.Control) []events.Pause {
	ps := c.Pauses
	if c.State == events.StatePaused && !slices.ContainsFunc(ps, func(p events.Pause) bool { return p.At.Equal(c.At) }) {
		ps = append(slices.Clone(ps), events.Pause{At: c.At, By: c.By, Reason: c.Reason})
	}
	return ps
}

func orSomeone(by string) string {
	if by == "" {
		return "someone"
	}
	return by
}

// counts lists counts by result, "none" when there are none.
func counts(m map[events.Result]int) string {
	var parts []string
	for _, r := range []events.Result{events.ResultLive, events.ResultRestart, events.ResultEvict, events.ResultNextBoot, events.ResultNone, events.ResultSkip, events.ResultFailed} {
		if m[r] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[r], r))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// batches says how a batched rollout goes.
func batches(a rollout.Account) string {
	if len(a.Batches) == 0 {
		return ""
	}
	return fmt.Sprintf(", in %d batches %v", len(a.Batches), a.Batches)
}

// verdictNames are a's verdict counts by name, the awaited ones included.
func verdictNames(a rollout.Account) map[string]int {
	m := map[string]int{"awaited": a.Awaited}
	for v, c := range a.Verdicts {
		m[string(v)] = c
	}
	return m
}

// send posts the notifications to one receiver, in order, until ctx ends.
func (n *Notifier) send(ctx context.Context, r Receiver) error {
	js := n.cfg.JetStream
	var c jetstream.Consumer
	if !n.makeUntilDone(ctx, "the receiver's consumer", []any{"receiver", r.String()}, func(ctx context.Context) (err error) {
		c, err = js.CreateOrUpdateConsumer(ctx, events.StreamNotify, events.NotifyConsumer(r.consumerName(), r.String()))
		return err
	}) {
		return nil
	}
	rt, err := consumer.New(consumer.Config{
		Stage: Stage, Consumer: c, JetStream: js, Workers: 1, MaxDeliver: n.cfg.MaxDeliver, AckWait: time.Minute,
		Backoff: n.cfg.Backoff, Grace: n.cfg.Timeout + time.Second, Log: n.cfg.Log.With("receiver", r.String()), Metrics: n.cfg.Metrics,
	})
	if err != nil {
		return err
	}
	n.cfg.Log.Info("notify: sending", "receiver", r.String(), "consumer", r.consumerName())
	return rt.Run(ctx, func(ctx context.Context, msg jetstream.Msg, d consumer.Delivery) consumer.Fate {
		var nt events.Notification
		if _, err := events.Decode(msg.Data(), events.TypeNotification, &nt); err != nil {
			return consumer.Poison("not a notification: " + err.Error())
		}
		body, contentType, err := r.body(msg.Data(), nt)
		if err != nil {
			return consumer.Poison(err.Error())
		}
		answer := n.cfg.Client.Post(ctx, r.URL, n.cfg.Timeout, contentType, r.Header, body)
		if !answer.Yes() {
			return consumer.Retry(fmt.Errorf("%s did not take notification %s: %s", r.String(), nt.Kind, answer))
		}
		n.cfg.Log.Debug("notify: sent", "receiver", r.String(), "event", nt.EventID, "kind", nt.Kind, "took", answer.Took)
		return consumer.Done()
	})
}
