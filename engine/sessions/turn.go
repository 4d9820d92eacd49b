package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store/transcript"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/engine/search"
	"github.com/holdfast-bot/holdfast/engine/thread"
	"github.com/holdfast-bot/holdfast/engine/tracing"
	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// turn is a chat turn in flight: the session's active run. Turns live in
// memory; the session row records the active turn id so every interface sees
// it, and a row left pointing at a turn this process does not know (after a
// restart) is treated as stale and taken over.
type turn struct {
	id     string
	cancel context.CancelCauseFunc
	done   chan struct{}
	// settling is set (under Service.mu) once the turn has its answer and is
	// writing it: a new message then waits for it rather than conflicting.
	settling bool
}

// terminated is the cancellation cause /terminate gives a turn.
type terminated struct{ by string }

func (e terminated) Error() string { return "terminated by " + e.by }

var (
	errShutdown    = errors.New("cancelled: the server shut down")
	errTurnTimeout = errors.New("the reply took too long")
)

// Turn statuses' done reason on success.
const doneCompleted = "completed"

// Recover settles chat turns whose process stopped proving alive (it
// crashed or was killed mid-turn), so no session shows "running" forever.
// Turns of live processes, this one's or another replica's, keep running.
func (s *Service) Recover(ctx context.Context) error {
	n, err := s.st.SessionTurnsInterrupt(ctx, time.Now().Add(-s.cfg.TurnStale), "interrupted: the server restarted during the reply")
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.InfoContext(ctx, "settled chat turns interrupted by a restart", slog.Int64("sessions", n))
	}
	return nil
}

// Watch runs Recover every TurnStale until ctx ends: a turn lost just
// before a restart looks alive at start and goes stale only later.
func (s *Service) Watch(ctx context.Context) {
	t := time.NewTicker(s.cfg.TurnStale)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Recover(ctx); err != nil && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "settling lost chat turns", slog.Any("error", err))
			}
		}
	}
}

// alive reports whether the session's active run is a turn some process is
// still running (its heartbeat is fresh).
func (s *Service) alive(ses *store.Session) bool {
	return ses.ActiveRunID != "" && ses.TurnHeartbeatAt != nil && time.Since(*ses.TurnHeartbeatAt) < s.cfg.TurnStale
}

// onWork cancels a turn running here whose cancel request another process
// recorded (SessionTurnCancel's notice names the turn); the heartbeat
// still reads the request should the notice be lost.
func (s *Service) onWork(w store.WorkNotice) {
	if w.Kind != store.WorkCancel {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.turns {
		if slices.Contains(w.RunIDs, t.id) {
			t.cancel(terminated{w.Reason})
		}
	}
}

// errTurnLost cancels a turn whose session no longer names it (recovered
// as lost, or cleared by a terminate elsewhere).
var errTurnLost = errors.New("the reply was interrupted")

// beat keeps a running turn's heartbeat fresh and cancels the turn when a
// cancel request made by any process reaches it.
func (s *Service) beat(ctx context.Context, id string, t *turn) {
	tick := time.NewTicker(s.cfg.TurnHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.done:
			return
		case <-tick.C:
			by, err := s.st.SessionTurnHeartbeat(ctx, id, t.id, time.Now())
			switch {
			case errors.Is(err, store.ErrConflict):
				t.cancel(errTurnLost)
				return
			case err == nil && by != "":
				t.cancel(terminated{by})
				return
			}
		}
	}
}

// MessageResult answers Message. For a core command sent as a message,
// Command is its result and Reply the answer recorded in the transcript.
type MessageResult struct {
	Event   *store.Event   `json:"event,omitempty"`
	TurnID  string         `json:"turnId,omitempty"`
	Reply   *store.Event   `json:"reply,omitempty"`
	Command *CommandResult `json:"command,omitempty"`
}

