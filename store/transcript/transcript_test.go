package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/holdfast-bot/holdfast/store"
)

// stored round-trips a payload through JSON, as the store does.
func stored(t *testing.T, typ string, p map[string]any) *store.Event {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return &store.Event{Type: typ, Payload: back}
}

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		ev    Event
		today string // a payload as stored today
	}{
		{UserMessage{Text: "hi", Said: Said{Speaker: "Ada"}, Fields: map[string]any{"slackEventId": "Ev1"}},
			`{"text":"hi","speaker":"Ada","slackEventId":"Ev1"}`},
		{UserMessage{Text: "old", Said: Said{Speaker: "Bo", SlackTS: "1.2", Backfilled: true}, Fields: map[string]any{"user": "U1", "channel": "C1"}},
			`{"text":"old","speaker":"Bo","ts":"1.2","backfilled":true,"user":"U1","channel":"C1"}`},
		{UserMessage{Text: "typed"}, `{"text":"typed"}`},
		{AssistantMessage{Text: "done", RunID: "run_1", Dispatch: "reply"}, `{"text":"done","runId":"run_1","dispatch":"reply"}`},
		{AssistantMessage{Text: "Sorry", Error: true}, `{"text":"Sorry","error":true}`},
		{AssistantMessage{Text: "ok", Command: "/status"}, `{"text":"ok","command":"/status"}`},
		{AssistantMessage{Text: "old", Said: Said{Speaker: "Holdfast", SlackTS: "1.3", Backfilled: true}, Fields: map[string]any{"user": "UB"}},
			`{"text":"old","backfilled":true,"speaker":"Holdfast","ts":"1.3","user":"UB"}`},
		{Context{Fields: map[string]any{"openedBy": "ada", "via": "console"}}, `{"openedBy":"ada","via":"console"}`},
		{Command{Command: "/compact", By: "ada"}, `{"command":"/compact","by":"ada"}`},
		{PolicySet{Policy: "auto"}, `{"policy":"auto"}`},
		{CompactSummary{Text: "s", EventCount: 3, ThroughEventID: 42}, `{"text":"s","eventCount":3,"throughEventId":42}`},
		{CompactSummary{Text: "s"}, `{"text":"s","eventCount":0}`},
		{ToolResult{ToolID: "search", Operation: "call", ToolInput: map[string]any{"q": "x"}, Result: map[string]any{"n": 1.0}, CallID: "c1"},
			`{"tool_id":"search","operation":"call","tool_input":{"q":"x"},"result":{"n":1},"call_id":"c1"}`},
		{MessageEdited{SlackTS: "1.2", Text: "now [this](https://x.test)", Raw: "now <https://x.test|this>"},
			`{"ts":"1.2","text":"now [this](https://x.test)","raw":"now <https://x.test|this>"}`},
		{MessageDeleted{SlackTS: "1.2"}, `{"ts":"1.2"}`},
		{RunStarted{RunID: "run_1", ItemID: "itm_1", Command: "/brief"}, `{"runId":"run_1","itemId":"itm_1","command":"/brief"}`},
		{RunStarted{RunID: "run_1", ItemID: "itm_1", Command: "/brief", DedupeKey: "slack:Ev1"},
			`{"runId":"run_1","itemId":"itm_1","command":"/brief","dedupeKey":"slack:Ev1"}`},
		{RunStep{RunID: "run_1", Step: 2, Kind: "llm", Status: "succeeded"}, `{"runId":"run_1","step":2,"kind":"llm","status":"succeeded"}`},
		{HoldOpened{HoldID: "hld_1", RunID: "run_1", Command: "/brief", GateLabel: "Review", Preview: "p", Title: "T"},
			`{"holdId":"hld_1","runId":"run_1","command":"/brief","gateLabel":"Review","preview":"p","title":"T"}`},
		{HoldOpened{HoldID: "hld_1", RunID: "run_1", Command: "/brief", GateLabel: "Review", Preview: "p", Title: "T",
			Workflow: "Brief", Owner: "slack:U1", Required: 2},
			`{"holdId":"hld_1","runId":"run_1","command":"/brief","gateLabel":"Review","preview":"p","title":"T","workflow":"Brief","owner":"slack:U1","required":2}`},
		{HoldApprovedPartial{HoldID: "hld_1", RunID: "run_1", Approvals: []Approval{{By: "slack:U1", Via: "slack"}}, Required: 2},
			`{"holdId":"hld_1","runId":"run_1","approvals":[{"by":"slack:U1","via":"slack"}],"required":2}`},
		{HoldDecided{HoldID: "hld_1", RunID: "run_1", Status: "approved", DecidedBy: "ada", DecidedVia: "console", Comment: "ok"},
			`{"holdId":"hld_1","runId":"run_1","status":"approved","decidedBy":"ada","decidedVia":"console","comment":"ok"}`},
		{HoldDecided{HoldID: "hld_1", RunID: "run_1", Status: "approved", DecidedBy: "ada", DecidedVia: "console", Title: "T2",
			Command: "/brief", GateLabel: "Review", Workflow: "Brief", Owner: "user:u1", Required: 1, Published: "# T2", Edited: true},
			`{"holdId":"hld_1","runId":"run_1","status":"approved","decidedBy":"ada","decidedVia":"console","comment":"","title":"T2","command":"/brief","gateLabel":"Review","workflow":"Brief","owner":"user:u1","required":1,"published":"# T2","edited":true}`},
		{HoldDecided{HoldID: "hld_1", RunID: "run_1", Status: "approved", DecidedBy: "bo", DecidedVia: "slack", Required: 2,
			Edited: true, Approvers: []string{"ada", "bo"}, EditedBy: "ada"},
			`{"holdId":"hld_1","runId":"run_1","status":"approved","decidedBy":"bo","decidedVia":"slack","comment":"","required":2,"edited":true,"approvers":["ada","bo"],"editedBy":"ada"}`},
		{HoldReminder{HoldID: "hld_1", RunID: "run_1", Title: "T", Command: "/brief", GateLabel: "Review", N: 1, Of: 3,
			Stewards: []string{"U1"}, OpenedAt: "2026-01-02T03:04:05Z"},
			`{"holdId":"hld_1","runId":"run_1","title":"T","command":"/brief","gateLabel":"Review","n":1,"of":3,"stewards":["U1"],"openedAt":"2026-01-02T03:04:05Z"}`},
		{RunFinished{RunID: "run_1", Status: "failed", ErrorKind: "timeout", Error: "slow"},
			`{"runId":"run_1","status":"failed","errorKind":"timeout","error":"slow"}`},
		{MemoDispatched{RunID: "run_1", MemoID: "mem_1", Title: "T"}, `{"runId":"run_1","memoId":"mem_1","title":"T"}`},
		{MemoDispatched{RunID: "run_1", MemoID: "mem_1", Title: "T", Body: "b"}, `{"runId":"run_1","memoId":"mem_1","title":"T","body":"b"}`},
		{ActionPlan{Steps: []PlanStep{{Title: "Read", Description: "the thread"}}}, `{"steps":[{"title":"Read","description":"the thread"}]}`},
		{Unknown{EventType: "permission", Payload: map[string]any{"steps": []any{"a"}}}, `{"steps":["a"]}`},
	}
	seen := map[string]bool{}
	for i, c := range cases {
		t.Run(fmt.Sprint(c.ev.Type(), "/", i), func(t *testing.T) {
			seen[c.ev.Type()] = true
			p := Encode(c.ev, "engine")
			if p.Type != c.ev.Type() || p.Actor != "engine" {
				t.Fatalf("Encode: type %q actor %q", p.Type, p.Actor)
			}
			got, err := Decode(stored(t, p.Type, p.Payload))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.ev) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, c.ev)
			}
			// The stored JSON is what it always was.
			b, _ := json.Marshal(p.Payload)
			var a, w any
			_ = json.Unmarshal(b, &a)
			if err := json.Unmarshal([]byte(c.today), &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, w) {
				t.Fatalf("payload changed:\n got %s\nwant %s", b, c.today)
			}
			var today map[string]any
			_ = json.Unmarshal([]byte(c.today), &today)
			old, err := Decode(&store.Event{Type: c.ev.Type(), Payload: today})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(old, c.ev) {
				t.Fatalf("today's payload:\n got %#v\nwant %#v", old, c.ev)
			}
		})
	}
	for _, typ := range []string{TypeUserMessage, TypeAssistantMessage, TypeContext, TypeCommand, TypeActionPlan, TypeToolResult, TypePolicySet,
		TypeCompactSummary, TypeRunStarted, TypeRunStep, TypeHoldOpened, TypeHoldApprovedPartial, TypeHoldDecided,
		TypeHoldReminder, TypeRunFinished, TypeMemoDispatched, TypeMessageEdited, TypeMessageDeleted} {
		if !seen[typ] {
			t.Errorf("no case for %s", typ)
		}
	}
}

