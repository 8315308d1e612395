package framework

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"kvlive/internal/testenv"
)

// OTLPReceiver is a running .bin/otlp-receiver: the OpenTelemetry
// Collector's own OTLP receiver (the one Jaeger v2 and every Collector
// distribution receive spans with) on free loopback ports, keeping what it
// receives in memory, with a query API to read it back.
type OTLPReceiver struct {
	// HTTP and GRPC are the OTLP endpoints (host:port).
	HTTP, GRPC string
	// QueryURL is the base URL of the query API: QueryURL+"/traces/<id>".
	QueryURL string
}

// ReceivedSpan is one span the receiver holds.
type ReceivedSpan struct {
	Name         string `json:"name"`
	SpanID       string `json:"spanID"`
	ParentSpanID string `json:"parentSpanID"`
	Service      string `json:"service"`
}

// StartOTLPReceiver starts .bin/otlp-receiver and waits until it says it
// listens. It stops when the test ends.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	bin := binaries(t, "otlp-receiver")[0]
	ports := freePorts(t, 3)
	r := &OTLPReceiver{
		GRPC:     fmt.Sprintf("127.0.0.1:%d", ports[0]),
		HTTP:     fmt.Sprintf("127.0.0.1:%d", ports[1]),
		QueryURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
	}
	var log testenv.LogBuffer
	cmd := exec.Command(bin, "-grpc", r.GRPC, "-http", r.HTTP, "-query", r.QueryURL[len("http://"):])
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("framework: start otlp-receiver: %v", err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		showTailIfFailed(t, "otlp-receiver", &log)
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.After(time.Minute)
	for !strings.Contains(log.String(), "ready") {
		select {
		case <-exited:
			showTail(t, "otlp-receiver", &log)
			t.Fatalf("framework: otlp-receiver exited before it was ready: %v", waitErr)
		case <-deadline:
			showTail(t, "otlp-receiver", &log)
			t.Fatalf("framework: otlp-receiver did not say ready within a minute")
		case <-time.After(50 * time.Millisecond):
		}
	}
	return r
}

// Spans returns the spans of a trace the receiver holds; none (and no
// error) when no span of it has arrived.
func (r *OTLPReceiver) Spans(traceID string) ([]ReceivedSpan, error) {
	resp, err := http.Get(r.QueryURL + "/traces/" + traceID)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("otlp-receiver: %s", resp.Status)
	}
	var body struct {
		Spans []ReceivedSpan `json:"spans"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	return body.Spans, nil
}
