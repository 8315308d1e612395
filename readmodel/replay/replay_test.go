package replay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

var (
	u1 = events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}
	u2 = events.Ref{Kind: events.KindClusterInstancetype, Name: "u2"}
)

func publishChange(t *testing.T, js jetstream.JetStream, gen int64) string {
	t.Helper()
	c := events.Changed{Object: u1, UID: "uid-u1", Generation: gen, OldGeneration: gen - 1, NewSpec: json.RawMessage(`{"cpu":{"guest":2},"memory":{"guest":"4Gi"}}`)}
	id := events.EventID(u1.Kind, c.UID, gen)
	body, err := events.Encode(events.TypeInstancetypeChanged, id, "test", "", time.Now(), &c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), events.NewMsg(events.ChangedSubject(u1.Kind), id, events.TypeInstancetypeChanged, body)); err != nil {
		t.Fatal(err)
	}
	return id
}

func publishSwitch(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	req := events.SwitchRequest{ID: "s1", From: u1, To: u2, Selector: "tier=web", RequestedAt: time.Now()}
	id := events.SwitchEventID(req.ID)
	body, err := events.Encode(events.TypeSwitchRequested, id, "test", "", time.Now(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), events.NewMsg(events.SwitchSubject(), id, events.TypeSwitchRequested, body)); err != nil {
		t.Fatal(err)
	}
	return id
}

func ids(stored []Stored) string {
	var out []string
	for _, s := range stored {
		out = append(out, s.ID)
	}
	return strings.Join(out, ",")
}

func TestSelect(t *testing.T) {
	js := testenv.JetStream(t)
	e1 := publishChange(t, js, 2)
	sw := publishSwitch(t, js)
	e3 := publishChange(t, js, 3)
	// A poison message in the stream is skipped, not fatal.
	if _, err := js.Publish(context.Background(), events.ChangedSubject(u1.Kind), []byte("junk")); err != nil {
		t.Fatal(err)
	}
	other := events.Ref{Kind: events.KindClusterInstancetype, Name: "other"}
	// --since boundary: just after the first event as the stream stored it.
	first, err := Select(context.Background(), js, Selection{EventID: e1})
	if err != nil || len(first) != 1 {
		t.Fatalf("select %s: %v, %v", e1, first, err)
	}
	mid := first[0].Time.Add(time.Nanosecond)
	tests := []struct {
		name string
		sel  Selection
		want string
	}{
		{"everything", Selection{}, e1 + "," + sw + "," + e3},
		{"by id", Selection{EventID: sw}, sw},
		{"since", Selection{Since: mid}, sw + "," + e3},
		{"from seq", Selection{FromSeq: 2}, sw + "," + e3},
		{"seq range", Selection{FromSeq: 1, ToSeq: 2}, e1 + "," + sw},
		{"by object includes switches from or to it", Selection{Object: &u2}, sw},
		{"by object", Selection{Object: &u1}, e1 + "," + sw + "," + e3},
		{"nothing matches", Selection{Object: &other}, ""},
		{"past the end", Selection{FromSeq: 99}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Select(context.Background(), js, tt.sel)
			if err != nil {
				t.Fatal(err)
			}
			if ids(got) != tt.want {
				t.Errorf("selected %q, want %q", ids(got), tt.want)
			}
		})
	}
}

// replayFleet: u1 now at generation 3, one stopped VM pinned to generation 2.
func replayFleet(t *testing.T) *kube.Cache {
	t.Helper()
	it := &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "u1", UID: "uid-u1", Generation: 2},
		Spec:       v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 2}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("4Gi")}},
	}
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a"},
		Spec: virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: "u1"}}}
	rev, err := instancetype.NewRevision(vm, it)
	if err != nil {
		t.Fatal(err)
	}
	vm.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: "u1", ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: rev.Name}}
	it.Generation, it.Spec.CPU.Guest = 3, 4
	return testenv.StartCache(t, testenv.FakeClients([]runtime.Object{rev}, it, vm))
}

