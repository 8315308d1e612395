package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"kvlive/drift"
	"kvlive/internal/bus"
	"kvlive/internal/kube"
	"kvlive/internal/telemetry"
	"kvlive/readmodel/dashboard"
)

// dashboardFlags are how the dashboard listens: kvlive dashboard's own,
// and kvlive run's with a "dashboard-" prefix.
type dashboardFlags struct {
	prefix             string
	addr               string
	tokenFile          string
	certFile, keyFile  string
	readOnly           bool
	defaultAddr, usage string
}

// dashboardTokenEnv holds the bearer token when no token file is named.
const dashboardTokenEnv = "KVLIVE_DASHBOARD_TOKEN"

func (d *dashboardFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&d.addr, d.prefix+"addr", d.defaultAddr, d.usage)
	f.StringVar(&d.tokenFile, d.prefix+"token-file", "", "file holding the bearer token every request must carry (else $"+dashboardTokenEnv+"); needed beyond loopback")
	f.StringVar(&d.certFile, d.prefix+"tls-cert-file", "", "serve HTTPS with this certificate (PEM); needed beyond loopback")
	f.StringVar(&d.keyFile, d.prefix+"tls-key-file", "", "the key of --"+d.prefix+"tls-cert-file (PEM)")
	f.BoolVar(&d.readOnly, d.prefix+"read-only", false, "serve pages without buttons, whatever the NATS user may do")
}

// listen checks the flags and listens: on loopback as they are, beyond it
// only with TLS and a bearer token (or behind kubectl port-forward, which
// reaches a loopback address).
func (d *dashboardFlags) listen() (net.Listener, string, *tls.Config, error) {
	token, err := bus.ReadSecret(d.tokenFile, dashboardTokenEnv)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--%stoken-file: %w", d.prefix, err)
	}
	if (d.certFile == "") != (d.keyFile == "") {
		return nil, "", nil, fmt.Errorf("%w: --%stls-cert-file and --%stls-key-file go together", errUsage, d.prefix, d.prefix)
	}
	host, _, err := net.SplitHostPort(d.addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: --%saddr %q: %w", errUsage, d.prefix, d.addr, err)
	}
	if !isLoopback(host) && (d.certFile == "" || token == "") {
		return nil, "", nil, fmt.Errorf("%w: --%saddr %s: beyond loopback the dashboard needs TLS (--%stls-cert-file, --%stls-key-file) and a bearer token (--%stoken-file or $%s); or keep it on loopback and reach it with kubectl port-forward",
			errUsage, d.prefix, d.addr, d.prefix, d.prefix, d.prefix, dashboardTokenEnv)
	}
	var tlsConfig *tls.Config
	if d.certFile != "" {
		cert, err := tls.LoadX509KeyPair(d.certFile, d.keyFile)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--%stls-cert-file: %w", d.prefix, err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", d.addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--%saddr: %w", d.prefix, err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	return ln, token, tlsConfig, nil
}

