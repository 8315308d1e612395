package watcher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"kvlive/events"
	"kvlive/internal/kube"
)

const tracerName = "kvlive/watcher"

// A change that cannot be published (NATS down, the events stream full)
// is retried for as long as it takes, backing off from retryMin to
// retryMax: updates with an unchanged generation are filtered out, so
// nothing else would ever bring it back before a restart.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 30 * time.Second
)

// Config configures a Watcher.
type Config struct {
	// Informers are the process's informers on the four watched kinds
	// (kube.Cache.ObjectInformers); the wiring starts them.
	Informers kube.ObjectInformers
	JetStream jetstream.JetStream
	// Namespace limits namespaced kinds to one namespace; "" watches all.
	Namespace string
	Log       *slog.Logger
	Tracer    trace.TracerProvider
	// Clock stamps events; tests set a fake one.
	Clock clock.PassiveClock
	// RetryMin and RetryMax bound the backoff between attempts at a change
	// that could not be published; zero means 100ms and 30s.
	RetryMin, RetryMax time.Duration
}

// objectKey is the work queue key: an object's kind and name, never the
// object; deletedUID is set for an object that was deleted, whose record
// goes.
type objectKey struct {
	kind, namespace, name string
	deletedUID            string
}

// Watcher emits change events for instance types and preferences.
type Watcher struct {
	cfg       Config
	informers kube.ObjectInformers
	handlers  []registration
	queue     workqueue.TypedRateLimitingInterface[objectKey]
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	kv        jetstream.KeyValue

	// failing holds the objects whose last sync failed, with the error,
	// for /readyz and the backlog metric.
	mu      sync.Mutex
	failing map[objectKey]error
	// added holds, by UID, each object as its add event (the informer's
	// list, or a creation) carried it, until a sync compared it with its
	// record: an object edited before its first sync is recorded as it was
	// added and the edit emitted, not taken for a first sighting.
	added map[string]seen
}

// New builds a Watcher; nothing runs until Run.
func New(cfg Config) (*Watcher, error) {
	if cfg.JetStream == nil || len(cfg.Informers) == 0 {
		return nil, errors.New("watcher: JetStream and informers are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	w := &Watcher{
		cfg:       cfg,
		informers: cfg.Informers,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[objectKey](cmp.Or(cfg.RetryMin, retryMin), cmp.Or(cfg.RetryMax, retryMax)),
			workqueue.TypedRateLimitingQueueConfig[objectKey]{Name: "kvlive-watcher"}),
		failing: map[objectKey]error{},
		added:   map[string]seen{},
		tracer:  cfg.Tracer.Tracer(tracerName),
		prop:    propagation.TraceContext{},
	}
	for kind, inf := range w.informers {
		reg, err := inf.AddEventHandler(w.handler(kind))
		if err != nil {
			// A stopped informer (the process is shutting down) takes no
			// handler; leave nothing running behind.
			w.removeHandlers()
			w.queue.ShutDown()
			return nil, fmt.Errorf("watcher: %s handler: %w", kind, err)
		}
		w.handlers = append(w.handlers, registration{inf, reg})
	}
	return w, nil
}

// registration is one handler the watcher added to a shared informer.
type registration struct {
	informer cache.SharedIndexInformer
	handle   cache.ResourceEventHandlerRegistration
}

// removeHandlers takes the watcher's handlers off the shared informers, so
// a watcher of an ended leadership term stops enqueueing.
func (w *Watcher) removeHandlers() {
	for _, r := range w.handlers {
		_ = r.informer.RemoveEventHandler(r.handle)
	}
	w.handlers = nil
}

// handler only filters and enqueues: an update counts when the generation
// moved, which excludes resyncs and status- or metadata-only writes.
func (w *Watcher) handler(kind string) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if m, err := metaOf(obj); err == nil {
			w.queue.Add(objectKey{kind: kind, namespace: m.GetNamespace(), name: m.GetName()})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			w.rememberAdded(obj)
			enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if m, err := metaOf(obj); err == nil {
				w.queue.Add(objectKey{kind: kind, namespace: m.GetNamespace(), name: m.GetName(), deletedUID: string(m.GetUID())})
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, err1 := metaOf(oldObj)
			n, err2 := metaOf(newObj)
			if err1 == nil && err2 == nil && o.GetGeneration() != n.GetGeneration() {
				enqueue(newObj)
			}
		},
	}
}

