package telemetry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/cmd/bot/internal/telemetry"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		env      map[string]string
		endpoint string
		service  string
		headers  map[string]string
		err      string
	}{
		{name: "NothingSetIsOff", env: map[string]string{}, service: "holdfast"},
		{name: "BaseEndpointGetsTheTracesPath", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			endpoint: "http://collector:4318/v1/traces", service: "holdfast"},
		{name: "SignalEndpointIsUsedAsItIs", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/otlp/traces"}, endpoint: "https://b/otlp/traces", service: "holdfast"},
		{name: "ServiceName", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SERVICE_NAME": "holdfast-eu"},
			endpoint: "http://c:4318/v1/traces", service: "holdfast-eu"},
		{name: "Headers", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
			"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20abc, x-team=t1"},
			endpoint: "http://c:4318/v1/traces", service: "holdfast", headers: map[string]string{"authorization": "Bearer abc", "x-team": "t1"}},
		{name: "SDKDisabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, service: "holdfast"},
		{name: "ExporterNone", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, service: "holdfast"},
		{name: "ExporterUnknown", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "not supported"},
		{name: "GRPCRefused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "http/protobuf"},
		{name: "NotAURL", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, err: "not an http(s) URL"},
		{name: "BadHeaders", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, err: "key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := telemetry.FromEnv(tc.env)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.endpoint, c.Endpoint)
			require.Equal(t, tc.service, c.ServiceName)
			if tc.headers != nil {
				require.Equal(t, tc.headers, c.Headers)
			}
		})
	}
}

func TestSetupOffIsNil(t *testing.T) {
	t.Parallel()
	tp, shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{})
	require.NoError(t, err)
	require.Nil(t, tp, "no endpoint: no SDK, nothing recorded or exported")
	require.NoError(t, shutdown(context.Background()))
}