// Message appends a user_message and runs a chat turn answering it, in the
// background or before returning. The turn is the session's active run until
// it ends with an assistant_message; /terminate cancels it. A core command
// (/status, /terminate, /compact) sent as a message runs as that command and
// is answered in the transcript (see commandMessage). A second message while
// a turn runs is refused (ErrConflict) and changes nothing.
func (s *Service) Message(ctx context.Context, id, text string, by engine.Decider, background bool) (*MessageResult, error) {
	return s.MessageWith(ctx, id, text, transcript.UserMessage{}, by, background)
}

// MessageWith is Message with more of the user_message recorded (a Slack
// message's raw text, its user and ts); its text is always text, and its
// speaker the caller's name when the caller has one.
func (s *Service) MessageWith(ctx context.Context, id, text string, said transcript.UserMessage, by engine.Decider, background bool) (*MessageResult, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, invalidf("text is required")
	}
	if err := store.CheckText("text", text, 0); err != nil {
		return nil, err
	}
	actor := by.UID()
	if cmd, ok := coreCommand(text); ok {
		return s.commandMessage(ctx, id, cmd, by)
	}
	base := ctx
	if background {
		base = context.WithoutCancel(ctx)
	}
	s.subscribe.Do(func() {
		work := s.st.WorkSubscribe(s.subCtx)
		go func() {
			for w := range work {
				s.onWork(w)
			}
		}()
	})
	tctx, cancel := context.WithCancelCause(base)
	t := &turn{id: store.NewID("turn"), cancel: cancel, done: make(chan struct{})}

	for {
		s.mu.Lock()
		prev := s.turns[id]
		switch {
		case s.closed:
			s.mu.Unlock()
			cancel(errShutdown)
			return nil, fmt.Errorf("session %s: %w", id, errShutdown)
		case prev != nil && prev.settling:
			s.mu.Unlock()
			select {
			case <-prev.done:
				continue
			case <-ctx.Done():
				cancel(nil)
				return nil, ctx.Err()
			}
		case prev != nil:
			s.mu.Unlock()
			cancel(nil)
			return nil, fmt.Errorf("%w: session %s is already answering a message; wait or /terminate it", store.ErrConflict, id)
		}
		s.turns[id] = t
		s.wg.Add(1)
		s.mu.Unlock()
		break
	}

	// Read after registering: a previous turn leaves s.turns only after it
	// settled, so what we read is not a turn about to finish.
	ses, err := s.st.SessionGetByID(ctx, id)
	if err != nil {
		s.release(id, t)
		cancel(nil)
		return nil, err
	}
	if s.alive(ses) {
		// Not in s.turns, yet alive: another process is answering.
		s.release(id, t)
		cancel(nil)
		return nil, fmt.Errorf("%w: session %s is already answering a message; wait or /terminate it", store.ErrConflict, id)
	}
	running, empty := store.SessionRunning, ""
	stale := ses.ActiveRunID // a lost turn, taken over
	var title *string
	if ses.Title == "" {
		// An untitled session is named by its first message, as chat UIs do.
		name := engine.FirstLine(text, 80)
		title = &name
	}
	said.Text = text
	if sp := speakerOf(by); sp != "" {
		said.Speaker = sp
	}
	ses, evs, err := s.st.SessionUpdate(ctx, &store.SessionUpdateParams{ID: id, ExpectActiveRunID: &stale,
		ActiveRunID: &t.id, Status: &running, DoneReason: &empty, Title: title,
		Events: []*store.EventAppendParams{transcript.EncodePtr(said, actor)}})
	if err != nil {
		s.release(id, t)
		cancel(nil)
		return nil, err
	}
	res := &MessageResult{Event: evs[0], TurnID: t.id}
	log := s.log.With(slog.String("session_id", id), slog.String("run_id", t.id))
	tctx, span := s.turnSpan(tctx, ses, t.id, actor)
	log.InfoContext(tctx, "chat turn started", slog.Bool("background", background))
	run := func() *store.Event {
		defer s.release(id, t)
		defer cancel(nil)
		defer span.End()
		go s.beat(tctx, id, t)
		rctx, rcancel := context.WithTimeoutCause(tctx, s.cfg.TurnTimeout, errTurnTimeout)
		reply, err := s.runTurn(rctx, ses, t, text, actor, by.Via, evs[0])
		if err != nil && tctx.Err() == nil && errors.Is(context.Cause(rctx), errTurnTimeout) {
			err = fmt.Errorf("%w (over %s)", errTurnTimeout, s.cfg.TurnTimeout)
		}
		rcancel()
		tracing.Fail(span, "", err)
		return s.settle(tctx, log, id, t, reply, err)
	}
	if background {
		go run()
		return res, nil
	}
	res.Reply = run()
	return res, nil
}

