package inmemory

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
)

// fakeClient is what both fake clientsets are: reactors over a tracker.
type fakeClient interface {
	Tracker() clienttesting.ObjectTracker
	PrependReactor(verb, resource string, reaction clienttesting.ReactionFunc)
	PrependWatchReactor(resource string, reaction clienttesting.WatchReactionFunc)
}

// serveWatches puts a tracker in front of c's own that hands every write to
// watchers with unbounded buffers. The fake clientsets' watchers hold 100
// events and then panic ("channel full"); a rollout writes faster than an
// informer drains on a busy machine. Writes are serialised with their
// events, so every watcher sees them in the order they were made.
func serveWatches(c fakeClient) {
	t := &tracker{ObjectTracker: c.Tracker()}
	c.PrependReactor("*", "*", clienttesting.ObjectReaction(t))
	c.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		return true, t.watch(action.GetResource(), action.GetNamespace()), nil
	})
}

// tracker writes through the fake clientset's tracker and tells its own
// watchers. Its Add is the embedded tracker's: objects added before any
// watch are listed, not watched.
type tracker struct {
	clienttesting.ObjectTracker
	mu       sync.Mutex
	watchers map[*watcher]struct{}
}

func (t *tracker) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.CreateOptions) error {
	return t.writeAt(gvr, obj, ns, func() error { return t.ObjectTracker.Create(gvr, obj, ns, opts...) })
}

func (t *tracker) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.UpdateOptions) error {
	return t.writeAt(gvr, obj, ns, func() error { return t.ObjectTracker.Update(gvr, obj, ns, opts...) })
}

func (t *tracker) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	return t.writeAt(gvr, obj, ns, func() error { return t.ObjectTracker.Patch(gvr, obj, ns, opts...) })
}

func (t *tracker) Apply(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	return t.writeAt(gvr, obj, ns, func() error { return t.ObjectTracker.Apply(gvr, obj, ns, opts...) })
}

func (t *tracker) Delete(gvr schema.GroupVersionResource, ns, name string, opts ...metav1.DeleteOptions) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, absent := t.Get(gvr, ns, name)
	if err := t.ObjectTracker.Delete(gvr, ns, name, opts...); err != nil {
		return err
	}
	if absent == nil {
		t.tell(gvr, ns, watch.Deleted, old)
	}
	return nil
}

// writeAt makes a write of obj as gvr in ns and tells the watchers what it
// stored: Added when obj was not there before, Modified when it was.
func (t *tracker) writeAt(gvr schema.GroupVersionResource, obj runtime.Object, ns string, do func() error) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return do()
	}
	if ns == "" {
		ns = m.GetNamespace()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, absent := t.Get(gvr, ns, m.GetName())
	if err := do(); err != nil {
		return err
	}
	stored, err := t.Get(gvr, ns, m.GetName())
	if err != nil {
		return nil // written, and gone already: nothing to tell
	}
	typ := watch.Modified
	if absent != nil {
		typ = watch.Added
	}
	t.tell(gvr, ns, typ, stored)
	return nil
}

// tell queues an event for every watcher of gvr in ns (or in all
// namespaces), each with its own copy. t.mu is held.
func (t *tracker) tell(gvr schema.GroupVersionResource, ns string, typ watch.EventType, obj runtime.Object) {
	for w := range t.watchers {
		if w.gvr == gvr && (w.ns == "" || w.ns == ns) {
			w.queue(watch.Event{Type: typ, Object: obj.DeepCopyObject()})
		}
	}
}

// watch starts a watcher of gvr in ns ("" for all).
func (t *tracker) watch(gvr schema.GroupVersionResource, ns string) watch.Interface {
	w := &watcher{gvr: gvr, ns: ns, result: make(chan watch.Event), wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.stop = func() {
		t.mu.Lock()
		delete(t.watchers, w)
		t.mu.Unlock()
		close(w.done)
	}
	t.mu.Lock()
	if t.watchers == nil {
		t.watchers = map[*watcher]struct{}{}
	}
	t.watchers[w] = struct{}{}
	t.mu.Unlock()
	go w.run()
	return w
}

// watcher is a watch.Interface with an unbounded buffer: queue never
// blocks, and run hands the events on in order.
type watcher struct {
	gvr      schema.GroupVersionResource
	ns       string
	result   chan watch.Event
	wake     chan struct{}
	done     chan struct{}
	stop     func()
	stopOnce sync.Once
	mu       sync.Mutex
	pending  []watch.Event
}

func (w *watcher) queue(ev watch.Event) {
	w.mu.Lock()
	w.pending = append(w.pending, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) run() {
	defer close(w.result)
	for {
		w.mu.Lock()
		batch := w.pending
		w.pending = nil
		w.mu.Unlock()
		for _, ev := range batch {
			select {
			case w.result <- ev:
			case <-w.done:
				return
			}
		}
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
	}
}

// Stop ends the watch; ResultChan is closed once its goroutine ends.
func (w *watcher) Stop() { w.stopOnce.Do(w.stop) }

// ResultChan delivers the events in the order they were written.
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }
