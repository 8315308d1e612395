package kube

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
)

// RefIndex is the VM informer index of referenced objects, keyed by
// events.Ref.Key: `<kind>/<namespace|_>/<name>`.
const RefIndex = "kvlive.io/referenced"

// OwnerIndex is the revision informer index by the UID of the revision's
// controller (the VM that owns it), in buckets of UIDs (ownerBucket):
// read it with OwnedRevisions.
const OwnerIndex = "kvlive.io/owner"

// Cache is the process's informer cache: VMs (indexed by the instance types
// and preferences they reference), VMIs, the KubeVirt CR, instancetype
// ControllerRevisions and the four instancetype/preference kinds, all from
// one shared factory, so every stage in a process (and the stand-in in the
// demo) shares one list and one watch per kind. The wiring owns its life:
// Start, WaitForSync, Shutdown.
type Cache struct {
	Clients   Clients
	factory   informers.SharedInformerFactory
	vms       cache.SharedIndexInformer
	vmis      cache.SharedIndexInformer
	kubevirts cache.SharedIndexInformer
	revisions cache.SharedIndexInformer
	objects   ObjectInformers
	// migrations, once WatchMigrations added it, is the informer of the
	// VirtualMachineInstanceMigrations in namespace.
	migrations cache.SharedIndexInformer
	namespace  string
	started    startedSpecs
	// readRevision reads a ControllerRevision: from the API server, or
	// from the objects a CacheOf was given.
	readRevision func(ctx context.Context, namespace, name string) (*appsv1.ControllerRevision, error)
	// static is a CacheOf's: its indexers were filled, nothing lists.
	static bool
	// trim is set when VMs are trimmed (TrimUnread): the start specs read
	// are trimmed the same way, so templates compare like for like.
	trim bool
	// selected runs a revision informer StartCacheFor made outside the
	// factory.
	selected sync.WaitGroup
	// missed holds the pinned revisions StartCacheFor's selection did not
	// bring, read one by one (pinsMissed); written before the cache is
	// handed out, read only after.
	missed map[string]any
	// life is the context Start was given: the cache's reads of the API
	// server (start revisions) end with it.
	life atomic.Pointer[context.Context]
}

// NewCache registers the informers over namespace ("" for all); nothing
// lists or watches until Start. It keeps of each VM, VMI and revision only
// what kvlive reads, in stored forms (TrimUnread).
func NewCache(c Clients, namespace string) (*Cache, error) {
	ca, err := newCache(c, namespace, true, true)
	if err != nil {
		return nil, err
	}
	return ca, ca.indexRevisions()
}

// NewWholeCache is NewCache keeping VMs and VMIs whole but for their
// managed fields (StripUnread): the cache a process shares with the
// virt-controller stand-in, which starts VMIs from VM templates.
func NewWholeCache(c Clients, namespace string) (*Cache, error) {
	ca, err := newCache(c, namespace, true, false)
	if err != nil {
		return nil, err
	}
	return ca, ca.indexRevisions()
}