// speakerOf is the name a user message records for its speaker (SPEC §3:
// a Slack display name or a console username); "" when the caller has
// none, which readers resolve from the actor (thread.Names).
func speakerOf(by engine.Decider) string {
	switch {
	case by.DisplayName != "":
		return by.DisplayName
	case by.Username != "":
		return by.Username
	case by.KeyID != "":
		return "key:" + by.KeyID
	}
	return ""
}

// commandMessage runs a core command typed as a message and answers it in
// the transcript, as a mention's command is answered in its Slack thread: the
// command event says who asked (Command records it for /terminate and
// /compact; /status, which changes nothing, gets it here) and an
// assistant_message carrying the command's name answers. A refused command
// records nothing and returns its error.
func (s *Service) commandMessage(ctx context.Context, id, cmd string, by engine.Decider) (*MessageResult, error) {
	res, err := s.Command(ctx, id, cmd, by)
	if err != nil {
		return nil, err
	}
	answer := transcript.EncodePtr(transcript.AssistantMessage{Text: CommandAnswer(res), Command: cmd}, "holdfast")
	events := []*store.EventAppendParams{answer}
	if cmd == CmdStatus {
		events = append([]*store.EventAppendParams{commandEvent(cmd, by.UID())}, events...)
	}
	_, evs, err := s.st.SessionUpdate(ctx, &store.SessionUpdateParams{ID: id, Events: events})
	if err != nil {
		return nil, err
	}
	return &MessageResult{Command: res, Reply: evs[len(evs)-1]}, nil
}

