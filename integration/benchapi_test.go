//go:build integration && bench

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"kvlive/integration/framework"
)

// apiUse is what the API server served, from its own metrics: requests by
// verb and resource, and watch events sent to watchers by resource. The
// CPU rows say how much more the API server works per VM under kvlive;
// these say on what.
type apiUse map[string]float64

// readAPI reads the API server's request and watch-event counters.
func (e *env) readAPI() apiUse {
	e.t.Helper()
	raw, err := e.clients.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.ctx)
	if err != nil {
		e.t.Fatalf("API server metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		e.t.Fatalf("API server metrics: %v", err)
	}
	use := apiUse{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := labelsOf(m.GetLabel())
		key := strings.ToLower(l["verb"]) + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		use[key] += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_watch_events_total"].GetMetric() {
		use["watch event "+labelsOf(m.GetLabel())["resource"]] += m.GetCounter().GetValue()
	}
	return use
}

func labelsOf(pairs []*dto.LabelPair) map[string]string {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		m[p.GetName()] = p.GetValue()
	}
	return m
}

// since is what the API server served between before and u.
func (u apiUse) since(before apiUse) apiUse {
	d := apiUse{}
	for k, v := range u {
		if n := v - before[k]; n > 0 {
			d[k] = n
		}
	}
	return d
}

// String prints every request and watch event counted, most first, the
// few a move makes once (which perVM leaves out) among them.
func (u apiUse) String() string {
	return u.most(func(float64) bool { return true }, func(v float64) string { return fmt.Sprintf("%.0f", v) })
}

// perVM prints the requests and watch events per VM moved, most first,
// leaving out what came to less than one in twenty VMs.
func (u apiUse) perVM(vms int) string {
	return u.most(func(v float64) bool { return v/float64(vms) >= 0.05 }, func(v float64) string { return fmt.Sprintf("%.2f", v/float64(vms)) })
}

// most prints the counts kept, each as shown, most first.
func (u apiUse) most(keep func(float64) bool, show func(float64) string) string {
	keys := make([]string, 0, len(u))
	for k, v := range u {
		if keep(v) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if u[keys[i]] != u[keys[j]] {
			return u[keys[i]] > u[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+show(u[k]))
	}
	return strings.Join(parts, ", ")
}

// writes counts the writes of VMs, VMIs and revisions: KubeVirt's reaction
// to a rollout and kvlive's own, without the API server's and the
// clients' leases.
func (u apiUse) writes() float64 {
	n := 0.0
	for k, v := range u {
		verb, resource, _ := strings.Cut(k, " ")
		switch verb {
		case "post", "put", "patch", "delete", "apply":
			if strings.HasPrefix(resource, "virtualmachine") || strings.HasPrefix(resource, "controllerrevisions") {
				n += v
			}
		}
	}
	return n
}

// waitQuiet waits, up to a minute, until nothing has written a VM, a VMI
// or a revision for a second, so a run does not start while KubeVirt (the
// stand-in) still reacts to the one before and pay for its work. Not
// getting quiet is logged, not fatal: a bench never fails on a figure.
func (e *env) waitQuiet(before string) {
	e.t.Helper()
	start := time.Now()
	last := e.readAPI().writes()
	for time.Since(start) < time.Minute {
		time.Sleep(time.Second)
		now := e.readAPI().writes()
		if now == last {
			if waited := time.Since(start); waited > 5*time.Second {
				e.t.Logf("before %s: waited %v for the cluster to be quiet", before, waited.Round(100*time.Millisecond))
			}
			return
		}
		last = now
	}
	e.t.Logf("before %s: the cluster was still writing VMs after a minute; measuring anyway", before)
}

// settled waits until KubeVirt's reaction to a run is over (the stand-in
// has had nothing to do for half a second) and returns when it last
// reconciled a VM: with the API server saturated, a loop that outruns
// KubeVirt leaves its reaction to after the last write, so both kvlive
// and the raw loop are also timed to the end of it.
func (e *env) settled(after time.Time) time.Time {
	e.t.Helper()
	const quiet = 500 * time.Millisecond
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		last, idle := e.standin.Settled()
		if idle && time.Since(last) >= quiet {
			if last.Before(after) {
				return after
			}
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Logf("the stand-in was still reconciling VMs two minutes after the run; timing it to now")
	return time.Now()
}

// profileAPIServer takes a CPU profile of the API server for d, in the
// background, as profileKvlive does for kvlive run; done waits for it and
// logs the top functions, cumulative, so kvlive's rollout and the raw
// loop's can be set side by side.
func (e *env) profileAPIServer(what string, d time.Duration) (done func()) {
	e.t.Helper()
	var raw []byte
	var err error
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		raw, err = e.clients.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(int(d.Seconds()))).Timeout(d + time.Minute).DoRaw(e.ctx)
	}()
	return func() {
		<-fetched
		if err != nil {
			e.t.Logf("profile of kube-apiserver (%s): %v", what, err)
			return
		}
		f, ferr := os.CreateTemp("", "kvlive-bench-apiserver-"+strings.ReplaceAll(what, " ", "-")+"-*.pprof")
		if ferr == nil {
			_, ferr = f.Write(raw)
			ferr = errors.Join(ferr, f.Close())
		}
		if ferr != nil {
			e.t.Logf("profile of kube-apiserver (%s): %v", what, ferr)
			return
		}
		args := []string{"tool", "pprof", "-top", "-cum", "-nodecount=60", framework.Binary(e.t, "kube-apiserver"), f.Name()}
		out, err := exec.Command("go", args...).CombinedOutput()
		e.t.Logf("profile of kube-apiserver during %s (%v), kept in %s:\n%s", what, err, f.Name(), out)
	}
}
