package standin

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	virtv1 "kubevirt.io/api/core/v1"
)

// In KubeVirt v1.9 a hot-plug reaches the guest only on a live migration's
// target: virt-controller patches the VMI's spec and sets HotVCPUChange or
// HotMemoryChange; the workload updater migrates a live-migratable VMI when
// workloadUpdateMethods hold LiveMigrate (else evicts it under Evict, else
// leaves it), never more than parallelMigrationsPerCluster at once, nor
// more than parallelOutboundMigrationsPerNode from one node; the target's
// virt-handler then moves the VMI's status to its spec and drops the
// conditions. The stand-in models that queue: each migration takes
// Config.MigrationDuration and leaves on the VMI what KubeVirt's leaves
// (status.migrationState, the node it runs on).

// KubeVirt's migration limits when the KubeVirt CR sets none
// (pkg/virt-config: ParallelMigrationsPerClusterDefault,
// ParallelOutboundMigrationsPerNodeDefault).
const (
	defaultParallelMigrations  = 5
	defaultOutboundPerNode     = 2
	defaultBatchEvictionSize   = 10
	defaultEvictionIntervalSec = 60
)

// standinNodes is how many nodes the stand-in spreads VMIs that name none
// over, so the per-node limit binds as it does in a cluster.
const standinNodes = 8

// MigrationStats counts the migrations the stand-in ran.
type MigrationStats struct {
	Started, Succeeded, Failed, Evicted int
	// MaxRunning is the most that ran at once.
	MaxRunning int
}

// MigrationRecord is one migration the stand-in ended.
type MigrationRecord struct {
	// VMI is namespace/name; UID the migration's.
	VMI, UID string
	// Started and Ended are when the VMI showed the migration's start and
	// end; Final is when the stand-in stopped counting it against the
	// budget: its object went final (Config.MigrationObjects), or Ended.
	Started, Ended, Final time.Time
	Failed                bool
}

// failureReason is what a failed migration of the stand-in's reports.
const failureReason = "Live migration failed: the stand-in failed it (FailMigration)"

// migration is one running migration.
type migration struct {
	uid, source, target string
	// object is the name of its VirtualMachineInstanceMigration, if any.
	object  string
	started time.Time
	// fails: it ends failed, as one that did not converge.
	fails bool
	// ended is when the VMI showed its end; its object is still to be made
	// final (Config.MigrationObjects).
	ended      time.Time
	endFailed  bool
	objectDone bool
}

// migrations is the stand-in's migration queue: what runs, by VMI key, and
// what waits for a turn, oldest first.
type migrations struct {
	mu      sync.Mutex
	running map[string]*migration
	waiting []string
	evicted map[string]bool
	// evictions are when the latest evictions were sent, for the batch
	// limit per interval.
	evictions []time.Time
	stats     MigrationStats
	// history is every migration ended, in the order they ended; fail
	// holds the ordinals (in Started) of migrations to fail.
	history []MigrationRecord
	fail    map[int]bool
	// failed are the VMIs whose latest migrations failed, by key: their
	// next one waits out the backoff.
	failed map[string]failures
	// hotplugs are the hot-plugs asked for, in order.
	hotplugs []HotplugRecord
	// ended are the UIDs of the migrations ended, to tell a VMI the
	// cache shows from before its migration's end.
	ended map[string]bool
}

// HotplugRecord is one hot-plug the stand-in asked of a VMI (its Hot*Change
// conditions set), in answer to the VM's pins then.
type HotplugRecord struct {
	// VMI is namespace/name; Pins the VM's pinned revisions, comma-separated.
	VMI, Pins string
	At        time.Time
}

// Hotplugs lists the hot-plugs the stand-in asked for, in order.
func (c *Controller) Hotplugs() []HotplugRecord {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	return slices.Clone(c.mig.hotplugs)
}

// hotplugged records a hot-plug asked of VMI key for pins, once: a sync
// that ran again before the cache showed the VMI's patch asks it again.
func (c *Controller) hotplugged(key, pins string) {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	for i := len(c.mig.hotplugs) - 1; i >= 0; i-- {
		if h := c.mig.hotplugs[i]; h.VMI == key {
			if h.Pins == pins {
				return
			}
			break
		}
	}
	c.mig.hotplugs = append(c.mig.hotplugs, HotplugRecord{VMI: key, Pins: pins, At: time.Now()})
}