func TestApplyPublishesALinkedNewEvent(t *testing.T) {
	js := testenv.JetStream(t)
	orig := publishChange(t, js, 2)
	kv, err := js.KeyValue(context.Background(), events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: orig, TraceID: "0102030405060708090a0b0c0d0e0f10", SpanID: "0102030405060708"})
	if _, err := kv.Put(context.Background(), events.RolloutKey(orig), rec); err != nil {
		t.Fatal(err)
	}
	stored, _ := Select(context.Background(), js, Selection{EventID: orig})
	spans := tracetest.NewSpanRecorder()
	p := Publisher{JetStream: js, Fleet: replayFleet(t), Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))}
	replayed, err := p.Apply(context.Background(), stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != 1 || replayed[0].Original != orig || !strings.HasPrefix(replayed[0].EventID, "replay/") || !strings.Contains(replayed[0].Note, "superseded") {
		t.Fatalf("replayed = %+v", replayed)
	}
	all, _ := Select(context.Background(), js, Selection{EventID: replayed[0].EventID})
	if len(all) != 1 {
		t.Fatalf("replayed event not in the stream")
	}
	got := all[0]
	if got.Headers.Get(events.HeaderReplayOf) != orig || got.Headers.Get("traceparent") == "" {
		t.Errorf("headers = %v", got.Headers)
	}
	if got.Change.Generation != 3 || got.Change.OldGeneration != 1 {
		t.Errorf("replayed change = gen %d (old %d), want the current generation 3", got.Change.Generation, got.Change.OldGeneration)
	}
	ended := spans.Ended()
	if len(ended) != 1 || ended[0].Parent().IsValid() || len(ended[0].Links()) != 1 ||
		ended[0].Links()[0].SpanContext.TraceID().String() != "0102030405060708090a0b0c0d0e0f10" {
		t.Errorf("replay span: %d spans, links %v", len(ended), ended[0].Links())
	}
}

func publishOutcome(t *testing.T, js jetstream.JetStream, eventID, uid string, result events.Result) {
	t.Helper()
	o := events.Outcome{EventID: eventID, VM: events.VMRef{Namespace: "ns", Name: "vm-" + uid, UID: uid}, Attempt: 1, Result: result, FinishedAt: time.Now()}
	id := events.OutcomeID(eventID, uid, 1)
	body, err := events.Encode(events.TypeOutcome, id, "test", "", time.Now(), &o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), events.NewMsg(events.OutcomeSubject("ns", eventID), id, events.TypeOutcome, body)); err != nil {
		t.Fatal(err)
	}
}

// TestRetryFailedRetriesTheFailedVMsOfAFinishedRolloutOnce: a rollout
// still running is refused (its VMs would move twice); a finished one
// retries its failed VMs, and only those, as a new event linked to it,
// named by its id or a prefix of it; a second retry finds them taken.
func TestRetryFailedRetriesTheFailedVMsOfAFinishedRolloutOnce(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	sw := publishSwitch(t, js)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: sw, Planned: 3, PlannedAt: time.Now()})
	if _, err := kv.Put(ctx, events.RolloutKey(sw), rec); err != nil {
		t.Fatal(err)
	}
	control, err := rollout.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := control.Apply(ctx, sw, events.ActionPause, "", "alice", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	p := Publisher{JetStream: js, Tracer: sdktrace.NewTracerProvider()}
	if _, _, err := p.RetryFailed(ctx, sw, "alice"); err == nil || !strings.Contains(err.Error(), "retry it once it has finished") {
		t.Fatalf("retry of a paused rollout: %v", err)
	}
	if _, _, err := control.Apply(ctx, sw, events.ActionResume, "", "alice", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	publishOutcome(t, js, sw, "a", events.ResultLive)
	publishOutcome(t, js, sw, "b", events.ResultFailed)
	publishOutcome(t, js, sw, "c", events.ResultFailed)

	r, failed, err := p.RetryFailed(ctx, sw[:8], "alice")
	if err != nil || r.Original != sw || !strings.HasPrefix(r.EventID, "retry/") || strings.Join(failed, ",") != "b,c" {
		t.Fatalf("retry by a prefix of %s = %+v, %v, %v; want b and c retried", sw, r, failed, err)
	}
	retried, err := Select(ctx, js, Selection{EventID: r.EventID})
	if err != nil || len(retried) != 1 || retried[0].Switch == nil || strings.Join(retried[0].Switch.Only, ",") != "b,c" ||
		retried[0].Headers.Get(events.HeaderRetryOf) != sw {
		t.Fatalf("the retry's event: %+v, %v", retried, err)
	}
	if _, _, err := p.RetryFailed(ctx, sw, "bob"); err == nil || !strings.Contains(err.Error(), "retried already, as "+r.EventID) {
		t.Errorf("a second retry: %v, want it to name %s", err, r.EventID)
	}
}
