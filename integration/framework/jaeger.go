package framework

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"kvlive/internal/testenv"
)

// Jaeger is a Jaeger all-in-one process (in-memory storage) receiving OTLP
// on free loopback ports, with its query API.
type Jaeger struct {
	// OTLPHTTP and OTLPGRPC are the OTLP receivers' endpoints (host:port).
	OTLPHTTP, OTLPGRPC string
	// QueryURL is the base URL of the query API, e.g. QueryURL+"/api/traces/<id>".
	QueryURL string
}

// jaegerConfig is a minimal Jaeger v2 configuration: OTLP in, memory
// storage, the query API, nothing on Jaeger's fixed default ports.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// StartJaeger starts .bin/jaeger and waits until its query API answers.
// It stops when the test ends.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin := binaries(t, "jaeger")[0]
	ports := freePorts(t, 4)
	cfgPath := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, jaegerConfig, ports[0], ports[1], ports[2], ports[3]), 0o600); err != nil {
		t.Fatalf("framework: jaeger config: %v", err)
	}
	j := &Jaeger{
		QueryURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		OTLPGRPC: fmt.Sprintf("127.0.0.1:%d", ports[2]),
		OTLPHTTP: fmt.Sprintf("127.0.0.1:%d", ports[3]),
	}
	var log testenv.LogBuffer
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("framework: start jaeger: %v", err)
	}
	t.Cleanup(func() {
		showTailIfFailed(t, "jaeger", &log)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(j.QueryURL + "/api/services")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		if time.Now().After(deadline) {
			showTail(t, "jaeger", &log)
			t.Fatalf("framework: jaeger query API not up after a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
