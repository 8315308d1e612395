package telemetry

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/metrics"

	"kvlive/events"
)

// Health exports, read at scrape time, whether this process is connected
// to NATS (natsErr returns nil) and whether it is ready, as /readyz says
// (readyErr returns nil): what alerts on an unreachable bus or a watcher
// that cannot publish read.
func (m *Metrics) Health(natsErr, readyErr func() error) {
	if m == nil {
		return
	}
	ok := func(f func() error) func() float64 {
		return func() float64 {
			if f() != nil {
				return 0
			}
			return 1
		}
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvlive_nats_connected", Help: "1 while this process is connected to NATS, else 0."}, ok(natsErr)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvlive_ready", Help: "1 while this process is ready (its caches synced, NATS reachable, every change published), as /readyz says, else 0."}, ok(readyErr)))
}

// RolloutsPaused exports how many rollouts are paused (by an operator, a
// gate, a webhook or a restart window), as this process's watch of the
// control records last saw them.
func (m *Metrics) RolloutsPaused(n func() int) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvlive_rollouts_paused", Help: "Rollouts paused (by an operator, a gate, a webhook or a restart window), as this process's control watch last saw them.",
	}, func() float64 { return float64(n()) }))
}

// kubeOnce registers client-go's request metrics once per process:
// client-go keeps one global hook.
var kubeOnce sync.Once

// KubeRequests exports the API server requests this process makes (every
// clientset's), by verb and answer code, and their latency by verb.
func (m *Metrics) KubeRequests() {
	if m == nil {
		return
	}
	kubeOnce.Do(func() {
		requests := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvlive_kube_requests_total", Help: "Requests to the Kubernetes API server, by HTTP method and answer code.",
		}, []string{"method", "code"})
		latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvlive_kube_request_duration_seconds", Help: "Latency of requests to the Kubernetes API server, by verb.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 13),
		}, []string{"verb"})
		m.Registry.MustRegister(requests, latency)
		metrics.Register(metrics.RegisterOpts{
			RequestResult:  kubeResult{requests},
			RequestLatency: kubeLatency{latency},
		})
	})
}

type kubeResult struct{ v *prometheus.CounterVec }

func (r kubeResult) Increment(_ context.Context, code, method, _ string) {
	r.v.WithLabelValues(method, code).Inc()
}

type kubeLatency struct{ v *prometheus.HistogramVec }

func (l kubeLatency) Observe(_ context.Context, verb string, _ url.URL, d time.Duration) {
	l.v.WithLabelValues(verb).Observe(d.Seconds())
}

// zeroSeries sets the series alerts read to zero before anything counts
// them, so a rule's rate() sees a series from the first scrape on.
func (m *Metrics) zeroSeries() {
	for _, stage := range []string{events.ConsumerPlanner, events.ConsumerApplier, events.ConsumerVerifier} {
		m.settled.WithLabelValues(stage, "dead-letter")
	}
	for _, r := range events.Results {
		m.outcomes.WithLabelValues(string(r))
	}
}