// CommandAnswer phrases a core command's outcome as markdown, for the
// transcript and for every surface that answers the command.
func CommandAnswer(res *CommandResult) string {
	switch res.Command {
	case CmdTerminate:
		var parts []string
		if res.CancelledTurn {
			parts = append(parts, "stopped the reply in progress")
		}
		switch res.CancelledRuns {
		case 0:
		case 1:
			parts = append(parts, "cancelled 1 workflow run")
		default:
			parts = append(parts, fmt.Sprintf("cancelled %d workflow runs", res.CancelledRuns))
		}
		answer := "Terminated: nothing was running in this session."
		if len(parts) > 0 {
			answer = "Terminated: " + strings.Join(parts, " and ") + "."
		}
		switch res.HeldOpen {
		case 0:
		case 1:
			answer += " 1 run waiting for approval stays open: only a steward's terminate rejects it."
		default:
			answer += fmt.Sprintf(" %d runs waiting for approval stay open: only a steward's terminate rejects them.", res.HeldOpen)
		}
		return answer
	case CmdCompact:
		n := 0
		if res.Summary != nil {
			// The summary was just written here: a decode error (a field
			// left zero) cannot come from its shape.
			ev, _ := transcript.Decode(res.Summary)
			if c, ok := ev.(transcript.CompactSummary); ok {
				n = c.EventCount
			}
		}
		return fmt.Sprintf("Compacted %s into the summary above; later replies start from it.", plural(n, "event"))
	}
	ses := res.Session
	if ses == nil {
		return "No session."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "**Status** `%s`", ses.Status)
	if ses.DoneReason != "" {
		fmt.Fprintf(&b, " (%s)", ses.DoneReason)
	}
	fmt.Fprintf(&b, " · posture `%s` · %s", NormalizePolicy(ses.Policy), plural(int(ses.EventCount), "event"))
	if ses.OpenHolds > 0 {
		fmt.Fprintf(&b, " · %s", plural(int(ses.OpenHolds), "open hold"))
	}
	if ses.ActiveRunID != "" {
		fmt.Fprintf(&b, " · replying (`%s`)", ses.ActiveRunID)
	}
	if ses.Archived {
		b.WriteString(" · archived")
	}
	return b.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// turnSpan starts a chat turn's span, with the session's provenance, as a
// child of whatever ctx carries (a Slack delivery's span).
func (s *Service) turnSpan(ctx context.Context, ses *store.Session, turnID, actor string) (context.Context, trace.Span) {
	if s.cfg.Tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := tracing.Tracer(s.cfg.Tracer).Start(ctx, tracing.SpanChatTurn)
	if span.IsRecording() {
		span.SetAttributes(append(tracing.Provenance(ses, tracing.SurfaceOf(actor, ses.Origin), ""),
			tracing.RunID.String(turnID))...)
	}
	return ctx, span
}

func (s *Service) release(id string, t *turn) {
	s.mu.Lock()
	if s.turns[id] == t {
		delete(s.turns, id)
	}
	s.mu.Unlock()
	close(t.done)
	s.wg.Done()
}

// settle ends the turn: the session leaves running and the reply (or the
// failure, so a Slack thread hears of it) is appended, in one transaction.
func (s *Service) settle(tctx context.Context, log *slog.Logger, id string, t *turn, reply string, err error) *store.Event {
	s.mu.Lock()
	t.settling = true
	s.mu.Unlock()
	status, reason := store.SessionDone, doneCompleted
	var events []*store.EventAppendParams
	switch {
	case tctx.Err() != nil:
		status, reason = store.SessionCancelled, context.Cause(tctx).Error()
	case err != nil:
		status, reason = store.SessionFailed, truncate(err.Error(), 300)
		events = append(events, transcript.EncodePtr(transcript.AssistantMessage{Text: "Sorry, I could not answer: " + reason, Error: true},
			"holdfast"))
	default:
		if strings.TrimSpace(reply) == "" {
			reply = "(no reply)"
		}
		events = append(events, transcript.EncodePtr(transcript.AssistantMessage{Text: reply}, "holdfast"))
	}
	none := ""
	_, evs, uerr := s.st.SessionUpdate(context.WithoutCancel(tctx), &store.SessionUpdateParams{ID: id,
		ExpectActiveRunID: &t.id, ActiveRunID: &none, Status: &status, DoneReason: &reason, Events: events})
	if uerr != nil {
		log.ErrorContext(tctx, "chat turn could not settle", slog.Any("error", uerr))
		return nil
	}
	log.InfoContext(tctx, "chat turn finished", slog.String("status", status), slog.String("done_reason", reason))
	if len(evs) == 0 {
		return nil
	}
	return evs[0]
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// runTurn produces the reply. Slash commands naming a workflow enqueue it
// with any model; otherwise the template model answers with help and an
// OpenAI-compatible one answers from the transcript with tools.
func (s *Service) runTurn(ctx context.Context, ses *store.Session, t *turn, text, actor, via string, msg *store.Event) (string, error) {
	if ses.Platform == channelPlatforms["slack"] {
		// Its answers are posted in its Slack thread, whoever asked from
		// where: written as Slack takes them.
		via = ViaSlack
	}
	if strings.HasPrefix(text, "/") {
		return s.slashTurn(ctx, ses, text, actor, via, msg)
	}
	m, err := s.cfg.Models.Get(s.cfg.DefaultModel)
	if err != nil {
		return "", err
	}
	if m.Name() == "template" {
		return s.help(ctx, "", via)
	}
	return s.modelTurn(ctx, m, ses, t, actor)
}

// slashTurn runs "/<command> <brief>": the workflow is enqueued for this
// session with payload {brief}, deduplicated on the message that asked.
func (s *Service) slashTurn(ctx context.Context, ses *store.Session, text, actor, via string, msg *store.Event) (string, error) {
	cmd, brief, _ := strings.Cut(text, " ")
	if _, err := s.st.WorkflowGetByCommand(ctx, cmd); errors.Is(err, store.ErrNotFound) {
		return s.help(ctx, fmt.Sprintf("There is no %s command.", cmd), via)
	} else if err != nil {
		return "", err
	}
	input := map[string]any{"command": cmd, "brief": strings.TrimSpace(brief)}
	out := s.enqueue(ctx, ses.ID, actor, input, fmt.Sprintf("session:%s:%d", ses.ID, msg.ID))
	if err := s.recordTool(ctx, ses.ID, toolEnqueue, "", input, out); err != nil {
		return "", err
	}
	return enqueueReply(cmd, out), nil
}

func enqueueReply(cmd string, out map[string]any) string {
	switch {
	case out["error"] != nil:
		return fmt.Sprintf("Could not queue %s: %v", cmd, out["error"])
	case out["enqueued"] == true:
		return fmt.Sprintf("Queued %s (item %v). I will post progress here.", cmd, out["itemId"])
	default:
		return fmt.Sprintf("%s was already queued for this message (item %v).", cmd, out["itemId"])
	}
}

// help is the template model's reply: what can be run from here, written as
// the caller's surface (via) types it. In Slack a message that starts with
// "/" is taken by Slack as its own slash command and never sent, so there
// commands are written without the slash, which the bridge takes as well.
func (s *Service) help(ctx context.Context, prefix, via string) (string, error) {
	typed := func(cmd string) string { return cmd }
	if via == ViaSlack {
		typed = func(cmd string) string { return strings.TrimPrefix(cmd, "/") }
	}
	live, err := s.liveWorkflows(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if prefix != "" {
		b.WriteString(prefix + " ")
	}
	if len(live) == 0 {
		b.WriteString("No workflows are live right now.")
	} else {
		// Blank lines around the list: a line right after it would be read
		// as more of its last item.
		b.WriteString("I can run these workflows:\n\n")
		for _, w := range live {
			fmt.Fprintf(&b, "- %s: %s\n", typed(w["command"]), w["summary"])
		}
		fmt.Fprintf(&b, "\nSend `<command> <brief>` to start one, e.g. `%s`.", typed(live[0]["command"]+" <brief>"))
	}
	fmt.Fprintf(&b, "\nSession commands: %s, %s, %s.", typed(CmdStatus), typed(CmdTerminate), typed(CmdCompact))
	return b.String(), nil
}

func (s *Service) liveWorkflows(ctx context.Context) ([]map[string]string, error) {
	ws, err := s.st.WorkflowList(ctx)
	if err != nil {
		return nil, err
	}
	out := []map[string]string{}
	for _, w := range ws {
		if w.Status == workflow.StatusLive && w.Command != "" {
			out = append(out, map[string]string{"command": w.Command, "summary": w.Summary, "title": w.Title})
		}
	}
	return out, nil
}

// Tools offered to OpenAI-compatible models: the seed's /loop picker
// (list_workflows, enqueue_workflow) and the library (search_memos with the
// query grammar of SPEC §4.1, read_memo).
const (
	toolList    = "list_workflows"
	toolEnqueue = "enqueue_workflow"
	toolSearch  = "search_memos"
	toolRead    = "read_memo"
)

var chatTools = []model.Tool{
	{Name: toolList, Description: "List the live workflows: their command and what they do.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{}}},
	{Name: toolEnqueue, Description: "Queue a run of a live workflow for this conversation. Progress and output are posted back here.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{
			"command": map[string]any{"type": "string", "description": "the workflow's command, e.g. /draft-memo"},
			"brief":   map[string]any{"type": "string", "description": "what the run should do, in the user's words"},
		}, "required": []string{"command", "brief"}}},
	{Name: toolSearch, Description: "Search the memo library. Plain words match titles and text (a phrase in double quotes); " +
		"filters: tag:<tag>, type:note (default) or type:workflow, since:<duration> such as since:7d, limit:<n> (default 5, at most 50). " +
		"Answers each memo's id, title, tags, update time and the start of its text.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{
			"query": map[string]any{"type": "string", "description": `e.g. otters "sandy banks" tag:brief since:7d`},
		}, "required": []string{"query"}}},
	{Name: toolRead, Description: "Read one memo by its id (as search_memos answers it): its title, tags and text.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{
			"id": map[string]any{"type": "string", "description": "the memo's id, e.g. mem_…"},
		}, "required": []string{"id"}}},
}

