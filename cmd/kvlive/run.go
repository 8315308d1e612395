package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"kvlive/applier"
	"kvlive/cmd/kvlive/pipeline"
	"kvlive/drift"
	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/internal/kube"
	"kvlive/internal/telemetry"
	"kvlive/internal/webhook"
	"kvlive/planner"
	"kvlive/pruner"
	"kvlive/readmodel/dashboard"
	"kvlive/readmodel/notify"
)

// natsFlags are how a command reaches NATS.
type natsFlags struct {
	auth     natsAuthFlags
	url      string
	replicas int
	maxAge   time.Duration
	maxBytes int64
}

func (n *natsFlags) bind(f *pflag.FlagSet, urlHelp string) {
	f.StringVar(&n.url, "nats-url", n.url, urlHelp)
	n.auth.bind(f)
	f.IntVar(&n.replicas, "replicas", 1, "JetStream stream replicas (3 on a NATS cluster)")
	f.DurationVar(&n.maxAge, "max-age", events.DefaultStreamOptions().MaxAge, "the replay horizon: how long events, outcomes, dead letters and spans are kept, a rollout's from when it settled (0 keeps them)")
	f.Int64Var(&n.maxBytes, "max-bytes", 0, "size limit of each stream in bytes; 0 means unlimited")
}

func (n *natsFlags) streamOptions() events.StreamOptions {
	o := events.DefaultStreamOptions()
	o.Replicas, o.MaxAge, o.MaxBytes = n.replicas, n.maxAge, n.maxBytes
	return o
}

// runOptions are kvlive run's flags.
type runOptions struct {
	g              *globals
	log            *slog.Logger
	kube           *kubeFlags
	nats           natsFlags
	listen         string
	listenConfig   string
	dataDir        string
	stages         []string
	workers        int
	plannerWorkers int
	rate           float64
	metricsAddr    string
	profiling      bool
	dashboard      dashboardFlags
	notify         []string
	dashboardURL   string
	observeTimeout time.Duration
	queueTimeout   time.Duration
	traceFanout    int
	retention      int
	leaderElect    bool
	leader         pipeline.LeaderElection
	policy         events.Policy
	webhookTLS     webhook.TLS
	webhookAllow   []string
}

// defaultQPS and defaultBurst are the Kubernetes client limits of kvlive
// run and revisions prune: a ceiling well above what an API server takes
// from one client (hack/bench.sh: at 200 a 10,000-VM rollout ran at the
// limit, 200 VMs/s, while the API server took 335–495 VMs/s from a loop
// without one), so the API server's priority and fairness, with the
// priority level deploy/ ships, decides how fast kvlive goes and what
// other clients keep.
const (
	defaultQPS   = 1000
	defaultBurst = 2000
)

