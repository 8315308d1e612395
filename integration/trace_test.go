//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"kvlive/integration/framework"
)

// receivedOperations counts the spans the receiver holds for a trace, by name.
func receivedOperations(r *framework.OTLPReceiver, traceID string) (map[string]int, error) {
	spans, err := r.Spans(traceID)
	if err != nil {
		return nil, err
	}
	ops := map[string]int{}
	for _, s := range spans {
		ops[s.Name]++
	}
	return ops, nil
}

// TestTracesReachAnOTLPReceiverAndTheStore rolls an edit out with kvlive
// exporting over OTLP (configured only by the standard OTEL_* variables) to
// the OpenTelemetry Collector's OTLP receiver (what Jaeger and every
// Collector receive with), once over HTTP and once over gRPC, reads the
// trace back and finds every VM's apply span; then `kvlive trace` and
// `kvlive outcomes`, reading the spans and records kept in JetStream, show
// every VM too.
func TestTracesReachAnOTLPReceiverAndTheStore(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) { testTracesReachAnOTLPReceiver(t, protocol) })
	}
}

func testTracesReachAnOTLPReceiver(t *testing.T, protocol string) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 30}})
	r := framework.StartOTLPReceiver(t)
	endpoint := "http://" + r.HTTP
	if protocol == "grpc" {
		endpoint = "http://" + r.GRPC
	}
	e.extraEnv = []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_BSP_SCHEDULE_DELAY=200",
	}
	e.runKvlive("all stages, exporting over OTLP/"+protocol, "--observe-timeout", "20s")
	e.waitGenerations()
	_, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	p := e.follow(eventID)
	edited := e.selectShapes(onInstancetype(itMedium))
	if len(p.Outcomes) != len(edited) {
		t.Fatalf("%d outcomes, want %d", len(p.Outcomes), len(edited))
	}
	var traceID string
	for _, o := range p.Outcomes {
		if traceID == "" {
			traceID = o.TraceID
		}
		if o.TraceID != traceID || o.SpanID == "" {
			t.Fatalf("outcome %s/%s: trace %s span %q, want all in trace %s", o.VM.Namespace, o.VM.Name, o.TraceID, o.SpanID, traceID)
		}
	}
	e.waitFor("every VM's span at the OTLP receiver", time.Minute, func() (bool, string) {
		ops, err := receivedOperations(r, traceID)
		if err != nil {
			return false, err.Error()
		}
		missing := 0
		for _, s := range edited {
			if ops["applier.apply "+s.key()] != 1 {
				missing++
			}
		}
		if ops["planner.plan clusterinstancetype/"+itMedium] != 1 || ops["watcher.observe clusterinstancetype/"+itMedium] != 1 {
			return false, fmt.Sprintf("watcher/planner spans missing: %v", ops)
		}
		return missing == 0, plural(missing, "VM span") + " missing"
	})

	var tree string
	e.waitFor("every VM's span in kvlive trace", time.Minute, func() (bool, string) {
		tree = e.kvliveCommand(time.Minute, "trace", eventID, "--nats-url", e.natsURL, "--color", "never")
		return strings.Count(tree, "applier.apply ") == len(edited), fmt.Sprintf("%d apply spans", strings.Count(tree, "applier.apply "))
	})
	for _, s := range edited {
		if !strings.Contains(tree, "applier.apply "+s.key()) {
			t.Errorf("kvlive trace lacks %s", s.key())
		}
	}
	if !strings.Contains(tree, "pin moved") {
		t.Errorf("kvlive trace shows no span events:\n%s", tree)
	}
	outcomes := e.kvliveCommand(time.Minute, "outcomes", "--event", eventID, "--nats-url", e.natsURL)
	for _, s := range edited {
		if !strings.Contains(outcomes, " "+s.name+" ") {
			t.Errorf("kvlive outcomes lacks %s", s.key())
		}
	}
	if want := fmt.Sprintf("%d outcomes", len(edited)); !strings.Contains(outcomes, want) {
		t.Errorf("kvlive outcomes: want %q in\n%s", want, outcomes)
	}
}
