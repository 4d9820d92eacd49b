package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// Edges of understanding (SPEC §10, seed 000's open design): what the
// system ran into but did not resolve, read from what is already recorded.

// edgeLabels say what each kind is, in a sentence's subject.
var edgeLabels = map[string]string{
	KindGuard:                  "Runs whose output failed a Guard",
	KindModel:                  "Runs the model failed",
	KindModelTransient:         "Runs the model kept failing (transient errors, retries used up)",
	KindDispatchConflict:       "Dispatches refused because the target changed meanwhile",
	KindDispatch:               "Runs that could not be dispatched",
	KindTimeout:                "Runs whose step timed out",
	KindCompile:                "Runs of a workflow that did not compile",
	KindLoad:                   "Runs that could not load their context",
	store.RunRecoveryExhausted: "Runs given up after repeated crashes",
	store.EdgeHoldTimeout:      "Holds nobody decided in time",
	store.EdgeDecisionRefused:  "Decision attempts refused",
	store.EdgeWorkflowBroken:   "Workflows that do not compile",
	store.EdgeSlackUnhandled:   "Slack deliveries that could not be handled",
	store.EdgeTurnFailed:       "Chat turns that ended in an error",
}

// EdgeLabel says what an edge kind is.
func EdgeLabel(kind string) string {
	if l, ok := edgeLabels[kind]; ok {
		return l
	}
	return "Runs that failed (" + kind + ")"
}

// EdgeRef answers the id an example links and its console path ("" when
// the console has no page for it).
func EdgeRef(source string, e *store.EdgeExample) (ref, link string) {
	switch {
	case source == store.EdgeSourceWorkflow && e.WorkflowMemoID != "":
		if e.Command != "" {
			return e.WorkflowMemoID, "/workflows/" + strings.TrimPrefix(e.Command, "/")
		}
		return e.WorkflowMemoID, "/memos/" + e.WorkflowMemoID
	case e.HoldID != "" && source != store.EdgeSourceRun:
		return e.HoldID, "/holds/" + e.HoldID
	case e.RunID != "":
		return e.RunID, "/runs/" + e.RunID
	case e.SessionID != "":
		return e.SessionID, "/sessions/" + e.SessionID
	}
	return e.Key, ""
}

// edgesLatest is how many examples per kind a workflow's Edges load sees.
const edgesLatest = 5

// edgesReport reads the report over window (an Edges load's value, e.g.
// "7d") ending now.
func (e *Engine) edgesReport(ctx context.Context, window string) (*workflow.Edges, error) {
	d, err := workflow.EdgesWindow(window)
	if err != nil {
		return nil, err
	}
	since := e.cfg.Now().Add(-d).UTC()
	edges, err := e.store.EdgeList(ctx, &store.EdgeListParams{Since: since, Latest: edgesLatest})
	if err != nil {
		return nil, err
	}
	rep := &workflow.Edges{Window: window, Since: since, Kinds: []workflow.EdgeKind{}}
	for _, ed := range edges {
		k := workflow.EdgeKind{Kind: ed.Kind, Source: ed.Source, Label: EdgeLabel(ed.Kind), Count: ed.Count}
		for _, ex := range ed.Latest {
			ref, link := EdgeRef(ed.Source, ex)
			k.Latest = append(k.Latest, workflow.EdgeExample{At: ex.At, Ref: ref, Link: link, Command: ex.Command,
				By: ex.By, Message: ex.Message})
		}
		rep.Kinds = append(rep.Kinds, k)
		rep.Total += ed.Count
	}
	return rep, nil
}

// EdgesMarkdown renders a report as the markdown list its Context entry
// (class edges) carries: one item per kind, its latest examples under it.
func EdgesMarkdown(rep *workflow.Edges) string {
	if rep == nil || len(rep.Kinds) == 0 {
		return "Nothing went unresolved in this window."
	}
	var b strings.Builder
	for _, k := range rep.Kinds {
		fmt.Fprintf(&b, "- **%s**: %d\n", k.Label, k.Count)
		for _, ex := range k.Latest {
			ref := ex.Ref
			if ref != "" {
				ref = "`" + ref + "` "
			}
			cmd := ""
			if ex.Command != "" {
				cmd = "(" + ex.Command + ") "
			}
			fmt.Fprintf(&b, "  - %s %s%s— %s\n", ex.At.UTC().Format(time.DateTime), ref, cmd, oneLine(PeopleIn(ex.Message, nil)))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// EdgeView is one kind of edge as the API and the console show it: the store's report with
// a label saying what the kind is and, on each example, the console path
// it links.
type EdgeView struct {
	Kind   string            `json:"kind"`
	Source string            `json:"source"`
	Label  string            `json:"label"`
	Count  int64             `json:"count"`
	Latest []EdgeExampleView `json:"latest"`
}

// EdgeExampleView is an example and its link.
type EdgeExampleView struct {
	*store.EdgeExample
	Link string `json:"link,omitempty"`
}

// EdgeViews labels and links an edges report.
func EdgeViews(edges []*store.Edge) []*EdgeView {
	out := make([]*EdgeView, 0, len(edges))
	for _, e := range edges {
		v := &EdgeView{Kind: e.Kind, Source: e.Source, Label: EdgeLabel(e.Kind), Count: e.Count,
			Latest: make([]EdgeExampleView, 0, len(e.Latest))}
		for _, ex := range e.Latest {
			_, link := EdgeRef(e.Source, ex)
			v.Latest = append(v.Latest, EdgeExampleView{EdgeExample: ex, Link: link})
		}
		out = append(out, v)
	}
	return out
}