func newRunCmd(g *globals) *cobra.Command {
	o := &runOptions{g: g, nats: natsFlags{}, kube: newKubeFlags()}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the watcher, planner and applier against the current kubeconfig's cluster",
		Long: `run starts kvlive's stages in one process against the cluster of the current
kubeconfig. By default it embeds a NATS server with JetStream, storing streams
under --data-dir and listening on --listen for kvlive switch and NATS tools;
--nats-url uses an external NATS server or cluster instead. --stages runs a
subset, so planners and appliers can scale out as replicas on a NATS cluster.`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	o.kube.addFlags(f, "watch namespaced objects and VMs in this namespace only (default: all namespaces)")
	f.Float32Var(&o.kube.QPS, "qps", defaultQPS, "Kubernetes client queries per second, a ceiling: the API server's priority and fairness (deploy/base/flowcontrol.yaml) queues kvlive's requests behind other clients'")
	f.IntVar(&o.kube.Burst, "burst", defaultBurst, "Kubernetes client burst")
	o.nats.bind(f, "external NATS server or cluster URL(s); empty embeds a server")
	f.StringVar(&o.listen, "listen", "127.0.0.1:4222", "address the embedded NATS server listens on (beyond loopback only with --listen-config)")
	f.StringVar(&o.listenConfig, "listen-config", "", "nats-server configuration file whose authorization (and tls) blocks say who may connect to the embedded server")
	f.StringVar(&o.dataDir, "data-dir", defaultDataDir(), "embedded NATS JetStream store directory")
	f.StringSliceVar(&o.stages, "stages", pipeline.AllStages, "stages to run: watcher, planner, applier")
	f.IntVar(&o.workers, "workers", 32, "applier workers: VMs moved at once")
	f.IntVar(&o.plannerWorkers, "planner-workers", 2, "planner workers: events planned at once")
	f.Float64Var(&o.rate, "rate", 0, "cap on VM moves per second; 0 leaves only --qps/--burst")
	f.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:8080", "address serving /metrics, /healthz and /readyz (loopback by default; in a pod, its IP); empty turns it off")
	f.BoolVar(&o.profiling, "profiling", false, "also serve Go's /debug/pprof/ profiles on --metrics-addr")
	o.dashboard = dashboardFlags{prefix: "dashboard-", usage: "serve the web dashboard (kvlive dashboard) on this address, drift from the pipeline's cache; empty (the default) serves none"}
	o.dashboard.bind(f)
	f.StringArrayVar(&o.notify, "notify", nil, "post rollouts' state changes to this receiver: URL[;format=slack|cloudevents][;headers=FILE] (repeatable; hooks.slack.com is slack, anything else CloudEvents JSON unless named; FILE holds Name: value header lines)")
	f.StringVar(&o.dashboardURL, "dashboard-url", "", "the dashboard's address as people reach it, for the links in notifications")
	f.DurationVar(&o.observeTimeout, "observe-timeout", 2*time.Minute, "how long after its move a VM's verdict (KubeVirt's reaction: the hotplug, RestartRequired) is waited for; what stands then is the verdict; 0 turns verdicts off")
	f.DurationVar(&o.queueTimeout, "migration-queue-timeout", applier.DefaultQueueTimeout, "how long a running VM whose change reaches the guest by a live migration (or an eviction) waits for it to start before its verdict is queued; the --observe-timeout then runs from the migration's start")
	f.IntVar(&o.traceFanout, "trace-fanout-limit", planner.DefaultTraceFanout, "above this many VMs, each VM's span roots its own trace, linked to the plan span")
	f.IntVar(&o.retention, "revision-retention", pruner.DefaultRetention, "superseded ControllerRevisions kvlive created kept per VM and reference, newest first (the previous one is what undo moves back to); older ones are deleted; negative keeps all")
	bindPolicyFlags(f, &o.policy)
	f.StringVar(&o.webhookTLS.CAFile, "webhook-ca-file", "", "PEM CA bundle that verifies rollout webhooks' servers (default: the system's roots)")
	f.StringVar(&o.webhookTLS.CertFile, "webhook-cert-file", "", "PEM client certificate kvlive presents to rollout webhooks (with --webhook-key-file)")
	f.StringVar(&o.webhookTLS.KeyFile, "webhook-key-file", "", "PEM key of --webhook-cert-file")
	f.StringSliceVar(&o.webhookAllow, "webhook-allow-host", nil, "host names, IP addresses or CIDR prefixes rollout webhooks may reach beyond the default "+
		"(loopback, link-local and kvlive's own addresses are refused), and the only hosts a namespaced object's policy may name (repeatable)")
	o.leader = pipeline.DefaultLeaderElection()
	f.BoolVar(&o.leaderElect, "leader-elect", false, "run the watcher only while holding a Lease, for several replicas with the watcher stage")
	f.StringVar(&o.leader.Namespace, "leader-elect-resource-namespace", "", "namespace of the Lease (default: the kubeconfig context's, or the pod's)")
	f.StringVar(&o.leader.Name, "leader-elect-resource-name", o.leader.Name, "name of the Lease")
	f.StringVar(&o.leader.Identity, "leader-elect-id", "", "this replica's identity in the Lease (default: hostname and a random suffix)")
	f.DurationVar(&o.leader.LeaseDuration, "leader-elect-lease-duration", o.leader.LeaseDuration, "how long other replicas wait after the last renewal before taking over")
	f.DurationVar(&o.leader.RenewDeadline, "leader-elect-renew-deadline", o.leader.RenewDeadline, "how long the leader tries to renew before giving up")
	f.DurationVar(&o.leader.RetryPeriod, "leader-elect-retry-period", o.leader.RetryPeriod, "how often replicas try to acquire or renew the Lease")
	return cmd
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "kvlive")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "kvlive")
	}
	return "kvlive-data"
}

