package preview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/planner/offline"
)

var (
	small  = events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.small"}
	medium = events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.medium"}
)

// switchFleet is the worked example's cluster (planner/offline's testdata).
func switchFleet(t *testing.T) offline.Fleet {
	t.Helper()
	in, err := os.Open(filepath.Join("..", "offline", "testdata", "switch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	fleet, err := offline.Load(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	return fleet
}

// serve answers previews from fleet, scoped to scope, on a NATS server of
// the test's own, and returns a connection to ask on.
func serve(t *testing.T, fleet offline.Fleet, scope string) *nats.Conn {
	t.Helper()
	nc := testenv.JetStream(t).Conn()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	s := &Server{Conn: nc, Fleet: fleet, Scope: scope}
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	// Run subscribes before anything can ask: wait for the interest.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := nc.Request(Subject, []byte("{"), time.Second); !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nc
}

// TestAskedPreviewIsWhatPlanSays: a preview asked of a replica is the
// plan `kvlive plan` makes of the same cache, selector included (the
// worked example's one VM, api-3, has no labels).
func TestAskedPreviewIsWhatPlanSays(t *testing.T) {
	fleet := switchFleet(t)
	nc := serve(t, fleet, "")
	for selector, vms := range map[string]int{"": 1, "tier!=db": 1, "app=api": 0} {
		sel, err := labels.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		req := offline.Request{Object: medium, From: &small, Selector: sel}
		want, err := offline.Plan(fleet, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Ask(t.Context(), nc, req, 5*time.Second)
		if err != nil {
			t.Fatalf("-l %q: %v", selector, err)
		}
		if len(got) != vms || !sameJSON(t, got, want) {
			t.Errorf("-l %q: the replica previewed\n%+v\nwant what plan says\n%+v", selector, got, want)
		}
	}
}

// TestPreviewsAReplicaCannotGiveAreUnavailable: with no replica, one of
// another namespace, or a request offline planning refuses, the asker is
// told to read the cluster (ErrUnavailable), why included, at once.
func TestPreviewsAReplicaCannotGiveAreUnavailable(t *testing.T) {
	alone := testenv.JetStream(t).Conn()
	if _, err := Ask(t.Context(), alone, offline.Request{Object: medium, From: &small}, time.Minute); !errors.Is(err, ErrNoReplica) {
		t.Errorf("with no replica: %v, want ErrNoReplica", err)
	}
	nc := serve(t, switchFleet(t), "shop")
	for _, tc := range []struct {
		req  offline.Request
		want string
	}{
		{offline.Request{Object: medium, From: &small}, "caches namespace shop only"},
		{offline.Request{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.nope"}, From: &small, Namespace: "shop"}, "n1.nope does not exist"},
	} {
		start := time.Now()
		_, err := Ask(t.Context(), nc, tc.req, time.Minute)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrRefused saying %q", tc.req, err, tc.want)
		}
		if waited := time.Since(start); waited > 30*time.Second {
			t.Errorf("%+v: refused after %v, not at once", tc.req, waited)
		}
	}
}

// TestPreviewRepliesComeInParts: plans larger than a message are sent in
// parts, each within the limit, and read back whole and in order.
func TestPreviewRepliesComeInParts(t *testing.T) {
	var plans []events.Plan
	for i := range 500 {
		plans = append(plans, events.Plan{EventID: "plan/x", VM: events.VMRef{Namespace: "ns", Name: fmt.Sprintf("vm-%03d", i)}, Action: events.ResultNextBoot})
	}
	const limit = 4096
	parts, err := encode(plans, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 5 {
		t.Fatalf("%d plans in %d parts of %d bytes", len(plans), len(parts), limit)
	}
	var got []events.Plan
	for i, p := range parts {
		if len(p) > limit {
			t.Errorf("part %d holds %d bytes, more than %d", i+1, len(p), limit)
		}
		msg := &nats.Msg{Header: nats.Header{}, Data: p}
		msg.Header.Set(headerPart, fmt.Sprintf("%d/%d", i+1, len(parts)))
		n, err := part(msg, i+1)
		if err != nil || n != len(parts) {
			t.Fatalf("part %d: %d, %v", i+1, n, err)
		}
		got = append(got, decodeAll(t, p)...)
	}
	if !reflect.DeepEqual(got, plans) {
		t.Errorf("read back %d plans, not the %d sent in order", len(got), len(plans))
	}
	msg := &nats.Msg{Header: nats.Header{}}
	msg.Header.Set(headerPart, "3/4")
	if _, err := part(msg, 2); !errors.Is(err, ErrUnavailable) {
		t.Errorf("part 3 where 2 was due: %v, want ErrUnavailable", err)
	}
	if empty, err := encode(nil, limit); err != nil || len(empty) != 1 || len(empty[0]) != 0 {
		t.Errorf("no plans: %q, %v; want one empty part", empty, err)
	}
}

func decodeAll(t *testing.T, data []byte) []events.Plan {
	t.Helper()
	var plans []events.Plan
	for line := range strings.Lines(string(data)) {
		var p events.Plan
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	return plans
}

// sameJSON reports whether a and b encode alike: plans read back from
// JSON keep their times without a monotonic reading.
func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
