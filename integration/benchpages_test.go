//go:build integration && bench

package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"
)

// pagesVMs is the pages section's fleet: the rollout the live pages cost
// was first measured on (issue 59, item 9).
const pagesVMs = 1000

// pagesOpen is how many live pages follow the rollout besides the
// stalled one.
const pagesOpen = 3

// benchPages is the section "live pages": a re-pin of 1,000 stopped VMs,
// nothing reacting, by kvlive run serving its dashboard, with no page
// open and with three pages following the rollout's live part and a
// fourth that takes nothing (a stalled reader), by turns (none, pages,
// pages, none), in the deployed shape (pinDeployedShape). It reports the
// rate with pages against the rate without, and kvlive's highest RSS
// during each kind of run.
func benchPages(t *testing.T, tab *benchTable) {
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: pagesVMs}, stopped: true})
	e.stopStandin()
	e.followTimeout = movedWithin(pagesVMs)
	e.followSlice = e.followTimeout
	pinDeployedShape(t)
	proc := e.runKvlive("kvlive with its dashboard", append(benchDefaults.args(), "--dashboard-addr", "127.0.0.1:0",
		"--observe-timeout", stoppedObserveTimeout.String())...)
	e.waitReady(proc, syncedWithin(pagesVMs))
	e.waitGenerations()
	m := regexp.MustCompile(`serving the dashboard".* url=(\S+)/ `).FindStringSubmatch(proc.out.String())
	if m == nil {
		t.Fatal("kvlive run --dashboard-addr logged no dashboard address")
	}
	dashboard := m[1]
	on := &fleetOn{itMedium, itLarge}
	var rates [2][]float64
	var peak [2]uint64
	for run, withPages := range []bool{false, true, true, false} {
		kind := 0
		e.onRollout = nil
		if withPages {
			kind = 1
			e.onRollout = func(id string) func() { return openPages(t, dashboard, id) }
		}
		sampled := sampleRSS(t, proc)
		r := e.stoppedRollout(on, false, false)
		peak[kind] = max(peak[kind], sampled())
		rates[kind] = append(rates[kind], r.rate)
		t.Logf("run %d (pages %v): %.0f VMs/s", run, withPages, r.rate)
		e.waitSettledDown(proc, pagesVMs)
	}
	e.onRollout = nil
	ratio := median(rates[1]) / median(rates[0])
	what := fmt.Sprintf("re-pin %d stopped VMs, nothing reacting, %s, with %d live pages of the rollout and a stalled one (2 runs each)", pagesVMs, benchDefaults, pagesOpen)
	tab.aim("pages", what, fmt.Sprintf("with pages %s VMs/s, without %s VMs/s: %.2f× (medians)", spread("%.0f", rates[1]), spread("%.0f", rates[0]), ratio),
		"≥ 0.95× without", ratio >= 0.95)
	tab.add("pages", what, fmt.Sprintf("kvlive run's highest RSS: with pages %s, without %s", mib(peak[1]), mib(peak[0])), "")
}

// openPages opens pagesOpen live pages of rollout id on dashboard, each
// reading every event as a browser would, and a stalled one that sends
// its request and reads nothing; the returned func closes them all.
func openPages(t *testing.T, dashboard, id string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	feed := dashboard + "/live/rollout/" + url.PathEscape(id)
	for range pagesOpen {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, feed, nil)
			if err != nil {
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer func() { _ = resp.Body.Close() }()
			_, _ = io.Copy(io.Discard, bufio.NewReader(resp.Body))
		})
	}
	u, err := url.Parse(feed)
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if tcp, ok := stalled.(*net.TCPConn); ok {
		_ = tcp.SetReadBuffer(1024)
	}
	if _, err := fmt.Fprintf(stalled, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", u.RequestURI(), u.Host); err != nil {
		t.Fatal(err)
	}
	return func() {
		cancel()
		_ = stalled.Close()
		wg.Wait()
	}
}

// sampleRSS reads p's RSS every 250 ms until the returned func is called,
// which returns the highest read.
func sampleRSS(t *testing.T, p *kvliveProc) func() uint64 {
	t.Helper()
	var (
		mu      sync.Mutex
		highest uint64
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if r, ok := vmRSS(p); ok {
				mu.Lock()
				highest = max(highest, r)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return highest
	}
}