// rememberAdded keeps obj's generation and spec as its add event carried
// them, unless an earlier add of it waits for its sync already.
func (w *Watcher) rememberAdded(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	spec, err := specOf(obj)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.added[string(m.GetUID())]; !ok {
		w.added[string(m.GetUID())] = seen{Generation: m.GetGeneration(), Spec: spec}
	}
}

// rememberAddedSeen puts back an added object a failed sync took.
func (w *Watcher) rememberAddedSeen(uid string, a seen) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.added[uid]; !ok {
		w.added[uid] = a
	}
}

// takeAdded returns, and forgets, the object of uid as its add event
// carried it.
func (w *Watcher) takeAdded(uid string) (seen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.added[uid]
	delete(w.added, uid)
	return a, ok
}

func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("watcher: unexpected object %T", obj)
	}
	return m, nil
}

// hasSynced reports whether the informers have listed once and this
// watcher's handlers have seen every listed object.
func (w *Watcher) hasSynced() bool {
	for _, r := range w.handlers {
		if !r.handle.HasSynced() {
			return false
		}
	}
	return true
}

// QueueDepth is how many objects wait to be compared with their records.
func (w *Watcher) QueueDepth() int { return w.queue.Len() }

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer w.queue.ShutDown()
	defer w.removeHandlers()
	kv, err := w.cfg.JetStream.KeyValue(ctx, events.BucketGenerations)
	if err != nil {
		return fmt.Errorf("watcher: kv %s: %w", events.BucketGenerations, err)
	}
	w.kv = kv
	if !cache.WaitForCacheSync(ctx.Done(), w.hasSynced) {
		return fmt.Errorf("watcher: caches did not sync: %w", ctx.Err())
	}
	w.cfg.Log.Info("watcher started", "namespace", w.cfg.Namespace)
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		for w.processNext(ctx) {
		}
	}()
	<-ctx.Done()
	// Return only once no sync is in flight, so whoever runs the watcher
	// next (another leader, a restart) never overlaps with this one.
	w.queue.ShutDown()
	<-worker
	return nil
}

func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	err := w.sync(ctx, key)
	w.mu.Lock()
	if err == nil {
		delete(w.failing, key)
	} else {
		w.failing[key] = err
	}
	w.mu.Unlock()
	if err == nil {
		w.queue.Forget(key)
		return true
	}
	if ctx.Err() == nil {
		w.cfg.Log.Warn("watcher: sync failed, retrying until it succeeds", "kind", key.kind, "namespace", key.namespace, "name", key.name,
			"attempt", w.queue.NumRequeues(key)+1, "err", err)
	}
	w.queue.AddRateLimited(key)
	return true
}

// Unpublished reports how many objects have a change (or a deletion) the
// watcher could not record yet, and one of their errors.
func (w *Watcher) Unpublished() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, err := range w.failing {
		return len(w.failing), fmt.Errorf("%s %s: %w", key.kind, cacheKey(key), err)
	}
	return 0, nil
}

// decision is what sync does with an object it compared with its record.
type decision int

const (
	skip   decision = iota // nothing new
	record                 // first sighting: remember the generation, emit nothing
	emit                   // the generation moved on: emit, then remember
)

// decide compares an object's generation with its KV record (nil when the
// object was never seen). A first sighting is recorded without an event:
// no VM can be pinned to a generation kvlive never saw differ.
func decide(last *seen, generation int64) decision {
	switch {
	case last == nil:
		return record
	case generation > last.Generation:
		return emit
	}
	return skip
}

// seen is the KV record per object UID.
type seen struct {
	Generation int64           `json:"generation"`
	Spec       json.RawMessage `json:"spec"`
}

