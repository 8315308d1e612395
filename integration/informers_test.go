//go:build integration

package integration

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestInformersStreamTheirFirstLists starts kvlive run on a fleet and reads
// from the API server's audit log how its informers filled their caches:
// each by a watch that streams the existing VMs, VMIs and revisions
// (sendInitialEvents), none by a list of the whole fleet, which a large
// fleet would have it decode at once. An edit then reaches every VM, so
// what was streamed is the whole fleet. A kvlive started with client-go's
// KUBE_FEATURE_WatchListClient=false lists, as asked. Neither complains
// of client-go's feature gates being replaced after use.
func TestInformersStreamTheirFirstLists(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 40}})
	e.runKvlive("all stages")
	e.waitGenerations()

	for _, resource := range []string{"virtualmachines", "virtualmachineinstances", "controllerrevisions"} {
		for _, ev := range e.kvliveRequests("list", resource) {
			t.Errorf("kvlive listed %s: %s", resource, ev.RequestURI)
		}
		streamed := 0
		for _, ev := range e.auditStage("ResponseStarted", "watch", resource) {
			if !strings.HasPrefix(ev.UserAgent, kvliveUserAgent) {
				continue
			}
			u, err := url.Parse(ev.RequestURI)
			if err != nil {
				t.Fatalf("audit: request URI %q: %v", ev.RequestURI, err)
			}
			if u.Query().Get("sendInitialEvents") == "true" {
				streamed++
			}
		}
		if streamed == 0 {
			t.Errorf("no watch of kvlive's streamed the existing %s (sendInitialEvents=true)", resource)
		}
	}

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	progress := e.follow(eventID)
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(progress, rolloutWant{
		eventID:  eventID,
		shapes:   edited,
		action:   vmShape.expected,
		revision: revisionOf(it),
		clean:    true,
	})

	e.extraEnv = append(e.extraEnv, "KUBE_FEATURE_WatchListClient=false")
	e.runKvlive("a second replica, told not to stream")
	e.waitFor("the second replica to list the VMs", time.Minute, func() (bool, string) {
		lists := e.kvliveRequests("list", "virtualmachines")
		return len(lists) > 0, plural(len(lists), "list")
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if out := p.out.String(); strings.Contains(out, "feature gates") {
			t.Errorf("kvlive (%s) complained of its feature gates:\n%s", p.name, out)
		}
	}
}
