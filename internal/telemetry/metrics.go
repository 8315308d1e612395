package telemetry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvlive/events"
)

// Metrics are the instruments the stages record into. A nil *Metrics
// records nothing, so stages and tests need no registry.
type Metrics struct {
	Registry        *prometheus.Registry
	events          *prometheus.CounterVec
	plans           *prometheus.CounterVec
	outcomes        *prometheus.CounterVec
	applyDuration   *prometheus.HistogramVec
	held            prometheus.Counter
	released        prometheus.Counter
	settled         *prometheus.CounterVec
	deadFailed      *prometheus.CounterVec
	gates           *prometheus.CounterVec
	batches         prometheus.Counter
	batched         *prometheus.GaugeVec
	outcomeRetry    prometheus.Counter
	drainFailed     *prometheus.CounterVec
	agedOut         *prometheus.CounterVec
	keptPastHorizon prometheus.Gauge
	rolloutsSettled prometheus.Counter
	rolloutsOpen    prometheus.Gauge
	sweepsFailed    prometheus.Counter
	notifyFailed    prometheus.Counter
	verdicts        *prometheus.CounterVec
	verdictFailed   prometheus.Counter
	pruned          prometheus.Counter
	pruneFailed     prometheus.Counter
	pruneYieldEnded prometheus.Counter
	mismatches      prometheus.Counter
	migrationWaits  *prometheus.CounterVec
	redecided       *prometheus.CounterVec
	migrationSlots  prometheus.Gauge
	slotsGivenUp    prometheus.Counter
	slotsNotFinal   prometheus.Counter
	pagesClosed     prometheus.Counter
	migrationFails  prometheus.Counter
	previews        *prometheus.CounterVec
}

