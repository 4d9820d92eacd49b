package bridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/holdfast-bot/holdfast/store"
)

// MaxBody is the largest request body accepted (SPEC §5); larger ones get 413.
const MaxBody = 1 << 20

// Handler serves HTTP mode, to be mounted at /slack without stripping the
// prefix: POST /slack/events (Events API), POST /slack/interactions
// (interactivity) and POST /slack/commands (the /holdfast slash command).
// The full paths spare every delivery StripPrefix's copy of the request.
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /slack/events", b.serveEvents)
	mux.HandleFunc("POST /slack/interactions", b.serveInteractions)
	mux.HandleFunc("POST /slack/commands", b.serveCommands)
	return mux
}

// readVerified reads the raw body (at most MaxBody) and checks Slack's
// signature over it, answering the error status itself when it fails.
func (b *Bridge) readVerified(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpError(w, http.StatusRequestEntityTooLarge, "body larger than 1 MiB")
			return nil, false
		}
		httpError(w, http.StatusBadRequest, "unreadable body")
		return nil, false
	}
	sv, err := slack.NewSecretsVerifier(r.Header, b.cfg.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		msg := "bad Slack signature"
		switch {
		case r.Header.Get("X-Slack-Signature") == "" || r.Header.Get("X-Slack-Request-Timestamp") == "":
			msg = "the request is not signed: it is missing the X-Slack-Signature and X-Slack-Request-Timestamp headers Slack sends"
		case errors.Is(err, slack.ErrExpiredTimestamp):
			msg = "Slack request timestamp is more than 5 minutes away"
		}
		b.log.WarnContext(r.Context(), "slack: refused request", slog.String("path", r.URL.Path), slog.Any("error", err))
		httpError(w, http.StatusUnauthorized, msg)
		return nil, false
	}
	return body, true
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": http.StatusText(status), "message": msg}})
}