// serveDashboard serves the dashboard on ln until ctx ends; the returned
// func waits for it to stop and says how it did.
func serveDashboard(ctx context.Context, log *slog.Logger, ln net.Listener, https bool, cfg dashboard.Config) (func() error, error) {
	cfg.Log = log
	d, err := dashboard.New(ctx, cfg)
	if err != nil {
		return nil, errors.Join(err, ln.Close())
	}
	if err := d.Start(ctx); err != nil {
		return nil, errors.Join(err, ln.Close())
	}
	scheme := "http"
	if https {
		scheme = "https"
	}
	buttons, why := d.Writable()
	log.Info("serving the dashboard", "url", scheme+"://"+ln.Addr().String()+"/", "buttons", buttons, "because", why)
	srv := &http.Server{
		Handler:           d.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Live pages stream until the browser leaves or kvlive stops.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// Waiting twice (an early return after a late one) says the same.
	return sync.OnceValue(func() error {
		select {
		case err := <-served:
			return fmt.Errorf("dashboard: %w", err)
		case <-ctx.Done():
		}
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(shutdown)
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}), nil
}

// dashboardOptions are kvlive dashboard's flags.
type dashboardOptions struct {
	storeOptions
	listen dashboardFlags
	drift  bool
	kube   *kubeFlags
}

func newDashboardCmd(g *globals) *cobra.Command {
	o := &dashboardOptions{storeOptions: newStoreOptions(g), kube: newKubeFlags(), listen: dashboardFlags{
		defaultAddr: "127.0.0.1:8090", usage: "address the dashboard listens on (loopback by default; beyond it only with TLS and a bearer token)",
	}}
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a web dashboard of kvlive's rollouts, live while they run",
		Long: `dashboard serves kvlive's records as web pages: the rollouts newest first;
a rollout's batches and gates, its VMs (kvlive's prediction next to
KubeVirt's verdict, filtered to those that differ, failed or are pending) and
its trace as a waterfall, updated as the records change; the dead letters;
and, with --drift, drift per instance type from an informer cache of the
cluster. It reads NATS as kvlive rollouts, outcomes and trace do, and never
lists the API server for a page.

Pause, resume, promote, abort and undo are buttons, each with a
confirmation, sent as the CLI sends them under the dashboard's NATS user: a
user the NATS server says may not write rollout control records (the
shipped reader role) gets no buttons, nor does --read-only. kvlive run
--dashboard-addr serves the same from the running pipeline.`,
		Example: `  kvlive dashboard                                  # http://127.0.0.1:8090/, the store of a local kvlive run
  kvlive dashboard --nats-url nats://kvlive-nats:4222 --nats-user kvlive-reader --nats-password-file reader.pw
  kubectl port-forward deploy/kvlive 8090 &          # kvlive run --dashboard-addr 127.0.0.1:8090 in the pod`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	o.listen.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.drift, "drift", false, "also show drift per instance type, from an informer cache of the kubeconfig's cluster (lists every VM once, then watches)")
	o.kube.addFlags(cmd.Flags(), "with --drift, only VMs in this namespace (default: every namespace)")
	o.store.bind(cmd)
	return cmd
}

func (o *dashboardOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.complete(cmd)
	return nil
}

func (o *dashboardOptions) Validate() error { return nil }

// Run serves the dashboard until interrupted.
func (o *dashboardOptions) Run(ctx context.Context) error {
	ln, token, tlsConfig, err := o.listen.listen()
	if err != nil {
		return err
	}
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		cfg := dashboard.Config{JetStream: js, ReadOnly: o.listen.readOnly, Token: token, By: whoAmI() + " (dashboard)"}
		if o.drift {
			measure, stop, err := o.startDrift(ctx)
			if err != nil {
				return errors.Join(err, ln.Close())
			}
			defer stop()
			cfg.Drift = measure
		}
		tp, err := telemetry.Setup(ctx, "kvlive-dashboard", js)
		if err != nil {
			return errors.Join(err, ln.Close())
		}
		defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
		cfg.Tracer = tp
		wait, err := serveDashboard(ctx, o.log, ln, tlsConfig != nil, cfg)
		if err != nil {
			return err
		}
		return wait()
	})
}

// startDrift starts an informer cache of the cluster for the drift page.
func (o *dashboardOptions) startDrift(ctx context.Context) (func() []drift.Row, func(), error) {
	cfg, _, err := o.kube.load()
	namespace := o.kube.explicitNamespace()
	if err != nil {
		return nil, nil, err
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return nil, nil, err
	}
	c, stop, err := kube.StartCache(ctx, clients, namespace, kube.DefaultSyncTimeout)
	if err != nil {
		return nil, nil, err
	}
	return func() []drift.Row { return drift.Measure(c, drift.Filter{Namespace: namespace, CountsOnly: true}) }, stop, nil
}
