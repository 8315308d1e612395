// Command otlp-receiver is the OTLP endpoint kvlive's trace tests export
// to: the OpenTelemetry Collector's own OTLP receiver (the one Jaeger v2 and
// every Collector distribution receive with), over gRPC and HTTP, keeping
// the spans it receives in memory and serving them by trace ID as JSON.
//
//	otlp-receiver -grpc 127.0.0.1:4317 -http 127.0.0.1:4318 -query 127.0.0.1:16686
//
// GET /traces/{traceID} on the query address answers
// {"spans":[{"name","spanID","parentSpanID","service"}]}, 404 when no span
// of that trace has arrived. It prints "ready" once all three listen, and
// stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// span is what the query API tells of one received span.
type span struct {
	Name         string `json:"name"`
	SpanID       string `json:"spanID"`
	ParentSpanID string `json:"parentSpanID,omitempty"`
	Service      string `json:"service,omitempty"`
}

// store keeps every span received, by trace ID.
type store struct {
	mu     sync.Mutex
	traces map[string][]span
}

func (s *store) consume(_ context.Context, td ptrace.Traces) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		service := ""
		if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
			service = v.AsString()
		}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				out := span{Name: sp.Name(), SpanID: sp.SpanID().String(), Service: service}
				if !sp.ParentSpanID().IsEmpty() {
					out.ParentSpanID = sp.ParentSpanID().String()
				}
				id := sp.TraceID().String()
				s.traces[id] = append(s.traces[id], out)
			}
		}
	}
	return nil
}

func (s *store) serveTrace(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	spans, ok := s.traces[r.PathValue("id")]
	spans = append([]span(nil), spans...)
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no span of trace "+r.PathValue("id")+" has arrived", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string][]span{"spans": spans})
}

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:4317", "OTLP/gRPC listen address")
	httpAddr := flag.String("http", "127.0.0.1:4318", "OTLP/HTTP listen address")
	queryAddr := flag.String("query", "127.0.0.1:16686", "query API listen address")
	flag.Parse()
	if err := run(*grpcAddr, *httpAddr, *queryAddr); err != nil {
		log.Fatalf("otlp-receiver: %v", err)
	}
}

func run(grpcAddr, httpAddr, queryAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s := &store{traces: map[string][]span{}}
	traces, err := consumer.NewTraces(s.consume)
	if err != nil {
		return err
	}
	factory := otlpreceiver.NewFactory()
	cfg := factory.CreateDefaultConfig().(*otlpreceiver.Config)
	// Both protocols are on by default (configoptional.Default), as in a
	// Collector's config naming them without settings.
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = grpcAddr
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = httpAddr
	recv, err := factory.CreateTraces(ctx, receivertest.NewNopSettings(factory.Type()), cfg, traces)
	if err != nil {
		return err
	}
	if err := recv.Start(ctx, componenttest.NewNopHost()); err != nil {
		return fmt.Errorf("starting the OTLP receiver: %w", err)
	}
	defer func() { _ = recv.Shutdown(context.Background()) }()

	ln, err := net.Listen("tcp", queryAddr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /traces/{id}", s.serveTrace)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	fmt.Println("ready")
	<-ctx.Done()
	return nil
}