// New registers kvlive's metrics, and the Go and process collectors, in a
// registry of its own.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_events_total", Help: "Change events and switch requests planned, by type.",
		}, []string{"type"}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_plans_total", Help: "Per-VM plans published, by result.",
		}, []string{"result"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_outcomes_total", Help: "Per-VM outcomes recorded, by result.",
		}, []string{"result"}),
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvlive_apply_duration_seconds", Help: "Time to carry out one VM's plan, by result.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"result"}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_plans_held_total", Help: "Plans parked because their rollout was paused.",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_plans_released_total", Help: "Held plans sent back once their rollout was resumed or aborted.",
		}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_messages_settled_total", Help: "Messages settled by a stage's consumer, by outcome (ack, nak, dead-letter, failed).",
		}, []string{"stage", "outcome"}),
		deadFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_dead_letters_failed_total", Help: "Dead letters that could not be stored; the message was nak'ed to try again.",
		}, []string{"stage"}),
		gates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_rollout_gates_total",
			Help: "Batch gates of batched rollouts decided, by result: passed, failed (failure threshold), deadline (progress deadline passed), and the phase it left the rollout in (running, waiting for promote, paused, aborted).",
		}, []string{"result", "phase"}),
		batched: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvlive_batched_rollouts", Help: "Batched rollouts with batches still staged, by state (running, paused, aborted), as this applier last stepped them.",
		}, []string{"state"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_rollout_batches_released_total", Help: "Batches of batched rollouts released to the applier (the first, released by the planner, not counted).",
		}),
		outcomeRetry: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_outcome_publish_retries_total", Help: "Outcomes whose storing failed transiently (a NATS failover) and was tried again within the same delivery.",
		}),
		drainFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_drains_failed_total", Help: "Releases of held plans or staged batches that failed or ran out of their time limit; each is tried again.",
		}, []string{"stream"}),
		agedOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_aged_out_total",
			Help: "Records removed by the replay horizon (--max-age), by what: rollout (a settled rollout's records), message (an event, outcome or dead letter of no rollout), control (a control record of an event never planned).",
		}, []string{"what"}),
		sweepsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_keeper_sweeps_failed_total", Help: "Sweeps of the records keeper (settled marks, the replay horizon) that failed; each is tried again at the next.",
		}),
		notifyFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_notify_checks_failed_total", Help: "Looks of the notifier at a rollout (its account read, its new states published) that failed; each is tried again a second later.",
		}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_verdicts_total", Help: "KubeVirt's verdicts on the VMs kvlive moved, stored, by what kvlive predicted and what KubeVirt did; predicted != observed is a mismatch.",
		}, []string{"predicted", "observed"}),
		verdictFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_verdict_store_failures_total", Help: "Verdicts the verifier judged but could not store; each is tried again, and an outcome still unacked when its ack wait ends goes to another replica.",
		}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_revisions_pruned_total", Help: "Superseded instancetype ControllerRevisions kvlive created and deleted (--revision-retention).",
		}),
		pruneFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_revision_prunes_failed_total", Help: "VMs whose superseded revisions could not be pruned after retries; each is looked at again at its next change or resync.",
		}),
		pruneYieldEnded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_revision_pruning_waits_ended_total", Help: "Times the revision pruner stopped waiting for the VMs being moved after its longest wait (two minutes) and pruned beside the rollout.",
		}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_verdict_mismatches_total", Help: "Stored verdicts where KubeVirt did other than kvlive predicted (kvlive_verdicts_total with predicted != observed).",
		}),
		migrationWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_migration_waits_total", Help: "Times live moves started waiting for something other than a free migration slot, or gave up, by reason (kubevirt-not-deployed; gave-up: past --migration-queue-timeout; raced: a slot taken at once with others, given back to keep the budget).",
		}, []string{"reason"}),
		redecided: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_moves_redecided_total", Help: "Moves whose action was decided again at their turn because the VM changed since it was planned (a stopped VM started, a VMI no longer live-migratable), by the planned action and the one taken (none: the VM needs no move any more, planned again).",
		}, []string{"planned", "now"}),
		migrationSlots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvlive_migration_slots_in_use", Help: "Slots of the migration budget held by moved VMs whose live migration has not ended, as this applier last took one.",
		}),
		slotsGivenUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_migration_slots_given_up_total", Help: "Migration slots freed because no migration of their VM ended within --migration-queue-timeout.",
		}),
		slotsNotFinal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_migration_slots_freed_not_final_total", Help: "Migration slots freed although KubeVirt's migration object was still not final 30 s after the VMI showed the migration's end (KubeVirt may count it a moment longer).",
		}),
		pagesClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_dashboard_pages_closed_total", Help: "Live dashboard pages closed because they took nothing for 10 s (a stalled reader); the browser reconnects when it can.",
		}),
		migrationFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_migrations_failed_total", Help: "KubeVirt live migrations of VMs kvlive moved that failed; each stops its rollout (pause, or abort by its policy).",
		}),
		previews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_previews_total", Help: "Switch previews asked of this replica (kvlive switch), by result: served (the plans sent), refused (a malformed request, or one offline planning refuses: the asker reads the cluster, which says why), unavailable (beyond this replica's namespace), failed (the reply could not be sent).",
		}, []string{"result"}),
		keptPastHorizon: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvlive_rollouts_kept_past_horizon", Help: "Rollouts older than the replay horizon whose records are kept because they have not settled (paused, waiting for a promote, plans in flight), as the last sweep found.",
		}),
		rolloutsSettled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvlive_rollouts_settled_total", Help: "Rollouts the records keeper marked settled: finished, and quiet for its sweep period; plans of them no longer move VMs.",
		}),
		rolloutsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvlive_rollouts_open", Help: "Recorded rollouts not marked settled (running, paused, verifying, or finished less than a sweep period ago), as the records keeper's last sweep found.",
		}),
	}
	reg.MustRegister(m.events, m.plans, m.outcomes, m.applyDuration, m.held, m.released, m.settled, m.deadFailed, m.gates, m.batches, m.batched, m.outcomeRetry, m.drainFailed, m.agedOut, m.keptPastHorizon, m.rolloutsSettled, m.rolloutsOpen, m.sweepsFailed, m.notifyFailed, m.verdicts, m.verdictFailed, m.pruned, m.pruneFailed, m.pruneYieldEnded,
		m.mismatches, m.migrationWaits, m.redecided, m.migrationSlots, m.slotsGivenUp, m.slotsNotFinal, m.pagesClosed, m.migrationFails, m.previews, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.zeroSeries()
	return m
}