// newCache registers the informers; the revision informer only with
// revisions (StartCacheFor adds its own once it knows what to select),
// trimming objects with trim.
func newCache(c Clients, namespace string, revisions, trim bool) (*Cache, error) {
	transform := StripUnread
	if trim {
		transform = TrimUnread
	}
	f := informers.NewSharedInformerFactoryWithOptions(c.Kube, ResyncPeriod, informers.WithNamespace(namespace), informers.WithTransform(transform))
	ca := &Cache{
		namespace: namespace,
		trim:      trim,
		Clients:   c,
		factory:   f,
		vms:       vmInformer(f, c, namespace),
		vmis:      vmiInformer(f, c, namespace),
		kubevirts: kubeVirtInformer(f, c),
		objects:   objectInformers(f, c, namespace),
	}
	if revisions {
		ca.revisions = revisionInformer(f, c, namespace)
	}
	if err := ca.vms.AddIndexers(cache.Indexers{RefIndex: indexRefs, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}); err != nil {
		return nil, fmt.Errorf("kube: VM index: %w", err)
	}
	ca.readRevision = func(ctx context.Context, namespace, name string) (*appsv1.ControllerRevision, error) {
		return c.Kube.AppsV1().ControllerRevisions(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	return ca, nil
}

func (c *Cache) indexRevisions() error {
	if err := c.revisions.AddIndexers(cache.Indexers{OwnerIndex: indexOwner}); err != nil {
		return fmt.Errorf("kube: revision index: %w", err)
	}
	return nil
}

// Start starts every informer; they stop when ctx ends, and Shutdown waits
// for them.
func (c *Cache) Start(ctx context.Context) {
	c.life.Store(&ctx)
	c.factory.Start(ctx.Done())
}

// lifeContext is the context Start was given (Background before Start).
func (c *Cache) lifeContext() context.Context {
	if ctx := c.life.Load(); ctx != nil {
		return *ctx
	}
	return context.Background()
}

// WaitForSync waits until every informer has listed once, or timeout
// passes, or ctx ends, and says which kinds did not sync.
func (c *Cache) WaitForSync(ctx context.Context, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// Poll every syncPoll until the informers kvlive reads have synced;
	// the factory's own wait, which looks every 100 ms, then finds them
	// synced at its first look (and covers any informer HasSynced misses).
	_ = wait.PollUntilContextCancel(ctx, syncPoll, true, func(context.Context) (bool, error) { return c.HasSynced(), nil })
	var missing []string
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			missing = append(missing, typeName(typ))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kube: caches of %v did not sync: %w", missing, errors.Join(ctx.Err(), context.Cause(ctx)))
	}
	return nil
}

// syncPoll is how often a wait for the informers' first lists looks at
// them. client-go's WaitForCacheSync looks every 100 ms: a one-shot command
// that waits for two syncs (StartCacheFor) would wait out up to a fifth of
// a second after its lists arrived.
const syncPoll = 5 * time.Millisecond

// Shutdown waits for every informer goroutine to end; call it after the
// context given to Start ended.
func (c *Cache) Shutdown() {
	c.factory.Shutdown()
	c.selected.Wait()
}

func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// VMInformer exposes the VM informer so stages can add handlers.
func (c *Cache) VMInformer() cache.SharedIndexInformer { return c.vms }

// VMIInformer exposes the VMI informer so stages can add handlers.
func (c *Cache) VMIInformer() cache.SharedIndexInformer { return c.vmis }

// KubeVirtInformer exposes the KubeVirt CR informer.
func (c *Cache) KubeVirtInformer() cache.SharedIndexInformer { return c.kubevirts }

// ObjectInformers exposes the four instancetype/preference informers, keyed
// by kind, for the watcher's handlers.
func (c *Cache) ObjectInformers() ObjectInformers { return c.objects }

func indexRefs(obj any) ([]string, error) {
	switch o := obj.(type) {
	case *virtv1.VirtualMachine:
		return instancetype.RefKeys(o), nil
	case *storedVM:
		if o.typed != nil {
			return instancetype.RefKeys(o.typed), nil
		}
		// What RefKeys reads, the namespace and the spec's matchers, not
		// the whole VM: client-go indexes the old and the new object of
		// every update.
		var vm virtv1.VirtualMachine
		vm.Namespace = o.meta.Namespace
		var it virtv1.InstancetypeMatcher
		var pref virtv1.PreferenceMatcher
		if o.refs&specInstancetype != 0 {
			it = virtv1.InstancetypeMatcher{Name: o.instancetype.name, Kind: o.instancetype.kind}
			vm.Spec.Instancetype = &it
		}
		if o.refs&specPreference != 0 {
			pref = virtv1.PreferenceMatcher{Name: o.preference.name, Kind: o.preference.kind}
			vm.Spec.Preference = &pref
		}
		return instancetype.RefKeys(&vm), nil
	}
	return nil, nil
}

// ownerBuckets is how many keys the owner index has at most.
const ownerBuckets = 1 << 12

// ownerBucket is the OwnerIndex key of a revision whose controller has
// uid: one of 4,096 buckets, by a hash of the UID (FNV-1a), so UIDs that
// share a prefix (a seeded demo's, a test's) spread as random ones do. A
// key per owner would make the index hold a set per VM (client-go keeps
// one map per key, about 200 bytes for a set of one); the buckets hold the
// same keys for a fraction of that, and a lookup reads one bucket (tens of
// revisions in a fleet of 100,000 VMs) for the revisions uid controls.
func ownerBucket(uid types.UID) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return strconv.FormatUint(uint64(h.Sum32()%ownerBuckets), 16)
}

