//go:build integration

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestJaegerReceivesOTLP(t *testing.T) {
	j := StartJaeger(t)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(j.OTLPHTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, span := tp.Tracer("testenv").Start(context.Background(), "smoke")
	span.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/api/traces/%s", j.QueryURL, span.SpanContext().TraceID())
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			var body struct {
				Data []struct {
					Spans []struct{ OperationName string } `json:"spans"`
				} `json:"data"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			_ = resp.Body.Close()
			if len(body.Data) == 1 && len(body.Data[0].Spans) == 1 && body.Data[0].Spans[0].OperationName == "smoke" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not found in jaeger", span.SpanContext().TraceID())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