func (b *Bridge) serveEvents(w http.ResponseWriter, r *http.Request) {
	body, ok := b.readVerified(w, r)
	if !ok {
		return
	}
	env, err := ParseEnvelope(body)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch env.Type {
	case "url_verification":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, env.Challenge)
		return
	case "event_callback":
		if err := b.Accept(r.Context(), store.SlackKindEvent, eventKey(env), eventThread(env), body); err != nil {
			b.log.ErrorContext(r.Context(), "slack: storing event", slog.String("event_id", env.EventID), slog.Any("error", err))
			httpError(w, http.StatusServiceUnavailable, "could not store the event; Slack will retry")
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (b *Bridge) serveInteractions(w http.ResponseWriter, r *http.Request) {
	body, ok := b.readVerified(w, r)
	if !ok {
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("payload") == "" {
		httpError(w, http.StatusBadRequest, "expected a form with a payload field")
		return
	}
	payload := []byte(form.Get("payload"))
	in, err := ParseInteraction(payload)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	answer, err := b.interaction(r.Context(), in, payload)
	if err != nil {
		b.log.ErrorContext(r.Context(), "slack: storing interaction", slog.Any("error", err))
		httpError(w, http.StatusServiceUnavailable, "could not store the interaction")
		return
	}
	if answer != nil {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer)
		return
	}
	w.WriteHeader(http.StatusOK) // an empty 200: a submitted modal closes
}

// viewAnswer keeps a submitted modal open with a reason under each input
// Slack should show one for (response_action "errors").
type viewAnswer struct {
	ResponseAction string            `json:"response_action"`
	Errors         map[string]string `json:"errors"`
}

// badInputs answers the modal's inputs that break the text rule every
// surface keeps (SPEC §7), by block id, or nil: such a submission is
// refused before it is stored, and the person can mend it in place. In a
// payload that is not UTF-8 the inputs holding U+FFFD are the ones JSON
// decoding mended.
func badInputs(v *View, payload []byte) *viewAnswer {
	valid := utf8.Valid(payload)
	var errs map[string]string
	for block, inputs := range v.State.Values {
		for _, in := range inputs {
			err := store.CheckText("This field", in.Value, 0)
			if err == nil && !valid && strings.ContainsRune(in.Value, utf8.RuneError) {
				err = store.Refuse(store.ErrInvalid, "This field is not valid UTF-8")
			}
			if err != nil {
				if errs == nil {
					errs = map[string]string{}
				}
				errs[block] = store.ReasonOf(err) + "."
			}
		}
	}
	if errs == nil {
		return nil
	}
	return &viewAnswer{ResponseAction: "errors", Errors: errs}
}

// interaction does what an interaction needs before its acknowledgement,
// for both transports: a click on "Comment or edit…" or the run_workflow
// shortcut opens its modal at once (a trigger id lives 3 seconds); clicks
// on Approve or Reject and submitted modals are stored in the inbox. An
// error means the delivery could not be stored and must not be acknowledged;
// answer, when not nil, is the acknowledgement's body (a modal's errors).
func (b *Bridge) interaction(ctx context.Context, in *Interaction, payload []byte) (answer *viewAnswer, err error) {
	key := interactionKey(payload)
	keep := false
	switch in.Type {
	case "block_actions":
		for _, a := range in.Actions {
			switch a.ActionID {
			case actionReview:
				b.openReview(ctx, in, key, a.Value)
			case actionApprove, actionReject:
				keep = true
			}
		}
	case "view_submission":
		keep = in.View.CallbackID == callbackReview || in.View.CallbackID == callbackRunWorkflow
		if bad := badInputs(&in.View, payload); keep && bad != nil {
			return bad, nil
		}
	case "message_action":
		if in.CallbackID == callbackRunWorkflow {
			b.openRunWorkflow(ctx, in, key)
		}
	}
	if !keep {
		return nil, nil
	}
	return nil, b.Accept(ctx, store.SlackKindInteraction, key, interactionThread(in), payload)
}

// serveCommands is the /holdfast slash command (form-encoded, signed like
// events): answered within 3 seconds, with an ephemeral reply or, for run,
// an empty acknowledgement once the command is stored.
func (b *Bridge) serveCommands(w http.ResponseWriter, r *http.Request) {
	body, ok := b.readVerified(w, r)
	if !ok {
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("command") == "" {
		httpError(w, http.StatusBadRequest, "expected a slash command form")
		return
	}
	resp, err := b.slashCommand(r.Context(), form)
	if err != nil {
		b.log.ErrorContext(r.Context(), "slack: slash command", slog.String("text", form.Get("text")), slog.Any("error", err))
		httpError(w, http.StatusServiceUnavailable, "could not take the command; try again")
		return
	}
	if resp == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// interactionKey identifies an interaction delivery: interactions carry no
// event id, and a redelivery repeats the payload byte for byte while a second
// click differs (action_ts).
func interactionKey(payload []byte) string {
	sum := sha256.Sum256(bytes.TrimSpace(payload))
	return "int:" + hex.EncodeToString(sum[:16])
}

// Accept stores one delivery durably and wakes the inbox worker. It is the
// only thing either transport does before acknowledging: no model call and no
// Slack call happens on this path. thread orders the delivery's processing
// (eventThread, interactionThread; "" for a thread of its own), taken from
// what the transport has parsed already.
func (b *Bridge) Accept(ctx context.Context, kind, key, thread string, body []byte) error {
	added, err := b.storeInbox(ctx, &store.SlackInboxAddParams{Key: key, Kind: kind, Body: body, Thread: thread})
	if err != nil {
		return fmt.Errorf("slack inbox: %w", err)
	}
	result := "duplicate"
	if added {
		result = "new"
		wake(b.inboxWake)
	}
	b.metrics.inbox.WithLabelValues(kind, result).Inc()
	return nil
}

// storeInbox commits one delivery; concurrent deliveries share commits in
// the store's own group-commit writer, so throughput grows with concurrency
// instead of queueing behind fsyncs.
func (b *Bridge) storeInbox(ctx context.Context, p *store.SlackInboxAddParams) (bool, error) {
	added, err := b.store.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{p})
	if err != nil {
		return false, err
	}
	return added[0], nil
}