// failures are a VMI's failed migrations since its last success.
type failures struct {
	count  int
	latest time.Time
}

// defaultMigrationBackoff is KubeVirt's wait after a failed migration
// (pkg/virt-controller/watch/migration, handleMigrationBackoff).
const defaultMigrationBackoff = 20 * time.Second

// backoffLeft is how long the VMI's next migration still waits after its
// failed ones: Config.MigrationBackoff after the latest, doubled for each
// earlier failure since its last success.
func (c *Controller) backoffLeft(key string) time.Duration {
	c.mig.mu.Lock()
	f := c.mig.failed[key]
	c.mig.mu.Unlock()
	if f.count == 0 {
		return 0
	}
	wait := c.cfg.MigrationBackoff << min(f.count-1, 10)
	return time.Until(f.latest.Add(wait))
}

// Migrations returns what the stand-in's migration queue ran so far.
func (c *Controller) Migrations() MigrationStats {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	return c.mig.stats
}

// History lists the migrations the stand-in ended, in the order they
// ended.
func (c *Controller) History() []MigrationRecord {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	return slices.Clone(c.mig.history)
}

// FailMigration makes the nth migration started from now (1: the next)
// fail at its end, as one that did not converge: the VMI keeps its
// hot-plug conditions and waits for another turn, as KubeVirt's workload
// updater migrates it again once the backoff passed
// (Config.MigrationBackoff).
func (c *Controller) FailMigration(nth int) {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	if c.mig.fail == nil {
		c.mig.fail = map[int]bool{}
	}
	c.mig.fail[c.mig.stats.Started+nth] = true
}

// limits are the KubeVirt CR's migration settings and update methods.
type limits struct {
	// deployed is false while the KubeVirt CR is not fully deployed (an
	// install or upgrade): the workload updater then starts nothing.
	deployed            bool
	perCluster, perNode int
	liveMigrate, evict  bool
	evictBatch          int
	evictInterval       time.Duration
}

func (c *Controller) limits() limits {
	l := limits{deployed: true, perCluster: defaultParallelMigrations, perNode: defaultOutboundPerNode, liveMigrate: true,
		evictBatch: defaultBatchEvictionSize, evictInterval: defaultEvictionIntervalSec * time.Second}
	var kv *virtv1.KubeVirt
	for _, o := range c.cfg.KubeVirts.GetStore().List() {
		kv = o.(*virtv1.KubeVirt)
	}
	if kv == nil {
		return l
	}
	l.deployed = kv.Status.Phase == virtv1.KubeVirtPhaseDeployed && kv.Status.ObservedDeploymentID == kv.Status.TargetDeploymentID
	if m := kv.Spec.Configuration.MigrationConfiguration; m != nil {
		if m.ParallelMigrationsPerCluster != nil {
			l.perCluster = int(*m.ParallelMigrationsPerCluster)
		}
		if m.ParallelOutboundMigrationsPerNode != nil {
			l.perNode = int(*m.ParallelOutboundMigrationsPerNode)
		}
	}
	ws := kv.Spec.WorkloadUpdateStrategy
	l.liveMigrate = slices.Contains(ws.WorkloadUpdateMethods, virtv1.WorkloadUpdateMethodLiveMigrate)
	l.evict = slices.Contains(ws.WorkloadUpdateMethods, virtv1.WorkloadUpdateMethodEvict)
	if ws.BatchEvictionSize != nil {
		l.evictBatch = *ws.BatchEvictionSize
	}
	if ws.BatchEvictionInterval != nil {
		l.evictInterval = ws.BatchEvictionInterval.Duration
	}
	return l
}

// hotConditions lists the VMI's hot-plug conditions that are True.
func hotConditions(vmi *virtv1.VirtualMachineInstance) []virtv1.VirtualMachineInstanceConditionType {
	var out []virtv1.VirtualMachineInstanceConditionType
	for _, cond := range vmi.Status.Conditions {
		if (cond.Type == virtv1.VirtualMachineInstanceVCPUChange || cond.Type == virtv1.VirtualMachineInstanceMemoryChange) && cond.Status == k8scorev1.ConditionTrue {
			out = append(out, cond.Type)
		}
	}
	return out
}

func migratable(vmi *virtv1.VirtualMachineInstance) bool {
	for _, cond := range vmi.Status.Conditions {
		if cond.Type == virtv1.VirtualMachineInstanceIsMigratable {
			return cond.Status == k8scorev1.ConditionTrue
		}
	}
	return false
}

