package sessions_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

func TestChatTurnIsASpanWithProvenance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		want   codes.Code
	}{
		{"Answered", http.StatusOK, codes.Unset},
		{"ModelRefused", http.StatusBadRequest, codes.Error},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, n int, body map[string]any) {
				if tc.status != http.StatusOK {
					http.Error(w, `{"error":{"message":"bad","type":"invalid_request_error"}}`, tc.status)
					return
				}
				completion(w, answer("Hello."))
			})
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			b := setup(t, setupOpts{modelSpec: "openai:gpt-test", openaiURL: cs.URL, client: cs.Client(), tracer: tp})
			ses, err := b.svc.ResolveTag(ctx, "slack:C1:1.2", sessions.CreateParams{Source: sessions.Source{Via: "slack"}})
			require.NoError(t, err)

			dctx, delivery := tp.Tracer("test").Start(ctx, "slack.delivery")
			_, err = b.svc.Message(dctx, ses.ID, "hi there", engine.Decider{SlackUserID: "U1", Via: "slack"}, false)
			require.NoError(t, err)
			delivery.End()

			var turn, call sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				switch s.Name() {
				case "chat.turn":
					turn = s
				case "chat gpt-test":
					call = s
				}
			}
			require.NotNil(t, turn)
			require.Equal(t, delivery.SpanContext().SpanID(), turn.Parent().SpanID(), "the turn is a child of the delivery")
			a := map[string]any{}
			for _, kv := range turn.Attributes() {
				a[string(kv.Key)] = kv.Value.AsInterface()
			}
			require.Equal(t, ses.ID, a["holdfast.session.id"])
			require.Equal(t, store.OriginChannel, a["holdfast.session.origin"])
			require.Equal(t, "slack", a["holdfast.session.platform"])
			require.Equal(t, "slack", a["holdfast.surface"])
			require.Equal(t, []string{"slack:C1:1.2"}, a["holdfast.session.tags"])
			require.Equal(t, tc.want, turn.Status().Code)
			require.NotNil(t, call, "the model call is a span of the turn")
			require.Equal(t, turn.SpanContext().SpanID(), call.Parent().SpanID())
		})
	}
}
