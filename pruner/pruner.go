package pruner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/internal/telemetry"
)

// maxRetries is how often a VM whose pruning failed is retried at once;
// past it the failure is logged and counted, and the VM is looked at again
// at its next change or the informers' resync.
const maxRetries = 5

// Config configures a Pruner.
type Config struct {
	Fleet *kube.Cache
	// Retention is how many superseded revisions per VM and reference are
	// kept (DefaultRetention); negative turns pruning off.
	Retention int
	Log       *slog.Logger
	Metrics   *telemetry.Metrics
	// Busy, when set, reports whether kvlive is moving VMs (the applier's
	// Activity); pruning waits while it is, MaxYield at a stretch.
	Busy func() bool
	// MaxYield bounds how long pruning waits for Busy to end before it
	// goes on beside the rollout; zero means DefaultMaxYield.
	MaxYield time.Duration
}

// workers is how many VMs are pruned at once (each a read and a delete or
// two): a rollout of 10,000 VMs leaves 10,000 revisions to delete, which
// one at a time took the API server here about two minutes, after the
// rollout (the pruner waits for it).
const workers = 4

// DefaultMaxYield is how long pruning waits at most for the VMs being
// moved: a rollout shorter than that shares the API server with no
// deletion; a longer one does after it.
const DefaultMaxYield = 2 * time.Minute

// yieldPoll is how often a waiting pruner looks at Busy again.
const yieldPoll = 250 * time.Millisecond

// Pruner deletes, VM by VM as the cache sees them change, the revisions
// kvlive created and then superseded.
type Pruner struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]
	regs  []registration
	// yieldMu makes the workers wait for Busy together; yielding is when
	// the current wait began, and sharing whether it ran out (MaxYield);
	// both reset when kvlive is idle.
	yieldMu  sync.Mutex
	yielding time.Time
	sharing  bool
	// looking counts the VMs the workers hold (waiting on Busy, or
	// pruning), for Backlog.
	looking atomic.Int64
}

type registration struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

// New returns a pruner; nothing is read or deleted until Run.
func New(cfg Config) (*Pruner, error) {
	if cfg.Fleet == nil {
		return nil, errors.New("pruner: no fleet")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Pruner{cfg: cfg, queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kvlive-pruner"})}, nil
}

// Run prunes until ctx ends. VMs are queued when the cache sees them (and
// at each resync), when their VMI goes (it no longer holds its start
// revisions), and when kvlive creates a revision they own.
func (p *Pruner) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer p.queue.ShutDown()
	if p.cfg.Retention < 0 {
		p.cfg.Log.Info("revision pruning off (--revision-retention < 0)")
		<-ctx.Done()
		return nil
	}
	defer p.removeHandlers()
	f := p.cfg.Fleet
	if err := p.handle(f.VMInformer(), cache.ResourceEventHandlerFuncs{
		AddFunc: p.enqueue, UpdateFunc: func(_, obj any) { p.enqueue(obj) },
	}); err != nil {
		return err
	}
	if err := p.handle(f.VMIInformer(), cache.ResourceEventHandlerFuncs{DeleteFunc: p.enqueue}); err != nil {
		return err
	}
	if err := p.handle(f.RevisionInformer(), cache.ResourceEventHandlerFuncs{AddFunc: p.enqueueOwner}); err != nil {
		return err
	}
	p.cfg.Log.Info("revision pruner started", "retention", p.cfg.Retention, "workers", workers)
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for p.next(ctx) {
			}
		})
	}
	wg.Wait()
	return nil
}

func (p *Pruner) handle(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		return fmt.Errorf("pruner: handler: %w", err)
	}
	p.regs = append(p.regs, registration{inf, reg})
	return nil
}

func (p *Pruner) removeHandlers() {
	for _, r := range p.regs {
		_ = r.inf.RemoveEventHandler(r.reg)
	}
}

func (p *Pruner) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		p.queue.Add(key)
	}
}

// enqueueOwner queues the VM that owns a revision kvlive created.
func (p *Pruner) enqueueOwner(obj any) {
	cr := kube.RevisionOf(obj)
	if cr == nil || !instancetype.CreatedByKvlive(cr) {
		return
	}
	if owner := metav1.GetControllerOf(cr); owner != nil && owner.Kind == virtv1.VirtualMachineGroupVersionKind.Kind {
		p.queue.Add(cr.Namespace + "/" + owner.Name)
	}
}

// Backlog is how many VMs the pruner has still to look at: queued, or
// held by a worker (waiting for the VMs being moved, or pruning). After a
// rollout it is the VMs whose superseded revisions may still be deleted.
// Retries waiting out their back-off are not counted, nor, for the instant
// between the queue handing it over and the worker counting it, a VM just
// taken.
func (p *Pruner) Backlog() int { return p.queue.Len() + int(p.looking.Load()) }

func (p *Pruner) next(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	p.looking.Add(1)
	defer p.looking.Add(-1)
	defer p.queue.Done(key)
	p.yield(ctx)
	err := p.sync(ctx, key)
	switch {
	case err == nil:
		p.queue.Forget(key)
	case ctx.Err() != nil:
	case p.queue.NumRequeues(key) < maxRetries:
		p.queue.AddRateLimited(key)
	default:
		p.queue.Forget(key)
		p.cfg.Metrics.PruneFailed()
		p.cfg.Log.Warn("pruner: gave up on a VM's revisions until its next change or resync", "vm", key, "attempts", maxRetries+1, "err", err)
	}
	return true
}

// yield waits while kvlive is moving VMs, so a rollout's writes do not
// share the API server with the pruner's reads and deletes, up to MaxYield
// from when the wait began: past it, pruning goes on beside the rollout
// until kvlive is idle again, and the next busy spell is waited out anew.
func (p *Pruner) yield(ctx context.Context) {
	if p.cfg.Busy == nil {
		return
	}
	p.yieldMu.Lock()
	defer p.yieldMu.Unlock()
	if !p.cfg.Busy() {
		p.yielding, p.sharing = time.Time{}, false
		return
	}
	if p.sharing {
		return
	}
	limit := cmp.Or(p.cfg.MaxYield, DefaultMaxYield)
	if p.yielding.IsZero() {
		p.yielding = time.Now()
		p.cfg.Log.Info("revision pruning waits while VMs are being moved", "at most", limit)
	}
	for p.cfg.Busy() {
		if waited := time.Since(p.yielding); waited >= limit {
			p.cfg.Log.Info("revision pruning goes on beside the VMs being moved", "waited", waited.Round(time.Second))
			p.cfg.Metrics.PruneWaitEnded()
			p.sharing = true
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(yieldPoll):
		}
	}
	p.yielding = time.Time{}
}

func (p *Pruner) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	vm := p.cfg.Fleet.VM(ns, name)
	if vm == nil {
		return nil
	}
	in, err := InputOf(p.cfg.Fleet, vm, p.cfg.Retention)
	if err != nil {
		return err
	}
	cands := Superseded(in)
	if len(cands) == 0 {
		return nil
	}
	d, err := Prune(ctx, p.cfg.Fleet.Clients, p.cfg.Fleet, cands, p.cfg.Retention)
	p.cfg.Metrics.Pruned(len(d.Revisions))
	for _, c := range d.Revisions {
		p.cfg.Log.Debug("pruned a superseded revision", "vm", key, "revision", c.Revision, "object", c.Object, "generation", c.Generation)
	}
	return err
}