// Bounds of what a tool answers, so a result cannot crowd the
// conversation out of the model's window.
const (
	toolSnippetChars  = 240
	toolMemoChars     = 8_000
	toolMaxWorkflows  = 50
	toolSummaryChars  = 200
	toolMaxTitleChars = 200
)

const systemPrompt = `You are Holdfast, an assistant that runs workflows (drafting memos, summaries, digests) for a team.
Answer briefly and plainly. Each user message starts with the name of the person who wrote it ("Ada: ...");
several people may share a conversation. When the user wants work a workflow does, call list_workflows to
find it and enqueue_workflow with its command and a brief; say what you queued. To answer from the team's
memo library, call search_memos and then read_memo on what it finds. Workflow outputs may wait for a
steward's approval. Session commands the user can send: /status, /terminate, /compact.`

// modelTurn runs the bounded model↔tool loop: up to MaxToolRounds rounds may
// call tools, then one last call without tools must answer.
func (s *Service) modelTurn(ctx context.Context, m model.Model, ses *store.Session, t *turn, actor string) (string, error) {
	msgs, err := s.history(ctx, ses.ID)
	if err != nil {
		return "", err
	}
	for round := 0; ; round++ {
		req := model.Request{Messages: msgs}
		if round < s.cfg.MaxToolRounds {
			req.Tools = chatTools
		}
		resp, _, err := model.CompleteWithRetry(ctx, m, req, s.cfg.Retries, 500*time.Millisecond)
		if err != nil {
			return "", err
		}
		if len(resp.ToolCalls) == 0 || req.Tools == nil {
			return resp.Content, nil
		}
		msgs = append(msgs, model.Message{Role: model.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls})
		for i, tc := range resp.ToolCalls {
			out, err := s.callTool(ctx, ses.ID, actor, tc, fmt.Sprintf("session:%s:%s:%d:%d", ses.ID, t.id, round, i))
			if err != nil {
				return "", err
			}
			msgs = append(msgs, model.Message{Role: model.RoleTool, Content: out, ToolCallID: tc.ID})
		}
	}
}