// The results of a switch preview (Metrics.Preview).
const (
	PreviewServed      = "served"
	PreviewRefused     = "refused"
	PreviewUnavailable = "unavailable"
	PreviewFailed      = "failed"
)

// Preview counts one switch preview this replica was asked for, by result.
func (m *Metrics) Preview(result string) {
	if m != nil {
		m.previews.WithLabelValues(result).Inc()
	}
}

// MigrationWait counts live moves starting to wait, by reason.
func (m *Metrics) MigrationWait(reason string) {
	if m != nil {
		m.migrationWaits.WithLabelValues(reason).Inc()
	}
}

// Redecided counts a move whose action was decided again at its turn.
func (m *Metrics) Redecided(planned, now string) {
	if m != nil {
		m.redecided.WithLabelValues(planned, now).Inc()
	}
}

// MigrationSlots sets the migration budget's slots in use.
func (m *Metrics) MigrationSlots(n int) {
	if m != nil {
		m.migrationSlots.Set(float64(n))
	}
}

// MigrationSlotGivenUp counts a slot freed at the queue timeout.
func (m *Metrics) MigrationSlotGivenUp() {
	if m != nil {
		m.slotsGivenUp.Inc()
	}
}

// MigrationSlotNotFinal counts a slot freed while KubeVirt's migration
// object was still not final, SlotReactions after the VMI showed its end.
func (m *Metrics) MigrationSlotNotFinal() {
	if m != nil {
		m.slotsNotFinal.Inc()
	}
}

// PageClosed counts a live dashboard page closed for taking nothing.
func (m *Metrics) PageClosed() {
	if m != nil {
		m.pagesClosed.Inc()
	}
}

// MigrationFailed counts a failed live migration of a VM kvlive moved.
func (m *Metrics) MigrationFailed() {
	if m != nil {
		m.migrationFails.Inc()
	}
}

// Event counts one planned event of the given CloudEvents type.
func (m *Metrics) Event(typ string) {
	if m != nil {
		m.events.WithLabelValues(typ).Inc()
	}
}

// Plans counts published plans by result.
func (m *Metrics) Plans(counts map[events.Result]int) {
	if m == nil {
		return
	}
	for r, n := range counts {
		m.plans.WithLabelValues(string(r)).Add(float64(n))
	}
}

// Held counts one plan parked by a pause.
func (m *Metrics) Held() {
	if m != nil {
		m.held.Inc()
	}
}

// Released counts held plans sent back.
func (m *Metrics) Released(n int) {
	if m != nil {
		m.released.Add(float64(n))
	}
}

// Settled counts one message a stage's consumer settled.
func (m *Metrics) Settled(stage, outcome string) {
	if m != nil {
		m.settled.WithLabelValues(stage, outcome).Inc()
	}
}

// DeadLetterFailed counts one dead letter that could not be stored.
func (m *Metrics) DeadLetterFailed(stage string) {
	if m != nil {
		m.deadFailed.WithLabelValues(stage).Inc()
	}
}

// Verdict counts one stored verdict.
func (m *Metrics) Verdict(predicted events.Result, observed events.Observed) {
	if m != nil {
		m.verdicts.WithLabelValues(string(predicted), string(observed)).Inc()
		if !observed.Matches(predicted) {
			m.mismatches.Inc()
		}
	}
}

// VerdictStoreFailed counts a verdict that could not be stored.
func (m *Metrics) VerdictStoreFailed() {
	if m != nil {
		m.verdictFailed.Inc()
	}
}

// VerdictsAwaited exports how many moved VMs this process awaits a verdict
// on.
func (m *Metrics) VerdictsAwaited(n func() int) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvlive_verdicts_awaited", Help: "Moved VMs this process awaits KubeVirt's verdict on.",
	}, func() float64 { return float64(n()) }))
}

