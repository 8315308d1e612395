package telemetry

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
)

// serve starts m.Serve on a loopback port and returns its base URL.
func serve(t *testing.T, profiling bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New().Serve(ctx, ln, func() error { return nil }, profiling) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestProfilingIsServedOnlyWhenAskedFor: /debug/pprof/ is there with
// --profiling and not without; /metrics and the probes are there either way.
func TestProfilingIsServedOnlyWhenAskedFor(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		base := serve(t, profiling)
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			if code, _ := get(t, base+path); code != http.StatusOK {
				t.Errorf("profiling %v: %s answered %d", profiling, path, code)
			}
		}
		code, body := get(t, base+"/debug/pprof/")
		switch {
		case profiling && (code != http.StatusOK || !strings.Contains(body, "goroutine")):
			t.Errorf("with profiling, /debug/pprof/ answered %d: %.200s", code, body)
		case !profiling && code != http.StatusNotFound:
			t.Errorf("without profiling, /debug/pprof/ answered %d, want 404", code)
		}
	}
}

// TestNATSAsyncErrorsAreExported: the count NATSAsyncErrors is given is
// read at scrape time.
func TestNATSAsyncErrorsAreExported(t *testing.T) {
	m, n := New(), int64(0)
	m.NATSAsyncErrors(func() int64 { return n })
	n = 3
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "kvlive_nats_async_errors_total" {
			if got := f.GetMetric()[0].GetCounter().GetValue(); got != 3 {
				t.Errorf("kvlive_nats_async_errors_total = %v, want 3", got)
			}
			return
		}
	}
	t.Error("kvlive_nats_async_errors_total is not exported")
}

// TestFleetDriftMeasuresOncePerScrape: a scrape measures the fleet once
// for both of its drift gauges (each measure a scan of every cached VM),
// and exports each count by object; before the cache has synced it
// exports neither.
func TestFleetDriftMeasuresOncePerScrape(t *testing.T) {
	m, measures, synced := New(), 0, false
	m.FleetDrift(func() (map[string]int, map[string]int, bool) {
		measures++
		return map[string]int{"clusterinstancetype/u1.medium": 3}, map[string]int{"clusterinstancetype/u1.medium": 1}, synced
	})
	gauges := func() map[string]float64 {
		families, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			for _, metric := range f.GetMetric() {
				for _, l := range metric.GetLabel() {
					if l.GetName() == "object" {
						got[f.GetName()+" "+l.GetValue()] = metric.GetGauge().GetValue()
					}
				}
			}
		}
		return got
	}
	if got := gauges(); len(got) != 0 || measures != 1 {
		t.Errorf("before the cache synced: %v after %d measures; want nothing after 1", got, measures)
	}
	synced = true
	want := map[string]float64{"kvlive_vms_behind clusterinstancetype/u1.medium": 3, "kvlive_vms_hotplug_pending clusterinstancetype/u1.medium": 1}
	if got := gauges(); !maps.Equal(got, want) || measures != 2 {
		t.Errorf("a scrape exported %v after %d measures in all; want %v after 2", got, measures, want)
	}
}