// callTool runs one tool call, records it as a tool_result event and
// returns the JSON the model sees. Bad arguments are the model's to fix, so
// they come back as a tool error rather than failing the turn.
func (s *Service) callTool(ctx context.Context, sessionID, actor string, tc model.ToolCall, dedupe string) (string, error) {
	input := map[string]any{}
	var out map[string]any
	if err := json.Unmarshal([]byte(orEmpty(tc.Arguments)), &input); err != nil {
		out = map[string]any{"error": "arguments are not a JSON object: " + err.Error()}
	} else {
		switch tc.Name {
		case toolList:
			live, err := s.liveWorkflows(ctx)
			if err != nil {
				return "", err
			}
			out = map[string]any{"workflows": boundWorkflows(live)}
		case toolEnqueue:
			out = s.enqueue(ctx, sessionID, actor, input, dedupe)
		case toolSearch:
			var err error
			if out, err = s.searchMemos(ctx, input); err != nil {
				return "", err
			}
		case toolRead:
			var err error
			if out, err = s.readMemo(ctx, input); err != nil {
				return "", err
			}
		default:
			out = map[string]any{"error": fmt.Sprintf("unknown tool %q", tc.Name)}
		}
	}
	if err := s.recordTool(ctx, sessionID, tc.Name, tc.ID, input, out); err != nil {
		return "", err
	}
	b, _ := json.Marshal(out)
	return string(b), nil
}

