//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"kvlive/integration/framework"
)

// jaegerTrace is the part of Jaeger's /api/traces/{id} answer the test reads.
type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			OperationName string `json:"operationName"`
		} `json:"spans"`
	} `json:"data"`
}

// jaegerOperations returns the span names Jaeger holds for a trace.
func jaegerOperations(queryURL, traceID string) (map[string]int, error) {
	resp, err := http.Get(fmt.Sprintf("%s/api/traces/%s", queryURL, traceID))
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaeger: %s", resp.Status)
	}
	var tr jaegerTrace
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
		return nil, err
	}
	ops := map[string]int{}
	for _, d := range tr.Data {
		for _, s := range d.Spans {
			ops[s.OperationName]++
		}
	}
	return ops, nil
}

// TestTracesReachJaegerAndTheStore rolls an edit out with kvlive exporting
// over OTLP (configured only by the standard OTEL_* variables) to a real
// Jaeger, once over HTTP and once over gRPC, reads the trace back through
// Jaeger's query API and finds every VM's apply span; then `kvlive trace`
// and `kvlive outcomes`, reading the spans and records kept in JetStream,
// show every VM too.
func TestTracesReachJaegerAndTheStore(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) { testTracesReachJaeger(t, protocol) })
	}
}

func testTracesReachJaeger(t *testing.T, protocol string) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 30}})
	j := framework.StartJaeger(t)
	endpoint := "http://" + j.OTLPHTTP
	if protocol == "grpc" {
		endpoint = "http://" + j.OTLPGRPC
	}
	e.extraEnv = []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_BSP_SCHEDULE_DELAY=200",
	}
	e.runKvlive("all stages, exporting to jaeger over "+protocol, "--observe-timeout", "20s")
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
	e.waitFor("every VM's span in Jaeger", time.Minute, func() (bool, string) {
		ops, err := jaegerOperations(j.QueryURL, traceID)
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