func indexOwner(obj any) ([]string, error) {
	if uid := controllerUID(obj); uid != "" {
		return []string{ownerBucket(uid)}, nil
	}
	return nil, nil
}

// controllerUID is the UID of the controller of a cached revision, stored
// or typed, or "".
func controllerUID(obj any) types.UID {
	switch o := obj.(type) {
	case *storedRevision:
		return o.controllerUID()
	case *appsv1.ControllerRevision:
		if owner := metav1.GetControllerOf(o); owner != nil {
			return owner.UID
		}
	}
	return ""
}

// OwnedRevisions returns the cached instancetype ControllerRevisions whose
// controller is the object of uid (a VM). Callers must not mutate them.
func (c *Cache) OwnedRevisions(uid string) []*appsv1.ControllerRevision {
	objs, _ := c.revisions.GetIndexer().ByIndex(OwnerIndex, ownerBucket(types.UID(uid)))
	var out []*appsv1.ControllerRevision
	for _, o := range objs {
		if controllerUID(o) == types.UID(uid) {
			out = append(out, RevisionOf(o))
		}
	}
	return out
}

// RevisionInformer exposes the instancetype ControllerRevision informer.
func (c *Cache) RevisionInformer() cache.SharedIndexInformer { return c.revisions }

// Referencing returns the VMs that reference ref, optionally narrowed to a
// namespace and a label selector. The objects are the informer's: callers
// must not mutate them.
func (c *Cache) Referencing(ref events.Ref, namespace string, selector labels.Selector) ([]*virtv1.VirtualMachine, error) {
	objs, err := c.vms.GetIndexer().ByIndex(RefIndex, ref.Key())
	if err != nil {
		return nil, fmt.Errorf("kube: index %s: %w", ref.Key(), err)
	}
	vms := make([]*virtv1.VirtualMachine, 0, len(objs))
	for _, o := range objs {
		m, _ := meta.Accessor(o)
		if namespace != "" && m.GetNamespace() != namespace {
			continue
		}
		if selector != nil && !selector.Matches(labels.Set(m.GetLabels())) {
			continue
		}
		vms = append(vms, asVM(o))
	}
	return vms, nil
}

// VMs lists the cached VMs of namespace ("" for all) that selector (nil
// for all) matches. The objects are the informer's: callers must not
// mutate them.
func (c *Cache) VMs(namespace string, selector labels.Selector) []*virtv1.VirtualMachine {
	objs := c.vmObjects(namespace, selector)
	vms := make([]*virtv1.VirtualMachine, 0, len(objs))
	for _, o := range objs {
		vms = append(vms, asVM(o))
	}
	return vms
}

// VMsWithoutTemplates yields the cached VMs of namespace ("" for all)
// that selector (nil for all) matches, one at a time and without their
// templates (Spec.Template is nil): for readers of references, pins and
// status across the fleet (drift, on every metrics scrape), which so
// neither hold the fleet decoded at once nor decode a template. Each VM
// is read into the same struct: it holds until the loop moves on, and a
// caller keeps what it needs of it (its strings, which are the cache's),
// never the VM. At 100,000 VMs a struct apiece was some 70 MB of garbage
// a scan (BenchmarkMeasure). Callers must not mutate the VMs.
func (c *Cache) VMsWithoutTemplates(namespace string, selector labels.Selector) iter.Seq[*virtv1.VirtualMachine] {
	return func(yield func(*virtv1.VirtualMachine) bool) {
		var (
			vm   virtv1.VirtualMachine
			refs vmRefs
		)
		for _, o := range c.vmObjects(namespace, selector) {
			switch o := o.(type) {
			case *storedVM:
				o.fillWithoutTemplate(&vm, &refs)
			case *virtv1.VirtualMachine:
				vm = *o
				vm.Spec.Template = nil
			default:
				continue
			}
			if !yield(&vm) {
				return
			}
		}
	}
}

// vmObjects are the VM informer's objects of namespace ("" for all) that
// selector (nil for all) matches.
func (c *Cache) vmObjects(namespace string, selector labels.Selector) []any {
	var objs []any
	if namespace == "" {
		objs = c.vms.GetIndexer().List()
	} else {
		objs, _ = c.vms.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	}
	if selector == nil {
		return objs
	}
	return slices.DeleteFunc(objs, func(o any) bool {
		m, _ := meta.Accessor(o)
		return !selector.Matches(labels.Set(m.GetLabels()))
	})
}