// nodeOf is the node the VMI runs on: its own, or one the stand-in gives
// it by name.
func nodeOf(vmi *virtv1.VirtualMachineInstance) string {
	if vmi.Status.NodeName != "" {
		return vmi.Status.NodeName
	}
	f := fnv.New32a()
	_, _ = f.Write([]byte(vmi.Namespace + "/" + vmi.Name))
	return fmt.Sprintf("standin-node-%d", f.Sum32()%standinNodes+1)
}

// migrate runs the VMI through the migration queue as KubeVirt's workload
// updater, migration controller and virt-handler would: a running
// migration ends after the duration, a VMI with a hot-plug pending starts
// one when the limits leave room (else waits its turn), is evicted, or
// keeps the change for its next boot.
func (c *Controller) migrate(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	key := vmi.Namespace + "/" + vmi.Name
	c.mig.mu.Lock()
	m := c.mig.running[key]
	c.mig.mu.Unlock()
	if m != nil {
		if !m.ended.IsZero() {
			return c.finalize(ctx, key, vmi.Namespace, m)
		}
		if left := c.cfg.MigrationDuration - time.Since(m.started); left > 0 {
			c.queue.AddAfter(key, left)
			return nil
		}
		return c.finishMigration(ctx, vmi, m)
	}
	if s := vmi.Status.MigrationState; s != nil && !s.Completed && c.migrationEnded(string(s.MigrationUID)) {
		// The cache has not caught up with the write that ended this
		// migration: its hot-plug conditions are the ones it carried.
		c.queue.AddAfter(key, 50*time.Millisecond)
		return nil
	}
	hot := hotConditions(vmi)
	if len(hot) == 0 || vmi.DeletionTimestamp != nil {
		c.dropWaiting(key)
		return nil
	}
	l := c.limits()
	switch {
	case !l.deployed:
		c.queue.AddAfter(key, time.Second) // the KubeVirt CR's next state brings no VM back through the queue
		return nil
	case l.liveMigrate && migratable(vmi):
		if left := c.backoffLeft(key); left > 0 {
			c.queue.AddAfter(key, left)
			return nil
		}
		return c.startMigration(ctx, vmi, l)
	case l.evict:
		return c.evict(ctx, vmi, l)
	}
	return nil // held: the change waits on the VMI for its next boot
}

// startMigration starts the VMI's migration if the limits leave room, and
// else puts it in line.
func (c *Controller) startMigration(ctx context.Context, vmi *virtv1.VirtualMachineInstance, l limits) error {
	key, source := vmi.Namespace+"/"+vmi.Name, nodeOf(vmi)
	c.mig.mu.Lock()
	outbound := 0
	for _, r := range c.mig.running {
		if r.source == source {
			outbound++
		}
	}
	if len(c.mig.running) >= l.perCluster || outbound >= l.perNode {
		if !slices.Contains(c.mig.waiting, key) {
			c.mig.waiting = append(c.mig.waiting, key)
		}
		c.mig.mu.Unlock()
		return nil
	}
	m := &migration{uid: string(uuid.NewUUID()), source: source, target: targetNode(source), started: time.Now()}
	c.mig.running[key] = m
	c.mig.waiting = slices.DeleteFunc(c.mig.waiting, func(k string) bool { return k == key })
	c.mig.stats.Started++
	m.fails = c.mig.fail[c.mig.stats.Started]
	c.mig.stats.MaxRunning = max(c.mig.stats.MaxRunning, len(c.mig.running))
	c.mig.mu.Unlock()
	if c.cfg.MigrationObjects {
		// An API server sets the UID; a fake clientset keeps the one given.
		obj, err := c.cfg.Virt.KubevirtV1().VirtualMachineInstanceMigrations(vmi.Namespace).Create(ctx, &virtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-workload-update-" + m.uid[:8], UID: types.UID(m.uid),
				Annotations: map[string]string{virtv1.WorkloadUpdateMigrationAnnotation: ""}},
			Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
		}, metav1.CreateOptions{})
		if err != nil {
			c.release(key)
			return err
		}
		m.uid, m.object = string(obj.UID), obj.Name
	}
	at := metav1.NewTime(m.started)
	// A new migration's state replaces the last one's (a merge patch drops
	// what is null).
	state := map[string]any{
		"migrationUid": m.uid, "sourceNode": m.source, "targetNode": m.target, "targetNodeAddress": "standin",
		"startTimestamp": at, "mode": virtv1.MigrationPreCopy,
		"endTimestamp": nil, "completed": nil, "failed": nil, "failureReason": nil,
		"targetNodeDomainDetected": nil, "targetNodeDomainReadyTimestamp": nil,
	}
	if err := c.patchVMI(ctx, vmi, map[string]any{}, map[string]any{"migrationState": state}); err != nil {
		c.release(key)
		return err
	}
	c.queue.AddAfter(key, c.cfg.MigrationDuration)
	return nil
}