// Gate counts one decided batch gate and the phase it left the rollout in.
func (m *Metrics) Gate(result, phase string) {
	if m != nil {
		m.gates.WithLabelValues(result, phase).Inc()
	}
}

// BatchedRollouts sets how many batched rollouts are in each state.
func (m *Metrics) BatchedRollouts(byState map[string]int) {
	if m != nil {
		for state, n := range byState {
			m.batched.WithLabelValues(state).Set(float64(n))
		}
	}
}

// DrainFailed counts one release of stream's plans that failed or ran out
// of its time limit.
func (m *Metrics) DrainFailed(stream string) {
	if m != nil {
		m.drainFailed.WithLabelValues(stream).Inc()
	}
}

// AgedOut counts n records of what removed by the replay horizon.
func (m *Metrics) AgedOut(what string, n int) {
	if m != nil {
		m.agedOut.WithLabelValues(what).Add(float64(n))
	}
}

// KeptPastHorizon sets how many unsettled rollouts the last sweep kept
// past the replay horizon.
func (m *Metrics) KeptPastHorizon(n int) {
	if m != nil {
		m.keptPastHorizon.Set(float64(n))
	}
}

// RolloutsSettled counts the rollouts a sweep of the records keeper
// marked settled and sets how many it left open.
func (m *Metrics) RolloutsSettled(marked, open int) {
	if m != nil {
		m.rolloutsSettled.Add(float64(marked))
		m.rolloutsOpen.Set(float64(open))
	}
}

// SweepFailed counts one failed sweep of the records keeper.
func (m *Metrics) SweepFailed() {
	if m != nil {
		m.sweepsFailed.Inc()
	}
}

// NotifyCheckFailed counts one failed look of the notifier at a rollout.
func (m *Metrics) NotifyCheckFailed() {
	if m != nil {
		m.notifyFailed.Inc()
	}
}

// BatchReleased counts one batch released.
func (m *Metrics) BatchReleased() {
	if m != nil {
		m.batches.Inc()
	}
}

// Outcome counts one recorded outcome and how long it took.
func (m *Metrics) Outcome(r events.Result, took time.Duration) {
	if m != nil {
		m.outcomes.WithLabelValues(string(r)).Inc()
		m.applyDuration.WithLabelValues(string(r)).Observe(took.Seconds())
	}
}

// OutcomeRetry counts one retry of storing an outcome.
func (m *Metrics) OutcomeRetry() {
	if m != nil {
		m.outcomeRetry.Inc()
	}
}

// QueueDepth exports a work queue's length, read at scrape time.
func (m *Metrics) QueueDepth(name string, depth func() int) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvlive_queue_depth", Help: "Items a work queue holds: the watcher's changed objects waiting, the revision pruner's VMs waiting or being looked at.", ConstLabels: prometheus.Labels{"queue": name},
	}, func() float64 { return float64(depth()) }))
}

// NATSAsyncErrors exports how many asynchronous errors (slow consumers
// dropping messages, permission violations) NATS reported to this process,
// read at scrape time.
func (m *Metrics) NATSAsyncErrors(n func() int64) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "kvlive_nats_async_errors_total", Help: "Asynchronous errors NATS reported (a slow consumer's dropped messages are delivered again after the ack wait).",
	}, func() float64 { return float64(n()) }))
}

// WatcherBacklog exports how many objects have a change the watcher could
// not publish yet (it retries them until they go), read at scrape time.
func (m *Metrics) WatcherBacklog(n func() int) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvlive_watcher_unpublished_changes", Help: "Objects whose change the watcher could not publish yet; it retries until it can.",
	}, func() float64 { return float64(n()) }))
}