// searchMemos is the search_memos tool: the query grammar, listed memos
// only, the best 5 unless the query gives a limit. A query that does not
// parse is the model's to fix: its refusal is the result.
func (s *Service) searchMemos(ctx context.Context, input map[string]any) (map[string]any, error) {
	text, _ := input["query"].(string)
	q, err := search.Parse(text)
	if err != nil {
		return map[string]any{"error": store.ReasonOf(err)}, nil
	}
	ms, err := s.st.MemoSearch(ctx, q.Params(time.Now(), search.DefaultLimit))
	if err != nil {
		return nil, err
	}
	found := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		found = append(found, map[string]any{"id": m.ID, "title": truncate(m.Title, toolMaxTitleChars), "tags": m.Tags,
			"memoType": m.MemoType, "updatedAt": m.UpdatedAt.UTC().Format(time.RFC3339), "snippet": truncate(oneLine(m.Body), toolSnippetChars)})
	}
	return map[string]any{"query": q.String(), "memos": found}, nil
}

// readMemo is the read_memo tool: one memo by id, its text cut at
// toolMemoChars.
func (s *Service) readMemo(ctx context.Context, input map[string]any) (map[string]any, error) {
	id, _ := input["id"].(string)
	id = strings.TrimSpace(id)
	if id == "" {
		return map[string]any{"error": "id is required"}, nil
	}
	m, err := s.st.MemoGetByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return map[string]any{"error": fmt.Sprintf("no memo has id %q; search_memos answers ids", truncate(id, 80))}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]any{"id": m.ID, "title": truncate(m.Title, toolMaxTitleChars), "tags": m.Tags, "memoType": m.MemoType,
		"updatedAt": m.UpdatedAt.UTC().Format(time.RFC3339), "body": m.Body}
	if r := []rune(m.Body); len(r) > toolMemoChars {
		out["body"], out["truncated"] = string(r[:toolMemoChars]), true
	}
	return out, nil
}

// boundWorkflows keeps a list_workflows result within bounds.
func boundWorkflows(live []map[string]string) []map[string]string {
	if len(live) > toolMaxWorkflows {
		live = live[:toolMaxWorkflows]
	}
	for _, w := range live {
		w["summary"] = truncate(w["summary"], toolSummaryChars)
		w["title"] = truncate(w["title"], toolMaxTitleChars)
	}
	return live
}

// oneLine folds whitespace runs into single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orEmpty(args string) string {
	if strings.TrimSpace(args) == "" {
		return "{}"
	}
	return args
}

// recordTool appends the tool_result event (SPEC §3: tool_id, operation,
// tool_input) with the call id and the result.
func (s *Service) recordTool(ctx context.Context, sessionID, tool, callID string, input, out map[string]any) error {
	p := transcript.EncodePtr(transcript.ToolResult{ToolID: tool, Operation: "call", ToolInput: input, Result: out, CallID: callID}, "holdfast")
	p.SessionID = sessionID
	_, err := s.st.EventAppend(ctx, p)
	return err
}

