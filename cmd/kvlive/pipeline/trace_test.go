package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/cmd/kvlive/pipeline"
	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/telemetry"
	"kvlive/internal/testenv"
	"kvlive/readmodel/inspect"
)

// traced starts the pipeline with a span recorder and the JetStream span
// store, edits u1 (referenced by fleetSize VMs) and returns the spans.
func traced(t *testing.T, fanout int) ([]sdktrace.ReadOnlySpan, jetstream.JetStream, rolloutIDs) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	var tp *sdktrace.TracerProvider
	clients, js, _ := start(t, func(c *pipeline.Config, js jetstream.JetStream) {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithBatcher(telemetry.NewJetStreamExporter(js)))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		c.Tracer, c.TraceFanout, c.ObserveTimeout = tp, fanout, 30*time.Second
	})
	id := edit(t, clients)
	p := follow(t, js, id)
	testenv.Eventually(t, time.Minute, "every apply span ended, and every moved VM's verdict span", func() bool {
		return len(byName(rec.Ended(), "applier.apply ")) == fleetSize && len(byName(rec.Ended(), "verdict ")) == fleetSize
	})
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rec.Ended(), js, rolloutIDs{event: id, outcomes: p.Outcomes}
}

type rolloutIDs struct {
	event    string
	outcomes map[string]events.Outcome
}

func edit(t *testing.T, clients kube.Clients) string {
	t.Helper()
	ctx := context.Background()
	its := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	u1, err := its.Get(ctx, "u1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u1.Spec.CPU.Guest, u1.Generation = 3, 2
	if _, err := its.Update(ctx, u1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return events.EventID(events.KindClusterInstancetype, "uid-u1", 2)
}

func byName(spans []sdktrace.ReadOnlySpan, prefix string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), prefix) {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans []sdktrace.ReadOnlySpan, prefix string) sdktrace.ReadOnlySpan {
	t.Helper()
	found := byName(spans, prefix)
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), prefix)
	}
	return found[0]
}

func TestTraceFollowsTheEventAcrossNATS(t *testing.T) {
	spans, _, ids := traced(t, 1000)
	observe := one(t, spans, "watcher.observe")
	plan := one(t, spans, "planner.plan")
	publish := one(t, spans, "publish plans")
	if plan.Parent().SpanID() != observe.SpanContext().SpanID() || plan.SpanContext().TraceID() != observe.SpanContext().TraceID() {
		t.Errorf("planner span is not the watcher span's child across the NATS hop")
	}
	if plan.SpanKind() != trace.SpanKindConsumer || observe.SpanKind() != trace.SpanKindProducer || publish.SpanKind() != trace.SpanKindProducer {
		t.Errorf("span kinds: observe %s, plan %s, publish %s", observe.SpanKind(), plan.SpanKind(), publish.SpanKind())
	}
	if publish.Parent().SpanID() != plan.SpanContext().SpanID() {
		t.Error("publish span is not the plan span's child")
	}
	applies := byName(spans, "applier.apply ")
	if len(applies) != fleetSize {
		t.Fatalf("%d apply spans, want %d", len(applies), fleetSize)
	}
	parents := map[trace.SpanID]bool{}
	for _, s := range applies {
		if s.Parent().SpanID() != publish.SpanContext().SpanID() || s.SpanContext().TraceID() != observe.SpanContext().TraceID() {
			t.Errorf("%s: parent %s, want the publish span", s.Name(), s.Parent().SpanID())
		}
		parents[s.SpanContext().SpanID()] = true
	}
	live, verdicts := 0, map[trace.SpanID]bool{}
	for _, s := range byName(spans, "verdict ") {
		verdicts[s.SpanContext().SpanID()] = true
		if !parents[s.Parent().SpanID()] {
			t.Errorf("%s: parent %s, want a VM's apply span", s.Name(), s.Parent().SpanID())
		}
		for _, a := range s.Attributes() {
			if a.Key == "kvlive.observed" && a.Value.AsString() == string(events.ObservedLive) {
				live++
			}
		}
	}
	if live != fleetSize/2 {
		t.Errorf("%d verdict spans say live, want %d (the running VMs)", live, fleetSize/2)
	}
	// Each live change reached its guest by a migration, a span under the
	// VM's verdict.
	migrations := byName(spans, "migration ")
	for _, s := range migrations {
		if !verdicts[s.Parent().SpanID()] {
			t.Errorf("%s: parent %s, want a VM's verdict span", s.Name(), s.Parent().SpanID())
		}
	}
	if len(migrations) != fleetSize/2 {
		t.Errorf("%d migration spans, want %d (the running VMs)", len(migrations), fleetSize/2)
	}
	for uid, o := range ids.outcomes {
		if o.TraceID != observe.SpanContext().TraceID().String() {
			t.Errorf("outcome %s carries trace %s", uid, o.TraceID)
		}
	}
}

func TestLargeFanoutRootsATraceAVM(t *testing.T) {
	spans, js, _ := traced(t, 5)
	publish := one(t, spans, "publish plans")
	for _, s := range byName(spans, "applier.apply ") {
		if s.Parent().IsValid() || s.SpanContext().TraceID() == publish.SpanContext().TraceID() {
			t.Fatalf("%s is not a root of its own trace", s.Name())
		}
		if links := s.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != publish.SpanContext().SpanID() {
			t.Fatalf("%s links %v, want the publish span", s.Name(), links)
		}
	}
	// The span store files every linked VM span under the plan's trace
	// too, the spans of one export in one message.
	planTrace := publish.SpanContext().TraceID().String()
	stored, err := inspect.NewReader(js).Spans(context.Background(), planTrace)
	if err != nil {
		t.Fatal(err)
	}
	applies := 0
	for _, s := range stored {
		if strings.HasPrefix(s.Name, "applier.apply ") && s.TraceID != planTrace {
			applies++
		}
	}
	if len(stored) < fleetSize+3 || applies != fleetSize {
		t.Errorf("%d spans stored under the plan's trace, %d of them VMs' apply spans of their own traces; want at least %d, and %d", len(stored), applies, fleetSize+3, fleetSize)
	}
	stream, err := js.Stream(context.Background(), events.StreamSpans)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(events.SpanSubject(planTrace)))
	if err != nil {
		t.Fatal(err)
	}
	if msgs := info.State.Subjects[events.SpanSubject(planTrace)]; msgs >= uint64(len(stored)) {
		t.Errorf("%d messages hold the plan trace's %d spans, want fewer: one per export", msgs, len(stored))
	}
}
