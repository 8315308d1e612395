package standin

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"

	"k8s.io/client-go/kubernetes"
	"kubevirt.io/client-go/kubevirt"
)

// Config configures the stand-in controller.
type Config struct {
	// Kube and Virt are the clients the stand-in writes through.
	Kube kubernetes.Interface
	Virt kubevirt.Interface
	// VMs, VMIs and KubeVirts are informers (of the process's shared
	// cache) the stand-in reads VMs, VMIs and the KubeVirt CR from: a
	// cache of whole, typed objects (kube.NewWholeCache), since it starts
	// VMIs from VM templates.
	VMs, VMIs, KubeVirts cache.SharedIndexInformer
	Log                  *slog.Logger
	// Workers is how many VMs are reconciled at once.
	Workers int
	// MigrationDuration is how long each live migration takes, from its
	// start to its end on the target (zero: it ends at the next look).
	MigrationDuration time.Duration
	// ReactionDelay is how long the stand-in takes to react to a running
	// VM whose pins moved. KubeVirt's virt-controller looks at a VM when
	// its work queue gets to it; until then the VM shows what it said
	// before (an earlier change's RestartRequired, say), which kvlive must
	// not take for the answer. Zero reacts at the next look.
	ReactionDelay time.Duration
	// MigrationBackoff is how long a VMI's next migration waits after one
	// failed, doubling for each further failure since its last success,
	// as KubeVirt's migration controller holds a workload update's
	// migration (handleMigrationBackoff). Zero is KubeVirt's 20 s.
	MigrationBackoff time.Duration
	// MigrationObjects makes the stand-in keep a
	// VirtualMachineInstanceMigration for each migration, as KubeVirt's
	// workload updater and migration controller do: created at its start
	// (its UID is the VMI's migrationState.migrationUid), and made final
	// (Succeeded or Failed) FinalizeLag after the VMI shows the end. Like
	// virt-controller, the stand-in then counts a migration against
	// parallelMigrationsPerCluster until its object is final. Off, a
	// migration has no object and counts until the VMI shows its end (an
	// API server without KubeVirt's migration CRD).
	MigrationObjects bool
	// FinalizeLag is how long after the VMI shows a migration's end its
	// object goes final (KubeVirt: up to a quarter of a second on a busy
	// controller). Zero finalises it at the next look.
	FinalizeLag time.Duration
}

// Controller is the virt-controller stand-in.
type Controller struct {
	cfg   Config
	vms   cache.SharedIndexInformer
	vmis  cache.SharedIndexInformer
	queue workqueue.TypedRateLimitingInterface[string]
	// busy counts the VMs being reconciled; last is when the latest
	// reconcile ended (Unix nanoseconds).
	busy atomic.Int32
	last atomic.Int64
	mig  migrations
	lag  lag
}

// lag is when the stand-in first saw each VM's moved pins, while its
// reaction waits out Config.ReactionDelay.
type lag struct {
	mu   sync.Mutex
	seen map[string]seenPins
}

type seenPins struct {
	pins string
	at   time.Time
}

// New builds the stand-in; Run starts it.
func New(cfg Config) *Controller {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Workers = max(cfg.Workers, 1)
	if cfg.MigrationBackoff <= 0 {
		cfg.MigrationBackoff = defaultMigrationBackoff
	}
	c := &Controller{
		mig:  migrations{running: map[string]*migration{}, evicted: map[string]bool{}, failed: map[string]failures{}, ended: map[string]bool{}},
		lag:  lag{seen: map[string]seenPins{}},
		cfg:  cfg,
		vms:  cfg.VMs,
		vmis: cfg.VMIs,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kvlive-standin"}),
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}
	_, _ = c.vms.AddEventHandler(handler)
	_, _ = c.vmis.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		// A VMI stopped for a restart brings its VM's Start on.
		DeleteFunc: enqueue,
	})
	return c
}

// Run reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.vms.HasSynced, c.vmis.HasSynced) {
		return fmt.Errorf("standin: caches did not sync: %w", ctx.Err())
	}
	for range c.cfg.Workers {
		go func() {
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	c.busy.Add(1)
	defer func() {
		c.queue.Done(key)
		c.last.Store(time.Now().UnixNano())
		c.busy.Add(-1)
	}()
	if err := c.sync(ctx, key); err != nil {
		if c.queue.NumRequeues(key) < 10 {
			c.queue.AddRateLimited(key)
			return true
		}
		c.cfg.Log.Warn("standin: giving up on VM", "vm", key, "err", err)
	}
	c.queue.Forget(key)
	return true
}

// Settled reports when the stand-in last finished reconciling a VM and
// whether it has nothing queued or in hand now, so a test (or the bench)
// can tell when KubeVirt's reaction to a rollout is over. A VM waiting out
// a retry's backoff is not counted as queued; one whose reaction waits out
// the ReactionDelay is.
func (c *Controller) Settled() (last time.Time, idle bool) {
	c.lag.mu.Lock()
	lagging := len(c.lag.seen)
	c.lag.mu.Unlock()
	idle = c.queue.Len() == 0 && c.busy.Load() == 0 && lagging == 0
	return time.Unix(0, c.last.Load()), idle
}

// reactAfter is how long the reaction to key's moved pins still waits
// (zero: react now); reacted forgets the wait once the pins are handled.
func (c *Controller) reactAfter(key, pins string) time.Duration {
	if c.cfg.ReactionDelay <= 0 {
		return 0
	}
	c.lag.mu.Lock()
	defer c.lag.mu.Unlock()
	p, ok := c.lag.seen[key]
	if !ok || p.pins != pins {
		p = seenPins{pins: pins, at: time.Now()}
		c.lag.seen[key] = p
	}
	return time.Until(p.at.Add(c.cfg.ReactionDelay))
}

func (c *Controller) reacted(key string) {
	c.lag.mu.Lock()
	delete(c.lag.seen, key)
	c.lag.mu.Unlock()
}

func (c *Controller) sync(ctx context.Context, key string) error {
	obj, ok, err := c.vms.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		c.forget(key)
		return err
	}
	vm := obj.(*virtv1.VirtualMachine)
	changed, err := c.ensurePins(ctx, vm)
	if err != nil || changed {
		return err // the status write brings the VM back through the queue
	}
	var vmi *virtv1.VirtualMachineInstance
	if obj, ok, _ := c.vmis.GetIndexer().GetByKey(key); ok {
		vmi = obj.(*virtv1.VirtualMachineInstance)
	}
	if acted, err := c.stateChange(ctx, vm, vmi); acted || err != nil {
		return err
	}
	if vmi == nil {
		c.forget(key)
		_, err := c.afterEviction(ctx, vm)
		return err
	}
	if err := c.liveUpdate(ctx, vm, vmi); err != nil {
		return err
	}
	return c.migrate(ctx, vmi)
}

// stageRollout reports whether the KubeVirt CR asks for the Stage strategy.
func (c *Controller) stageRollout() bool {
	var kv *virtv1.KubeVirt
	for _, o := range c.cfg.KubeVirts.GetStore().List() {
		kv = o.(*virtv1.KubeVirt)
	}
	if kv == nil {
		return false
	}
	s := kv.Spec.Configuration.VMRolloutStrategy
	return s != nil && *s == virtv1.VMRolloutStrategyStage
}