// HasSynced reports whether every informer has listed once: before that
// the cache holds part of the cluster. A CacheOf holds all it was given.
// StartCacheFor's revision informer counts once it exists: it is made
// after the others have synced.
func (c *Cache) HasSynced() bool {
	if c.static {
		return true
	}
	for _, inf := range []cache.SharedIndexInformer{c.vms, c.vmis, c.kubevirts, c.revisions} {
		if inf != nil && !inf.HasSynced() {
			return false
		}
	}
	return c.objects.HasSynced()
}

// VM returns the cached VM, or nil.
func (c *Cache) VM(namespace, name string) *virtv1.VirtualMachine {
	o, ok, _ := c.vms.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	return asVM(o)
}

// VMI returns the cached VMI of a VM, or nil when it is not running.
func (c *Cache) VMI(namespace, name string) *virtv1.VirtualMachineInstance {
	o, ok, _ := c.vmis.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	return asVMI(o)
}

// VMIStatus returns the status of a VM's cached VMI, as the cache keeps
// it (the fields instancetype.TrimVMI keeps), without a VMI built for the
// read, and false when the VM is not running. Callers must not mutate it.
func (c *Cache) VMIStatus(namespace, name string) (virtv1.VirtualMachineInstanceStatus, bool) {
	o, ok, _ := c.vmis.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return virtv1.VirtualMachineInstanceStatus{}, false
	}
	switch o := o.(type) {
	case *storedVMI:
		return o.status(), true
	case *virtv1.VirtualMachineInstance:
		return o.Status, true
	}
	return virtv1.VirtualMachineInstanceStatus{}, false
}

// Revision returns a cached instancetype ControllerRevision. Callers must
// not mutate it.
func (c *Cache) Revision(namespace, name string) (*appsv1.ControllerRevision, bool) {
	o, ok := c.revisionObject(namespace, name)
	if !ok {
		return nil, false
	}
	return RevisionOf(o), true
}

// revisionObject is the revision informer's object (or one the cache
// kept of a pin its informer missed) named namespace/name.
func (c *Cache) revisionObject(namespace, name string) (any, bool) {
	key := namespace + "/" + name
	if o, ok, _ := c.revisions.GetIndexer().GetByKey(key); ok {
		return o, true
	}
	o, ok := c.missed[key]
	return o, ok
}

// RevisionLabels returns the labels of a cached instancetype
// ControllerRevision (the object, generation and UID it snapshots), read
// where they are stored rather than from a revision built for the read.
// Callers must not mutate them.
func (c *Cache) RevisionLabels(namespace, name string) (map[string]string, bool) {
	o, _ := c.revisionObject(namespace, name)
	switch o := o.(type) {
	case *storedRevision:
		return o.labels, true
	case *appsv1.ControllerRevision:
		return o.Labels, true
	}
	return nil, false
}

// KubeVirt returns the cached KubeVirt CR, or nil when there is none.
func (c *Cache) KubeVirt() *virtv1.KubeVirt {
	for _, o := range c.kubevirts.GetStore().List() {
		return o.(*virtv1.KubeVirt)
	}
	return nil
}

// Cluster reads the live-update configuration from the KubeVirt CR.
func (c *Cache) Cluster() instancetype.Cluster {
	return instancetype.ClusterFromKubeVirt(c.KubeVirt())
}

// Object returns the live instance type or preference ref names, or nil.
func (c *Cache) Object(ref events.Ref) any {
	inf, ok := c.objects[ref.Kind]
	if !ok {
		return nil
	}
	key := ref.Name
	if !ref.IsClusterScoped() {
		key = ref.Namespace + "/" + ref.Name
	}
	o, ok, _ := inf.GetIndexer().GetByKey(key)
	if !ok {
		return nil
	}
	return o
}

// DefaultSyncTimeout bounds how long a one-shot command waits for the
// caches' first list before it says which kinds did not arrive.
const DefaultSyncTimeout = time.Minute