// Complete takes the logger.
func (o *runOptions) Complete(*cobra.Command, []string) error {
	o.log = o.g.logger()
	return nil
}

// Validate rejects flag values that would run a broken pipeline.
func (o *runOptions) Validate() error {
	switch {
	case o.workers < 1:
		return fmt.Errorf("%w: --workers %d: want at least 1", errUsage, o.workers)
	case o.plannerWorkers < 1:
		return fmt.Errorf("%w: --planner-workers %d: want at least 1", errUsage, o.plannerWorkers)
	case o.rate < 0:
		return fmt.Errorf("%w: --rate %g: want 0 (no cap) or a positive number of moves per second", errUsage, o.rate)
	case o.observeTimeout < 0:
		return fmt.Errorf("%w: --observe-timeout %s: want 0 (off) or a positive duration", errUsage, o.observeTimeout)
	case o.queueTimeout <= 0:
		return fmt.Errorf("%w: --migration-queue-timeout %s: want a positive duration", errUsage, o.queueTimeout)
	case o.listenConfig != "" && o.nats.url != "":
		return fmt.Errorf("%w: --listen-config is the embedded server's; with --nats-url, configure that server", errUsage)
	}
	if err := o.nats.streamOptions().Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	for _, st := range o.stages {
		if !slices.Contains(pipeline.AllStages, st) {
			return fmt.Errorf("%w: unknown stage %q (want %s)", errUsage, st, strings.Join(pipeline.AllStages, ", "))
		}
	}
	return checkPolicy(o.policy)
}

// Run runs the stages until ctx ends.
func (o *runOptions) Run(ctx context.Context) (err error) {
	log := o.log
	if _, err := setMemoryLimit(log, memlimit.FromCgroup); err != nil {
		log.Warn("the Go runtime's memory limit stays as it was", "err", err)
	}
	clients, leader, err := o.cluster()
	if err != nil {
		return err
	}
	in, err := o.openInfra(ctx, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.close(context.WithoutCancel(ctx))) }()
	js, tp, m := in.js, in.tp, in.metrics
	var ready atomic.Pointer[pipeline.Running]
	readyErr := func() error {
		if r := ready.Load(); r != nil {
			return errors.Join(in.natsReady(), r.Ready())
		}
		return errors.New("caches not synced yet")
	}
	m.Health(in.natsReady, readyErr)
	m.KubeRequests()
	served, err := o.serve(ctx, log, m, readyErr)
	if err != nil {
		return err
	}
	hooks, err := webhook.New(o.webhookTLS, o.webhookAllow...)
	if err != nil {
		return err
	}
	// The dashboard and the notifier serve beside the stages; on an early
	// return they are stopped and waited for.
	beside, stopBeside := context.WithCancel(ctx)
	defer stopBeside()
	dashboardServed, notified := noWait, noWait
	defer func() {
		if err != nil {
			stopBeside()
			err = errors.Join(err, dashboardServed(), notified())
		}
	}()
	if dashboardServed, err = o.serveDashboard(beside, log, js, tp, m, func() []drift.Row {
		if r := ready.Load(); r != nil {
			return r.Drift()
		}
		return nil
	}); err != nil {
		dashboardServed = noWait
		return err
	}
	if notified, err = o.startNotifier(beside, log, js, hooks, m); err != nil {
		notified = noWait
		return err
	}
	running, err := pipeline.Start(ctx, pipeline.Config{
		Clients: clients, JetStream: js, Namespace: o.kube.explicitNamespace(), Stages: o.stages,
		Log: log, Tracer: tp, ApplierWorkers: o.workers, PlannerWorkers: o.plannerWorkers, Rate: o.rate,
		ObserveTimeout: o.observeTimeout, QueueTimeout: o.queueTimeout, TraceFanout: o.traceFanout, Metrics: m, LeaderElection: leader, Policy: o.policy,
		Horizon: o.nats.maxAge, RevisionRetention: &o.retention, Webhooks: hooks,
	})
	if err != nil {
		return err
	}
	ready.Store(running)
	// Only now, the caches synced: the first lists allocate as a rollout
	// does, at the target the process started with.
	if setGCPercent(log) {
		gcCtx, stopGC := context.WithCancel(ctx)
		following := make(chan struct{})
		go func() {
			defer close(following)
			followActivity(gcCtx, log, running.Moving, running.Settling, running.RolloutSettled, gcFollowEvery)
		}()
		defer func() { stopGC(); <-following }()
	}
	log.Info("kvlive running", "stages", o.stages, "namespace", o.kube.explicitNamespace())
	err = running.Wait()
	stopBeside()
	return errors.Join(err, served(), dashboardServed(), notified())
}

