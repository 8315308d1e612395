package preview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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

// serve runs s, on a NATS server of the test's own, until the test ends,
// and returns a connection to ask on.
func serve(t *testing.T, s *Server) *nats.Conn {
	t.Helper()
	nc := testenv.JetStream(t).Conn()
	s.Conn = nc
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitServed(t, nc)
	return nc
}

// waitServed waits until a server answers previews on nc's server: Run
// subscribes after it starts.
func waitServed(t *testing.T, nc *nats.Conn) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, err := nc.Request(events.PreviewSubject, []byte("{"), time.Second)
		if !errors.Is(err, nats.ErrNoResponders) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no preview server within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAskedPreviewIsWhatPlanSays: a preview asked of a replica is the
// plan `kvlive plan` makes of the same cache, selector included (the
// worked example's one VM, api-3, has no labels).
func TestAskedPreviewIsWhatPlanSays(t *testing.T) {
	fleet := switchFleet(t)
	nc := serve(t, &Server{Fleet: fleet})
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
// told to read the cluster (ErrUnavailable), why included: a refusal
// the replica sent, never a wait that ran out.
func TestPreviewsAReplicaCannotGiveAreUnavailable(t *testing.T) {
	alone := testenv.JetStream(t).Conn()
	if _, err := Ask(t.Context(), alone, offline.Request{Object: medium, From: &small}, time.Minute); !errors.Is(err, ErrNoReplica) {
		t.Errorf("with no replica: %v, want ErrNoReplica", err)
	}
	nc := serve(t, &Server{Fleet: switchFleet(t), Scope: "shop"})
	for _, tc := range []struct {
		req  offline.Request
		want string
	}{
		{offline.Request{Object: medium, From: &small}, "caches namespace shop only"},
		{offline.Request{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.nope"}, From: &small, Namespace: "shop"}, "n1.nope does not exist"},
	} {
		// A refusal, not the wait running out (ErrUnavailable alone):
		// the replica said so.
		_, err := Ask(t.Context(), nc, tc.req, time.Minute)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrRefused saying %q", tc.req, err, tc.want)
		}
	}
}

// TestPreviewRepliesComeInParts: a preview larger than a part comes in
// numbered parts, each within the limit, the last saying how many, and
// Ask reads it back whole and in order.
func TestPreviewRepliesComeInParts(t *testing.T) {
	fleet := fleetOf(t, 200)
	const limit = 4096
	nc := serve(t, &Server{Fleet: fleet, partLimit: limit})
	req := offline.Request{Object: medium, From: &small}
	want, err := offline.Plan(fleet, req)
	if err != nil {
		t.Fatal(err)
	}

	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(requestOf(req))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(events.PreviewSubject, inbox, body); err != nil {
		t.Fatal(err)
	}
	var read []events.Plan
	parts := 0
	for last := false; !last; {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("part %d: %v", parts+1, err)
		}
		parts++
		if len(msg.Data) > limit {
			t.Errorf("part %d holds %d bytes, more than %d", parts, len(msg.Data), limit)
		}
		if last, err = part(msg, parts); err != nil {
			t.Fatal(err)
		}
		read = append(read, decodeAll(t, msg.Data)...)
	}
	if parts < 5 || !sameJSON(t, read, want) {
		t.Errorf("%d plans read in %d parts; want the %d planned, in several parts", len(read), parts, len(want))
	}
	got, err := Ask(t.Context(), nc, req, 5*time.Second)
	if err != nil || !sameJSON(t, got, want) {
		t.Errorf("Ask read %d plans (%v); want the %d planned", len(got), err, len(want))
	}

	msg := &nats.Msg{Header: nats.Header{}}
	msg.Header.Set(events.HeaderPreviewPart, "3")
	if _, err := part(msg, 2); !errors.Is(err, ErrUnavailable) {
		t.Errorf("part 3 where 2 was due: %v, want ErrUnavailable", err)
	}
	msg.Header.Set(events.HeaderPreviewPart, "2")
	msg.Header.Set(events.HeaderPreviewParts, "4")
	if _, err := part(msg, 2); !errors.Is(err, ErrUnavailable) {
		t.Errorf("part 2 saying it is the last of 4: %v, want ErrUnavailable", err)
	}
}

// TestAReplicaRefusesWhatItDoesNotKnow: a request with a field this
// replica does not know (a newer command's) is refused, not planned
// without it, so the command reads the cluster.
func TestAReplicaRefusesWhatItDoesNotKnow(t *testing.T) {
	if _, err := decodeRequest([]byte(`{"object":{"kind":"VirtualMachineClusterInstancetype","name":"n1.medium"},"onlyRunning":true}`)); err == nil {
		t.Error("a request with an unknown field was read")
	}
	if _, err := decodeRequest([]byte(`{"object":{"kind":"VirtualMachineClusterInstancetype","name":"n1.medium"},"selector":"tier in (web"}`)); err == nil {
		t.Error("a request with a malformed selector was read")
	}
}

// fleetOf is the worked example's cluster with n stopped VMs more on
// n1.small.
func fleetOf(t *testing.T, n int) offline.Fleet {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "offline", "testdata", "switch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.Write(raw)
	for i := range n {
		fmt.Fprintf(&b, `
---
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: web-%03d
  namespace: shop
  uid: 0a0a0a0a-0000-4000-8000-%012d
spec:
  runStrategy: Halted
  instancetype:
    kind: VirtualMachineClusterInstancetype
    name: n1.small
  template:
    spec:
      domain:
        devices: {}
`, i, i)
	}
	fleet, err := offline.Load(t.Context(), strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return fleet
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

// TestAskOrReadReadsTheClusterOnlyWhenNoReplicaGivesAPreview: a replica's
// preview of VMs is the switch's, the cluster unread; with no replica, a
// refusal or a preview of no VM the cluster is read; an ended context
// reads nothing.
func TestAskOrReadReadsTheClusterOnlyWhenNoReplicaGivesAPreview(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	fromCluster := []events.Plan{{EventID: "plan/x", VM: events.VMRef{Namespace: "shop", Name: "from-the-cluster"}}}
	reads := 0
	read := func(context.Context) ([]events.Plan, error) { reads++; return fromCluster, nil }
	ask := func(nc *nats.Conn, req offline.Request) []events.Plan {
		t.Helper()
		plans, err := AskOrRead(t.Context(), nc, req, 5*time.Second, log, read)
		if err != nil {
			t.Fatal(err)
		}
		return plans
	}
	fleet := switchFleet(t)
	nc := serve(t, &Server{Fleet: fleet})
	if plans := ask(nc, offline.Request{Object: medium, From: &small}); reads != 0 || len(plans) != 1 || plans[0].VM.Name != "api-3" {
		t.Errorf("with a replica: %d cluster reads, plans %+v; want the replica's api-3 and no read", reads, plans)
	}
	none, err := labels.Parse("app=none")
	if err != nil {
		t.Fatal(err)
	}
	for what, tc := range map[string]struct {
		nc  *nats.Conn
		req offline.Request
	}{
		"no replica":        {testenv.JetStream(t).Conn(), offline.Request{Object: medium, From: &small}},
		"a refusal":         {nc, offline.Request{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.nope"}, From: &small}},
		"a preview of none": {nc, offline.Request{Object: medium, From: &small, Selector: none}},
	} {
		reads = 0
		if plans := ask(tc.nc, tc.req); reads != 1 || !sameJSON(t, plans, fromCluster) {
			t.Errorf("%s: %d cluster reads, plans %+v; want the cluster's, read once", what, reads, plans)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	reads = 0
	if _, err := AskOrRead(ctx, nc, offline.Request{Object: medium, From: &small}, 5*time.Second, log, read); err == nil || reads != 0 {
		t.Errorf("an ended context: %v, %d cluster reads; want its error and no read", err, reads)
	}
}