// enqueue asks the engine to queue input.command with payload {brief},
// carrying the session id so the run's transcript lands here.
func (s *Service) enqueue(ctx context.Context, sessionID, actor string, input map[string]any, dedupe string) map[string]any {
	cmd, _ := input["command"].(string)
	brief, _ := input["brief"].(string)
	cmd = strings.TrimSpace(cmd)
	if cmd == "" {
		return map[string]any{"error": "command is required"}
	}
	if !strings.HasPrefix(cmd, "/") {
		cmd = "/" + cmd
	}
	if s.eng == nil {
		return map[string]any{"error": "the workflow engine is not running"}
	}
	payload := map[string]any{"brief": brief} // the engine titles it from the brief
	it, enqueued, err := s.eng.Enqueue(ctx, engine.EnqueueParams{Command: cmd, DedupeKey: dedupe, Payload: payload,
		SessionID: sessionID, OwnerUID: actor})
	if err != nil {
		return map[string]any{"error": store.ReasonOf(err)}
	}
	s.log.InfoContext(ctx, "workflow enqueued from session", slog.String("session_id", sessionID),
		slog.String("item_id", it.ID), slog.String("command", cmd), slog.Bool("enqueued", enqueued))
	return map[string]any{"command": cmd, "enqueued": enqueued, "itemId": it.ID}
}

// historyEvents bounds how much transcript a turn sends the model; /compact
// folds older history into a summary the turn starts from.
const historyEvents = 100

// history turns the transcript since the last compact_summary into model
// messages: user and assistant messages as such, tools and run progress as
// system notes.
func (s *Service) history(ctx context.Context, id string) ([]model.Message, error) {
	msgs := []model.Message{{Role: model.RoleSystem, Content: systemPrompt}}
	evs, summary, err := s.sinceCompact(ctx, id, historyEvents)
	if err != nil {
		return nil, err
	}
	if summary != "" {
		msgs = append(msgs, model.Message{Role: model.RoleSystem, Content: "Summary of the conversation so far: " + summary})
	}
	names := thread.NewNames(s.st)
	// A thread's backfilled messages come first, as they were said.
	for _, e := range thread.Order(evs) {
		switch m := transcript.Read(ctx, s.log, e).(type) {
		case transcript.UserMessage:
			// The model sees who said what (SPEC §3).
			msgs = append(msgs, model.Message{Role: model.RoleUser, Content: names.Speaker(ctx, e) + ": " + m.Text})
		case transcript.AssistantMessage:
			if m.Command != "" {
				// A core command's answer: the model did not say it.
				msgs = append(msgs, model.Message{Role: model.RoleSystem, Content: m.Command + ": " + m.Text})
				continue
			}
			msgs = append(msgs, model.Message{Role: model.RoleAssistant, Content: m.Text})
		case transcript.ToolResult, transcript.RunStarted, transcript.RunFinished, transcript.HoldOpened, transcript.HoldDecided,
			transcript.MemoDispatched:
			// Notes are context, not content: a long preview or result is cut
			// so it cannot crowd the conversation out of the model's window.
			b, _ := json.Marshal(e.Payload)
			msgs = append(msgs, model.Message{Role: model.RoleSystem, Content: e.Type + ": " + truncate(string(b), 1000)})
		}
	}
	return msgs, nil
}

// sinceCompact returns the newest limit events after the latest
// compact_summary, and that summary's text.
func (s *Service) sinceCompact(ctx context.Context, id string, limit int) ([]*store.Event, string, error) {
	sums, err := s.st.EventList(ctx, &store.EventListParams{SessionID: id, Types: []string{transcript.TypeCompactSummary}, Newest: true, Limit: 1})
	if err != nil {
		return nil, "", err
	}
	var after time.Time
	summary := ""
	if len(sums) == 1 {
		after = sums[0].TS
		if c, ok := transcript.Read(ctx, s.log, sums[0]).(transcript.CompactSummary); ok {
			summary = c.Text
		}
	}
	evs, err := s.st.EventList(ctx, &store.EventListParams{SessionID: id, After: after, Newest: true, Limit: limit})
	return evs, summary, err
}
