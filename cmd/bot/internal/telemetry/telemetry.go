// Package telemetry installs OpenTelemetry tracing for the bot from the
// standard OTEL_* variables (SPEC §10): spans go out over OTLP/HTTP when
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set,
// and without either there is no SDK at all: the rest of the service gets a
// nil provider and records nothing. It is the one place that knows the SDK
// and the exporter; everything else speaks the API (engine/tracing).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is not set.
const DefaultServiceName = "holdfast"

// Config is what Setup read from the environment.
type Config struct {
	// Endpoint is the OTLP/HTTP traces URL ("" when tracing is off).
	Endpoint    string
	ServiceName string
	Headers     map[string]string
}

// FromEnv reads the OTEL_* variables. Tracing is off (Endpoint "") when no
// endpoint is set, when OTEL_SDK_DISABLED is true or when
// OTEL_TRACES_EXPORTER is none. Only OTLP over HTTP (protobuf) is built in.
func FromEnv(env map[string]string) (Config, error) {
	c := Config{ServiceName: strings.TrimSpace(env["OTEL_SERVICE_NAME"])}
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if strings.EqualFold(strings.TrimSpace(env["OTEL_SDK_DISABLED"]), "true") {
		return c, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(env["OTEL_TRACES_EXPORTER"])); exp {
	case "", "otlp":
	case "none":
		return c, nil
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER %q is not supported: use otlp (OTLP over HTTP) or none", exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(env[k]); p != "" {
			if p != "http/protobuf" {
				return c, fmt.Errorf("%s %q is not supported: Holdfast exports OTLP over HTTP (http/protobuf)", k, p)
			}
			break
		}
	}
	if v := strings.TrimSpace(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]); v != "" {
		c.Endpoint = v // a signal endpoint is used as it is
	} else if v := strings.TrimSpace(env["OTEL_EXPORTER_OTLP_ENDPOINT"]); v != "" {
		c.Endpoint = strings.TrimRight(v, "/") + "/v1/traces"
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("OTLP endpoint %q is not an http(s) URL", c.Endpoint)
		}
	}
	headers := env["OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
	if headers == "" {
		headers = env["OTEL_EXPORTER_OTLP_HEADERS"]
	}
	h, err := parseHeaders(headers)
	if err != nil {
		return c, err
	}
	c.Headers = h
	return c, nil
}

// parseHeaders reads "k1=v1,k2=v2" with URL-encoded values.
func parseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("OTLP headers: %q is not key=value", kv)
		}
		dv, err := url.QueryUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("OTLP headers: %q: %w", kv, err)
		}
		out[k] = dv
	}
	return out, nil
}

// Setup builds the tracer provider c asks for: a batching OTLP/HTTP
// exporter, or nothing when tracing is off. shutdown flushes what is
// buffered; it is safe to call either way.
func Setup(ctx context.Context, c Config) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if c.Endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(c.Endpoint)}
	if len(c.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(c.ServiceName)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, fmt.Errorf("otel resource: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}