// StartCacheFor is StartCache for planning a few objects' VMs: its revision
// informer holds only the revisions involved names (instancetype.Involvement:
// those of the objects involved, of the generations their pins name),
// asked once the other informers have synced (from the VMs they hold), so
// the time to plan grows neither with the cluster's other revisions nor
// with the superseded ones. A nil involved caches every instancetype
// revision (StartCache).
func StartCacheFor(ctx context.Context, c Clients, namespace string, timeout time.Duration, involved func(*Cache) instancetype.Involvement) (_ *Cache, stop func(), _ error) {
	if err := Preflight(ctx, c, namespace); err != nil {
		return nil, nil, err
	}
	ca, err := newCache(c, namespace, involved == nil, true)
	if err == nil && involved == nil {
		err = ca.indexRevisions()
	}
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stop = func() { cancel(); ca.Shutdown() }
	ca.Start(ctx)
	err = ca.WaitForSync(ctx, timeout)
	if err == nil && involved != nil {
		err = ca.selectRevisions(ctx, namespace, timeout, involved(ca))
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return ca, stop, nil
}

// selectRevisions runs, until ctx ends, an informer of namespace's
// revisions of the objects involved names, of the generations its pins
// name (revisionsOf), outside the factory, and waits for its first list;
// then reads, one GET each, the pins the selection missed (pinsMissed).
func (c *Cache) selectRevisions(ctx context.Context, namespace string, timeout time.Duration, involved instancetype.Involvement) error {
	list, w := revisionListWatch(c.Clients, namespace, revisionsOf(involved.Objects, generationsOf(involved.Pins)))
	c.revisions = newInformer(&appsv1.ControllerRevision{}, list, w, ResyncPeriod)
	if err := c.revisions.SetTransform(TrimUnread); err != nil {
		return fmt.Errorf("kube: revision transform: %w", err)
	}
	if err := c.indexRevisions(); err != nil {
		return err
	}
	c.selected.Go(func() { c.revisions.RunWithContext(ctx) })
	if err := waitSynced(ctx, timeout, c.revisions); err != nil {
		return err
	}
	return c.pinsMissed(ctx, timeout, involved.Pins)
}

// pinsMissed reads the pinned revisions (namespace/name keys) the
// selection did not bring, one GET each, fetchWorkers at a time, into
// c.missed, so a plan finds every pinned revision there is whatever its
// labels say (a revision whose name does not end in its generation label,
// a pin naming a revision of another object); one not found stays
// missing, and the plan says so.
func (c *Cache) pinsMissed(ctx context.Context, timeout time.Duration, pins []string) error {
	var missed []string
	for _, key := range pins {
		if _, ok, _ := c.revisions.GetIndexer().GetByKey(key); !ok {
			missed = append(missed, key)
		}
	}
	if len(missed) == 0 {
		return nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var mu sync.Mutex
	c.missed = make(map[string]any, len(missed))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchWorkers)
	for _, key := range missed {
		g.Go(func() error {
			namespace, name, _ := cache.SplitMetaNamespaceKey(key)
			cr, err := c.readRevision(ctx, namespace, name)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("kube: the pinned ControllerRevision %s: %w", key, err)
			}
			stored, err := TrimUnread(cr)
			if err != nil {
				return err
			}
			mu.Lock()
			c.missed[key] = stored
			mu.Unlock()
			return nil
		})
	}
	return g.Wait()
}

// fetchWorkers is how many GETs of pinned revisions the label selection
// missed run at once.
const fetchWorkers = 8

// waitSynced waits until inf has listed once, or timeout passes, or ctx
// ends.
func waitSynced(ctx context.Context, timeout time.Duration, inf cache.SharedIndexInformer) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err := wait.PollUntilContextCancel(ctx, syncPoll, true, func(context.Context) (bool, error) { return inf.HasSynced(), nil })
	if err != nil {
		return fmt.Errorf("kube: the cache of ControllerRevisions did not sync: %w", context.Cause(ctx))
	}
	return nil
}

// StartCache checks the API server answers and lets kvlive read every kind
// (Preflight), builds a Cache over namespace, starts it and waits for it to
// sync within timeout. stop ends the informers and waits for them.
func StartCache(ctx context.Context, c Clients, namespace string, timeout time.Duration) (_ *Cache, stop func(), _ error) {
	return StartCacheFor(ctx, c, namespace, timeout, nil)
}