// finishMigration ends a migration on its target: the VMI's status takes
// its spec's sockets and guest memory, the hot-plug conditions go, and the
// VMI runs on the target node, in one write as virt-handler's. A
// migration set to fail ends failed on its source instead, the VMI's
// hot-plug still pending.
func (c *Controller) finishMigration(ctx context.Context, vmi *virtv1.VirtualMachineInstance, m *migration) error {
	key := vmi.Namespace + "/" + vmi.Name
	if m.fails {
		end := metav1.Now()
		state := map[string]any{"endTimestamp": end, "completed": true, "failed": true, "failureReason": failureReason}
		if err := c.patchVMI(ctx, vmi, map[string]any{}, map[string]any{"migrationState": state}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		c.vmiEnded(ctx, key, vmi.Namespace, m, end.Time, true) // its VMI, still hot, takes its next turn in the queue
		return nil
	}
	status := map[string]any{"nodeName": m.target}
	if cpu := vmi.Spec.Domain.CPU; cpu != nil {
		status["currentCPUTopology"] = map[string]any{"sockets": cpu.Sockets, "cores": cpu.Cores, "threads": cpu.Threads}
	}
	if mem := vmi.Spec.Domain.Memory; mem != nil && mem.Guest != nil && vmi.Status.Memory != nil {
		// A copy: String caches its text in the Quantity, and the VMI is
		// the informer's, which other goroutines read.
		guest := mem.Guest.DeepCopy()
		status["memory"] = map[string]any{"guestRequested": guest.String(), "guestCurrent": guest.String()}
	}
	var conds []virtv1.VirtualMachineInstanceCondition
	for _, cond := range vmi.Status.Conditions {
		if cond.Type != virtv1.VirtualMachineInstanceVCPUChange && cond.Type != virtv1.VirtualMachineInstanceMemoryChange {
			conds = append(conds, cond)
		}
	}
	status["conditions"] = conds
	end := metav1.Now()
	status["migrationState"] = map[string]any{"endTimestamp": end, "completed": true, "targetNodeDomainDetected": true, "targetNodeDomainReadyTimestamp": end}
	if err := c.patchVMI(ctx, vmi, map[string]any{}, status); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.vmiEnded(ctx, key, vmi.Namespace, m, end.Time, false)
	return nil
}

// vmiEnded follows the VMI's showing a migration's end: its object, if
// it has one, is made final FinalizeLag later, and until then the
// migration counts as running.
func (c *Controller) vmiEnded(ctx context.Context, key, namespace string, m *migration, at time.Time, failed bool) {
	c.mig.mu.Lock()
	m.ended, m.endFailed = at, failed
	c.mig.mu.Unlock()
	if m.object == "" {
		c.ended(key, m, at)
		return
	}
	if c.cfg.FinalizeLag > 0 {
		c.queue.AddAfter(key, c.cfg.FinalizeLag)
		return
	}
	if err := c.finalize(ctx, key, namespace, m); err != nil {
		c.queue.AddAfter(key, 100*time.Millisecond)
	}
}

// finalize makes the migration's object final once FinalizeLag has passed
// since the VMI showed its end, and then ends the migration.
func (c *Controller) finalize(ctx context.Context, key, namespace string, m *migration) error {
	if left := c.cfg.FinalizeLag - time.Since(m.ended); left > 0 {
		c.queue.AddAfter(key, left)
		return nil
	}
	// Taken before the write: whoever saw the object final saw it after.
	final := time.Now()
	if m.object != "" && !m.objectDone {
		migrations := c.cfg.Virt.KubevirtV1().VirtualMachineInstanceMigrations(namespace)
		obj, err := migrations.Get(ctx, m.object, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		default:
			obj.Status.Phase = virtv1.MigrationSucceeded
			if m.endFailed {
				obj.Status.Phase = virtv1.MigrationFailed
			}
			if _, err := migrations.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		m.objectDone = true
	}
	c.ended(key, m, final)
	return nil
}

// ended records a migration's end (the VMI showed it at m.ended; final
// counts it no more) and frees its slot.
func (c *Controller) ended(key string, m *migration, final time.Time) {
	failed := m.endFailed
	c.mig.mu.Lock()
	if failed {
		c.mig.stats.Failed++
	} else {
		c.mig.stats.Succeeded++
	}
	c.mig.history = append(c.mig.history, MigrationRecord{VMI: key, UID: m.uid, Started: m.started, Ended: m.ended, Final: final, Failed: failed})
	c.mig.ended[m.uid] = true
	if failed {
		f := c.mig.failed[key]
		c.mig.failed[key] = failures{count: f.count + 1, latest: m.ended}
	} else {
		delete(c.mig.failed, key)
	}
	c.mig.mu.Unlock()
	c.release(key)
}

// migrationEnded reports whether the migration uid has ended.
func (c *Controller) migrationEnded(uid string) bool {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	return c.mig.ended[uid]
}

// release frees the VMI's migration slot and gives every VMI in line a
// look, in order.
func (c *Controller) release(key string) {
	c.mig.mu.Lock()
	delete(c.mig.running, key)
	waiting := slices.Clone(c.mig.waiting)
	c.mig.mu.Unlock()
	for _, k := range waiting {
		c.queue.Add(k)
	}
}

// forget ends what the queue holds of a VMI that is gone (its VM deleted
// or stopped): a migration of it ends with it, freeing its slot.
func (c *Controller) forget(key string) {
	c.mig.mu.Lock()
	_, running := c.mig.running[key]
	c.mig.mu.Unlock()
	if running {
		c.release(key)
	}
	c.dropWaiting(key)
	c.reacted(key)
}

func (c *Controller) dropWaiting(key string) {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	c.mig.waiting = slices.DeleteFunc(c.mig.waiting, func(k string) bool { return k == key })
}

// evict deletes the VMI as the workload updater's eviction of its pod
// ends it, at most a batch per interval; the VM starts again (evicted
// marks it) as its run strategy says.
func (c *Controller) evict(ctx context.Context, vmi *virtv1.VirtualMachineInstance, l limits) error {
	key := vmi.Namespace + "/" + vmi.Name
	c.mig.mu.Lock()
	now := time.Now()
	c.mig.evictions = slices.DeleteFunc(c.mig.evictions, func(t time.Time) bool { return now.Sub(t) >= l.evictInterval })
	if len(c.mig.evictions) >= l.evictBatch {
		wait := l.evictInterval - now.Sub(c.mig.evictions[0])
		c.mig.mu.Unlock()
		c.queue.AddAfter(key, wait)
		return nil
	}
	c.mig.evictions = append(c.mig.evictions, now)
	c.mig.evicted[key] = true
	c.mig.stats.Evicted++
	c.mig.mu.Unlock()
	err := c.cfg.Virt.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Delete(ctx, vmi.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &vmi.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("standin: evict VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// afterEviction starts a VM again whose VMI the stand-in evicted, when its
// run strategy keeps it running; it reports whether it acted.
func (c *Controller) afterEviction(ctx context.Context, vm *virtv1.VirtualMachine) (bool, error) {
	key := vm.Namespace + "/" + vm.Name
	c.mig.mu.Lock()
	evicted := c.mig.evicted[key]
	delete(c.mig.evicted, key)
	c.mig.mu.Unlock()
	if !evicted {
		return false, nil
	}
	if s := vm.Spec.RunStrategy; s == nil || (*s != virtv1.RunStrategyAlways && *s != virtv1.RunStrategyRerunOnFailure) {
		return true, nil
	}
	return true, c.startVMI(ctx, vm)
}

// targetNode is the node a migration from source lands on: the next of
// the stand-in's nodes.
func targetNode(source string) string {
	var n int
	if _, err := fmt.Sscanf(source, "standin-node-%d", &n); err != nil {
		f := fnv.New32a()
		_, _ = f.Write([]byte(source))
		n = int(f.Sum32() % standinNodes)
	}
	return fmt.Sprintf("standin-node-%d", n%standinNodes+1)
}