// sync compares the object with its KV record and emits when it moved on.
func (w *Watcher) sync(ctx context.Context, key objectKey) error {
	if key.deletedUID != "" {
		w.takeAdded(key.deletedUID)
		return w.forget(ctx, key.deletedUID)
	}
	obj, ok, err := w.informers[key.kind].GetIndexer().GetByKey(cacheKey(key))
	if err != nil || !ok {
		return err // deleted: nothing to emit
	}
	m, _ := metaOf(obj)
	spec, err := specOf(obj)
	if err != nil {
		return err
	}
	uid := string(m.GetUID())
	entry, err := w.kv.Get(ctx, uid)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("watcher: read %s: %w", uid, err)
	}
	var last *seen
	if entry != nil {
		last = &seen{}
		if err := json.Unmarshal(entry.Value(), last); err != nil {
			w.cfg.Log.Warn("watcher: unreadable KV record, treating the object as new", "uid", uid, "err", err)
			last = &seen{}
		}
	}
	var rev uint64
	if entry != nil {
		rev = entry.Revision()
	}
	added, wasAdded := w.takeAdded(uid)
	switch decide(last, m.GetGeneration()) {
	case skip:
		return nil
	case record:
		// A first sighting is the object as its add event carried it: one
		// edited since (before this sync) is recorded as added, and the
		// edit emitted below.
		first := seen{Generation: m.GetGeneration(), Spec: spec}
		if wasAdded && added.Generation < first.Generation {
			first = added
		}
		rec, _ := json.Marshal(first)
		rev, err = w.kv.Create(ctx, uid, rec)
		switch {
		case events.Conflict(err):
			// The object has a record the read missed: a replicated
			// bucket's read answered by a replica behind the leader.
			// Compared again (the queue's backoff), not taken as seen: the
			// object may have moved on from that record.
			if wasAdded {
				w.rememberAddedSeen(uid, added)
			}
			return fmt.Errorf("watcher: %s has a record the read of it missed; reading it again", uid)
		case err != nil:
			if wasAdded {
				w.rememberAddedSeen(uid, added)
			}
			return fmt.Errorf("watcher: record %s: %w", uid, err)
		}
		if first.Generation == m.GetGeneration() {
			return nil
		}
		w.cfg.Log.Info("watcher: an object changed between its add and its first look; its change is emitted",
			"kind", key.kind, "name", cacheKey(key), "added", first.Generation, "generation", m.GetGeneration())
		last = &first
	}
	ref := events.Ref{Kind: key.kind, Namespace: key.namespace, Name: key.name}
	change := events.Changed{
		Object: ref, UID: uid, Generation: m.GetGeneration(),
		OldGeneration: last.Generation, OldSpec: last.Spec, NewSpec: spec,
		ObservedAt: w.cfg.Clock.Now().UTC(),
	}
	if err := w.publish(ctx, change); err != nil {
		return err
	}
	rec, _ := json.Marshal(seen{Generation: m.GetGeneration(), Spec: spec})
	if _, err := w.kv.Update(ctx, uid, rec, rev); err != nil {
		return fmt.Errorf("watcher: record %s generation %d: %w", uid, m.GetGeneration(), err)
	}
	return nil
}

// forget removes a deleted object's record: the generations bucket holds
// only objects that exist. A re-created object has a new UID, so a record
// of it is never removed here.
func (w *Watcher) forget(ctx context.Context, uid string) error {
	if err := w.kv.Purge(ctx, uid); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("watcher: forget deleted %s: %w", uid, err)
	}
	return nil
}

func (w *Watcher) publish(ctx context.Context, change events.Changed) error {
	id := events.EventID(change.Object.Kind, change.UID, change.Generation)
	ctx, span := w.tracer.Start(ctx, "watcher.observe "+change.Object.String(),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("kvlive.event.id", id),
			attribute.String("kvlive.object", change.Object.String()),
			attribute.Int64("kvlive.generation", change.Generation),
			attribute.Int64("kvlive.generation.old", change.OldGeneration),
		))
	defer span.End()
	typ := events.TypeInstancetypeChanged
	if change.Object.IsPreference() {
		typ = events.TypePreferenceChanged
	}
	body, err := events.Encode(typ, id, "kvlive/watcher", change.Object.String(), change.ObservedAt, &change)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return err
	}
	msg := events.NewMsg(events.ChangedSubject(change.Object.Kind), id, typ, body)
	w.prop.Inject(ctx, events.HeaderCarrier(msg.Header))
	if _, err := w.cfg.JetStream.PublishMsg(ctx, msg); err != nil {
		span.SetStatus(codes.Error, err.Error())
		return fmt.Errorf("watcher: publish %s: %w", id, err)
	}
	w.cfg.Log.Info("instance type changed", "event", id, "object", change.Object.String(),
		"generation", change.Generation, "previous", change.OldGeneration)
	return nil
}

func cacheKey(k objectKey) string {
	if k.namespace == "" {
		return k.name
	}
	return k.namespace + "/" + k.name
}