// TestDecodeWrongShape: a wrongly typed value is an error, and the event
// still reads with that field empty and the others as written, as the
// untyped readers read it.
func TestDecodeWrongShape(t *testing.T) {
	ev, err := Decode(&store.Event{Type: TypeRunStep, Payload: map[string]any{"step": "two", "runId": "run_1", "kind": "llm"}})
	if err == nil {
		t.Fatal("a string step decoded")
	}
	if want := (RunStep{RunID: "run_1", Kind: "llm"}); ev != want {
		t.Fatalf("got %#v, want %#v", ev, want)
	}
	ev, err = Decode(&store.Event{Type: TypeAssistantMessage, Payload: map[string]any{"text": 3.0, "runId": "run_1", "backfilled": true}})
	if err == nil {
		t.Fatal("a number text decoded")
	}
	if m := ev.(AssistantMessage); m.Text != "" || m.RunID != "run_1" || !m.Backfilled {
		t.Fatalf("got %#v", m)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	read := Read(context.Background(), log, &store.Event{ID: 7, Type: TypeHoldDecided, Payload: map[string]any{"holdId": []any{}, "status": "approved"}})
	if read.(HoldDecided).Status != "approved" || !strings.Contains(logged.String(), "event_id=7") {
		t.Fatalf("read %#v, logged %q", read, logged.String())
	}
}

// TestOldRows: rows written before the additive keys decode with them
// empty, which is how a reader knows to complete them from the store.
func TestOldRows(t *testing.T) {
	rows := []struct {
		typ, json string
		want      Event
	}{
		{TypeRunStarted, `{"runId":"run_1","itemId":"itm_1","command":"/brief"}`, RunStarted{RunID: "run_1", ItemID: "itm_1", Command: "/brief"}},
		{TypeHoldOpened, `{"holdId":"hld_1","runId":"run_1","command":"/brief","gateLabel":"Review","preview":"p","title":"T"}`,
			HoldOpened{HoldID: "hld_1", RunID: "run_1", Command: "/brief", GateLabel: "Review", Preview: "p", Title: "T"}},
		{TypeHoldDecided, `{"holdId":"hld_1","runId":"run_1","status":"rejected","decidedBy":"ada","decidedVia":"slack","comment":"no"}`,
			HoldDecided{HoldID: "hld_1", RunID: "run_1", Status: "rejected", DecidedBy: "ada", DecidedVia: "slack", Comment: "no"}},
		{TypeMemoDispatched, `{"runId":"run_1","memoId":"mem_1","title":"T"}`, MemoDispatched{RunID: "run_1", MemoID: "mem_1", Title: "T"}},
	}
	for _, r := range rows {
		t.Run(r.typ, func(t *testing.T) {
			var p map[string]any
			if err := json.Unmarshal([]byte(r.json), &p); err != nil {
				t.Fatal(err)
			}
			got, err := Decode(&store.Event{Type: r.typ, Payload: p})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, r.want) {
				t.Fatalf("got %#v, want %#v", got, r.want)
			}
		})
	}
}
