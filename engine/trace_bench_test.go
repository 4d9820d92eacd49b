package engine

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkRunsPerSecondTraced is BenchmarkRunsPerSecond with tracing on as
// a deployment runs it: every span batched and exported over OTLP/HTTP to a
// local receiver (which reads and drops the bodies).
func BenchmarkRunsPerSecondTraced(b *testing.B) {
	var bytesIn atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		bytesIn.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(recv.Close)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(recv.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e, db, dir := benchEngine(b, func(c *Config) { c.Tracer = tp })
	measureRunsPerSecond(b, e, db, dir)
	if err := tp.ForceFlush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if bytesIn.Load() == 0 {
		b.Fatal("no spans were exported")
	}
}