// ConsumerLag exports, per durable consumer, the messages not yet
// delivered and those delivered but not acked, asked of JetStream at scrape
// time (within 2s, and not once ctx ended).
func (m *Metrics) ConsumerLag(ctx context.Context, js jetstream.JetStream) {
	if m == nil {
		return
	}
	for stream, consumer := range map[string]string{events.StreamEvents: events.ConsumerPlanner, events.StreamPlans: events.ConsumerApplier} {
		info := func() *jetstream.ConsumerInfo {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			c, err := js.Consumer(ctx, stream, consumer)
			if err != nil {
				return nil
			}
			i, err := c.Info(ctx)
			if err != nil {
				return nil
			}
			return i
		}
		labels := prometheus.Labels{"consumer": consumer}
		m.Registry.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvlive_consumer_pending", Help: "Messages a consumer has not been delivered yet.", ConstLabels: labels},
				func() float64 {
					if i := info(); i != nil {
						return float64(i.NumPending)
					}
					return 0
				}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvlive_consumer_ack_pending", Help: "Messages delivered to a consumer and not acked yet.", ConstLabels: labels},
				func() float64 {
					if i := info(); i != nil {
						return float64(i.NumAckPending)
					}
					return 0
				}),
		)
	}
}

// Serve serves /metrics, /healthz (the process is up) and /readyz (ready()
// holds: caches synced, NATS connected) on ln until ctx ends, and with
// profiling Go's /debug/pprof/ profiles, as Kubernetes components do.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener, ready func() error, profiling bool) error {
	mux := http.NewServeMux()
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// FleetDrift exports, per instance type and preference, counted by
// measure at scrape time from the process's cache (no API calls):
//   - kvlive_vms_behind{object}: the VMs not known to be on its latest
//     generation;
//   - kvlive_vms_hotplug_pending{object}: the running VMs whose hot-plugged
//     CPU or memory waits for the live migration that brings it to the
//     guest.
//
// One measure of the fleet answers both (at 100,000 VMs a measure is a
// scan of every VM). While the cache has not synced (ok false) nothing is
// exported rather than a count of part of the fleet.
func (m *Metrics) FleetDrift(measure func() (behind, hotplugPending map[string]int, ok bool)) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(&driftCollector{measure: measure,
		behind: prometheus.NewDesc("kvlive_vms_behind",
			"VMs referencing an instance type or preference that are pinned to an older generation of it or to one kvlive cannot compare (revision gone, object re-created), from the cache at scrape time; kvlive drift shows which.",
			[]string{"object"}, nil),
		hotplugPending: prometheus.NewDesc("kvlive_vms_hotplug_pending",
			"Running VMs referencing an instance type or preference whose hot-plugged CPU or memory waits on the VMI for the live migration that brings it to the guest (HotVCPUChange/HotMemoryChange), from the cache at scrape time; kvlive drift shows which.",
			[]string{"object"}, nil)})
}

// driftCollector turns each scrape's one measure of the fleet into one
// gauge per object of each of its counts; objects no VM references any
// more have no series.
type driftCollector struct {
	measure                func() (map[string]int, map[string]int, bool)
	behind, hotplugPending *prometheus.Desc
}

func (c *driftCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.behind
	ch <- c.hotplugPending
}

func (c *driftCollector) Collect(ch chan<- prometheus.Metric) {
	behind, hotplugPending, ok := c.measure()
	if !ok {
		return
	}
	for desc, counts := range map[*prometheus.Desc]map[string]int{c.behind: behind, c.hotplugPending: hotplugPending} {
		for object, n := range counts {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), object)
		}
	}
}

// Pruned counts superseded ControllerRevisions the pruner deleted.
func (m *Metrics) Pruned(n int) {
	if m != nil && n > 0 {
		m.pruned.Add(float64(n))
	}
}

// PruneWaitEnded counts a wait of the pruner for the VMs being moved that
// ran out (pruner.Config.MaxYield): it prunes beside the rollout after it.
func (m *Metrics) PruneWaitEnded() {
	if m != nil {
		m.pruneYieldEnded.Inc()
	}
}

// PruneFailed counts a VM whose revisions the pruner gave up on until its
// next change or resync.
func (m *Metrics) PruneFailed() {
	if m != nil {
		m.pruneFailed.Inc()
	}
}