// startNotifier sends rollouts' state changes to the --notify receivers
// until ctx ends; the returned func waits for it. Without --notify it does
// nothing.
func (o *runOptions) startNotifier(ctx context.Context, log *slog.Logger, js jetstream.JetStream, hooks *webhook.Client, m *telemetry.Metrics) (func() error, error) {
	if len(o.notify) == 0 {
		return noWait, nil
	}
	var receivers []notify.Receiver
	for _, spec := range o.notify {
		r, err := notify.ParseReceiver(spec)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		receivers = append(receivers, r)
	}
	n, err := notify.New(notify.Config{JetStream: js, Streams: o.nats.streamOptions(), Receivers: receivers, Client: hooks, Dashboard: o.dashboardURL,
		Log: log.With("component", "notify"), Metrics: m})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	return sync.OnceValue(func() error { return <-done }), nil
}

// noWait is the wait of what was not started.
func noWait() error { return nil }

// serveDashboard serves the dashboard on --dashboard-addr, its drift from
// the pipeline's cache; without the flag it serves nothing.
func (o *runOptions) serveDashboard(ctx context.Context, log *slog.Logger, js jetstream.JetStream, tp *sdktrace.TracerProvider, m *telemetry.Metrics, measure func() []drift.Row) (func() error, error) {
	if o.dashboard.addr == "" {
		return noWait, nil
	}
	ln, token, tlsConfig, err := o.dashboard.listen()
	if err != nil {
		return nil, err
	}
	return serveDashboard(ctx, log.With("component", "dashboard"), ln, tlsConfig != nil, dashboard.Config{
		JetStream: js, ReadOnly: o.dashboard.readOnly, Token: token, Drift: measure, Tracer: tp, By: whoAmI() + " (dashboard of kvlive run)", Metrics: m,
	})
}

// cluster reads the kubeconfig flags into clients, and the leader
// election flags, with --leader-elect, into the watcher's election.
func (o *runOptions) cluster() (kube.Clients, *pipeline.LeaderElection, error) {
	restCfg, _, err := o.kube.load()
	if err != nil {
		return kube.Clients{}, nil, err
	}
	var leader *pipeline.LeaderElection
	if o.leaderElect {
		if leader, err = o.leaderElection(); err != nil {
			return kube.Clients{}, nil, err
		}
	}
	clients, err := kube.NewClients(restCfg)
	return clients, leader, err
}

// infra is what the stages run on: the bus with kvlive's streams set up,
// tracing into it, and the metrics.
type infra struct {
	js        jetstream.JetStream
	natsReady func() error
	tp        *sdktrace.TracerProvider
	metrics   *telemetry.Metrics
	closeNATS func() error
}

// openInfra opens the bus, sets kvlive's streams up on it for this
// replica's scope, and starts tracing and metrics.
func (o *runOptions) openInfra(ctx context.Context, log *slog.Logger) (*infra, error) {
	var natsErrors bus.ErrorCount
	js, natsReady, closeNATS, err := o.connect(log, &natsErrors)
	if err != nil {
		return nil, err
	}
	streams := o.nats.streamOptions()
	streams.Scope, streams.VerdictDeadline = o.kube.explicitNamespace(), o.observeTimeout
	if err := events.Setup(ctx, js, streams, log); err != nil {
		return nil, errors.Join(err, closeNATS())
	}
	tp, err := telemetry.Setup(ctx, "kvlive", js)
	if err != nil {
		return nil, errors.Join(err, closeNATS())
	}
	m := telemetry.New()
	m.ConsumerLag(ctx, js)
	m.NATSAsyncErrors(natsErrors.Load)
	return &infra{js: js, natsReady: natsReady, tp: tp, metrics: m, closeNATS: closeNATS}, nil
}

// close flushes the traces, then closes the bus.
func (in *infra) close(ctx context.Context) error {
	return errors.Join(in.tp.Shutdown(ctx), in.closeNATS())
}

// serve serves /metrics, /healthz and /readyz (ready says whether kvlive
// is) on --metrics-addr until ctx ends; the returned func waits for the
// server to stop and says how it did. Without --metrics-addr it serves
// nothing.
func (o *runOptions) serve(ctx context.Context, log *slog.Logger, m *telemetry.Metrics, ready func() error) (func() error, error) {
	if o.metricsAddr == "" {
		return func() error { return nil }, nil
	}
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String(), "profiling", o.profiling)
	served := make(chan error, 1)
	go func() { served <- m.Serve(ctx, ln, ready, o.profiling) }()
	return func() error { return <-served }, nil
}

// leaderElection completes the --leader-elect-* flags: the Lease lives in
// the kubeconfig context's namespace unless told otherwise, and a replica
// is named after its host with a random suffix, as client-go's own
// components do.
func (o *runOptions) leaderElection() (*pipeline.LeaderElection, error) {
	if o.nats.url == "" {
		return nil, fmt.Errorf("%w: --leader-elect needs --nats-url: replicas with embedded NATS servers share no streams", errUsage)
	}
	le := o.leader
	if le.Namespace == "" {
		// The context's (or the pod's) namespace, not -n, which scopes
		// what kvlive watches.
		ns, err := o.kube.contextNamespace()
		if err != nil {
			return nil, err
		}
		le.Namespace = ns
	}
	if le.Namespace == "" {
		le.Namespace = metav1.NamespaceDefault
	}
	if le.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--leader-elect-id: %w", err)
		}
		le.Identity = host + "_" + string(uuid.NewUUID())
	}
	if le.LeaseDuration <= le.RenewDeadline || le.RenewDeadline <= le.RetryPeriod {
		return nil, fmt.Errorf("%w: want --leader-elect-lease-duration > --leader-elect-renew-deadline > --leader-elect-retry-period", errUsage)
	}
	return &le, nil
}

// isLoopback reports whether host (a --listen host) is a loopback address
// or localhost.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// connect reaches the external NATS server, or starts the embedded one,
// counting the connection's asynchronous errors in errs. The returned ready
// func reports whether NATS is connected, for /readyz.
func (o *runOptions) connect(log *slog.Logger, errs *bus.ErrorCount) (js jetstream.JetStream, ready func() error, closeAll func() error, err error) {
	opts, err := o.busOptions()
	if err != nil {
		return nil, nil, nil, err
	}
	opts.Log, opts.Extra = log, []nats.Option{errs.Counted()}
	b, err := bus.Open(opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return b.JetStream, b.Ready, b.Close, nil
}

// busOptions reads the NATS flags: --nats-url and its credentials, or the
// embedded server's --listen (beyond loopback only with --listen-config),
// --listen-config and --data-dir.
func (o *runOptions) busOptions() (bus.OpenOptions, error) {
	opts := bus.OpenOptions{Name: "kvlive", URL: o.nats.url, DataDir: o.dataDir, Command: "kvlive run"}
	if o.nats.url != "" {
		auth, err := o.nats.auth.options()
		opts.Auth = auth
		return opts, err
	}
	host, portStr, err := net.SplitHostPort(o.listen)
	if err != nil {
		return opts, fmt.Errorf("%w: --listen %q: %w", errUsage, o.listen, err)
	}
	if opts.Port, err = strconv.Atoi(portStr); err != nil {
		return opts, fmt.Errorf("%w: --listen port %q", errUsage, portStr)
	}
	opts.Host = host
	if o.listenConfig != "" {
		if opts.Listen, err = bus.LoadListenAuth(o.listenConfig); err != nil {
			return opts, fmt.Errorf("%w: --listen-config: %w", errUsage, err)
		}
	}
	if !isLoopback(host) && opts.Listen == nil {
		return opts, fmt.Errorf("%w: --listen %s: beyond loopback the embedded NATS server needs --listen-config, "+
			"a nats-server configuration whose authorization block says who may connect (and whose tls block, TLS); "+
			"or run a NATS server of your own and point --nats-url at it", errUsage, o.listen)
	}
	if !o.nats.auth.IsZero() || o.nats.auth.passwordFile != "" || o.nats.auth.tokenFile != "" {
		return opts, fmt.Errorf("%w: NATS credentials and TLS are for --nats-url; the embedded server's are in --listen-config", errUsage)
	}
	return opts, nil
}
