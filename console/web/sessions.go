package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/transcript"
	"github.com/holdfast-bot/holdfast/templates"
)

// allOrigins is the order of the origin toggles.
var allOrigins = []string{store.OriginUser, store.OriginChannel, store.OriginWorkflow, store.OriginAPI, store.OriginAgent}

// transcriptWindow is how many of the newest events a session page shows.
const transcriptWindow = 300

func (c *Console) sessionRoutes(r chi.Router) {
	r.Get("/sessions", c.sessionList)
	r.Get("/sessions/{id}", c.sessionShow)
	r.Get("/sessions/{id}/events", c.sessionEvents)
	r.Group(func(r chi.Router) {
		r.Use(c.requireRole(store.RoleSteward))
		r.Post("/sessions", c.sessionCreate)
		r.Post("/sessions/{id}/messages", c.sessionMessage)
		r.Post("/sessions/{id}/commands", c.sessionCommand)
		r.Post("/sessions/{id}/fork", c.sessionFork)
		r.Post("/sessions/{id}/archive", c.sessionArchive(true))
		r.Post("/sessions/{id}/unarchive", c.sessionArchive(false))
		r.Post("/sessions/{id}/policy", c.sessionPolicy)
	})
}

// actorOf is how a console user appears in transcripts and as a queue
// item's owner, the same form the API uses.
func actorOf(r *http.Request) string { return identity(r).UID() }

// sessionFilter is the listing's state, all of it kept in the URL.
type sessionFilter struct {
	origins  []string
	query    string
	archived bool
	cursor   string
}

func parseSessionFilter(q url.Values) sessionFilter {
	f := sessionFilter{query: strings.TrimSpace(q.Get("q")), archived: q.Get("archived") == "1", cursor: q.Get("cursor")}
	raw, present := q["origin"]
	if !present {
		f.origins = append([]string(nil), sessions.DefaultOrigins...)
		return f
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(strings.Join(raw, ","), ",") {
		// An unknown origin is kept, for the listing to refuse (400).
		if part = strings.TrimSpace(part); part != "" && !seen[part] {
			seen[part] = true
			f.origins = append(f.origins, part)
		}
	}
	return f
}

func (f sessionFilter) has(origin string) bool {
	for _, o := range f.origins {
		if o == origin {
			return true
		}
	}
	return false
}

// url renders the filter in canonical order; origins are always explicit
// so that toggling every origin off stays off.
func (f sessionFilter) url() templ.SafeURL {
	q := url.Values{}
	var on []string
	for _, o := range allOrigins {
		if f.has(o) {
			on = append(on, o)
		}
	}
	q.Set("origin", strings.Join(on, ","))
	if f.query != "" {
		q.Set("q", f.query)
	}
	if f.archived {
		q.Set("archived", "1")
	}
	if f.cursor != "" {
		q.Set("cursor", f.cursor)
	}
	return templ.SafeURL("/sessions?" + q.Encode())
}

func (f sessionFilter) toggled(origin string) sessionFilter {
	g := f
	g.cursor = ""
	g.origins = nil
	for _, o := range f.origins {
		if o != origin {
			g.origins = append(g.origins, o)
		}
	}
	if !f.has(origin) {
		g.origins = append(g.origins, origin)
	}
	return g
}

func (f sessionFilter) isDefault() bool {
	return f.query == "" && !f.archived && len(f.origins) == 2 && f.has(store.OriginUser) && f.has(store.OriginChannel)
}

// badge is what a session's origin badge says: the platform for channel
// sessions ("Slack"), else the origin.
func badge(s *store.Session) string {
	if s.Origin == store.OriginChannel && s.Platform != "" {
		if s.Platform == "slack" {
			return "Slack"
		}
		return strings.ToUpper(s.Platform[:1]) + s.Platform[1:]
	}
	return s.Origin
}

func sessionTitle(s *store.Session) string {
	switch {
	case strings.TrimSpace(s.Title) != "":
		return s.Title
	case len(s.Tags) > 0:
		return s.Tags[0]
	default:
		return "Untitled session"
	}
}

func sessionURL(id string) templ.SafeURL { return templ.SafeURL("/sessions/" + id) }

// sessionsView builds the listing; it is separate from the handler so the
// benchmark can time exactly what a request does.
func (c *Console) sessionsView(ctx context.Context, f sessionFilter) (templates.SessionsView, error) {
	v := templates.SessionsView{Query: f.query, IncludeArchived: f.archived, Filtered: !f.isDefault()}
	for _, o := range allOrigins {
		v.Toggles = append(v.Toggles, templates.OriginToggle{Origin: o, Label: o, On: f.has(o), URL: f.toggled(o).url()})
	}
	var on []string
	for _, o := range allOrigins {
		if f.has(o) {
			on = append(on, o)
		}
	}
	v.Origins = strings.Join(on, ",")
	arch := f
	arch.archived, arch.cursor = !f.archived, ""
	v.ArchivedURL = arch.url()
	if len(f.origins) == 0 {
		return v, nil
	}
	page, err := c.Sessions.List(ctx, sessions.ListParams{Origins: f.origins, IncludeArchived: f.archived, Query: f.query, Cursor: f.cursor})
	if err != nil {
		return v, err
	}
	for _, s := range page.Sessions {
		row := templates.SessionRow{ID: s.ID, URL: sessionURL(s.ID), Title: sessionTitle(s), Origin: s.Origin, Badge: badge(s),
			Capabilities: s.Capabilities, Status: s.Status, Archived: s.Archived, Events: s.EventCount,
			EventsText: plural(s.EventCount, "event"), LastActive: c.ago(s.LastActiveAt)}
		if len(s.Tags) > 0 && s.Tags[0] != row.Title {
			row.Tag = s.Tags[0]
		}
		v.Rows = append(v.Rows, row)
	}
	if page.Next != "" {
		next := f
		next.cursor = page.Next
		v.NextURL = next.url()
	}
	if f.cursor != "" {
		first := f
		first.cursor = ""
		v.FirstURL = first.url()
	}
	return v, nil
}

func (c *Console) sessionList(w http.ResponseWriter, r *http.Request) {
	v, err := c.sessionsView(r.Context(), parseSessionFilter(r.URL.Query()))
	if errors.Is(err, store.ErrInvalid) {
		c.errorPage(w, r, http.StatusBadRequest, "Bad request", store.ReasonOf(err))
		return
	} else if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Page = c.page(w, r, "Sessions", "sessions")
	c.render(w, r, http.StatusOK, templates.SessionsPage(v))
}

func (c *Console) sessionCreate(w http.ResponseWriter, r *http.Request) {
	title := strings.TrimSpace(r.PostFormValue("title"))
	if title == "" {
		title = "Console session " + c.Now().UTC().Format("2 Jan 15:04")
	}
	s, err := c.openSession(r, title)
	if err != nil {
		c.sessionFail(w, r, "/sessions", err)
		return
	}
	c.redirect(w, r, "/sessions/"+s.ID, "Session started. Write below to talk to Holdfast.", false)
}

// openSession starts a console session for the signed-in user. A session
// is listed only once it has events, so it starts with one saying who
// opened it.
func (c *Console) openSession(r *http.Request, title string) (*store.Session, error) {
	id := identity(r)
	return c.Sessions.Create(r.Context(), sessions.CreateParams{Title: title,
		Source: sessions.Source{Via: sessions.ViaConsole, UserID: id.UserID, Username: id.Username},
		Events: []*store.EventAppendParams{transcript.EncodePtr(transcript.Context{Fields: map[string]any{"openedBy": id.Username, "via": "console"}},
			actorOf(r))}})
}

// sessionFail turns a client mistake into a flash on the page the form
// came from; anything else is an error page.
func (c *Console) sessionFail(w http.ResponseWriter, r *http.Request, back string, err error) {
	if _, ok := refusalStatus(err); ok {
		c.redirect(w, r, back, store.ReasonOf(err), true)
		return
	}
	c.fail(w, r, err)
}

func (c *Console) sessionShow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	s, err := c.Sessions.GetByID(ctx, chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	evs, err := c.Store.EventList(ctx, &store.EventListParams{SessionID: s.ID, Newest: true, Limit: transcriptWindow})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page := c.page(w, r, sessionTitle(s), "sessions")
	canAct := page.Viewer.CanAct
	v := templates.SessionView{Page: page, ID: s.ID, Title: sessionTitle(s), Status: s.Status,
		Origin: s.Origin, Badge: badge(s), Tags: s.Tags, Capabilities: s.Capabilities, Policy: sessions.NormalizePolicy(s.Policy),
		Policies: []string{store.PolicyManual, store.PolicyAuto, store.PolicyYolo}, Archived: s.Archived,
		RequestCount: s.RequestCount, Created: c.ago(s.CreatedAt), LastActive: c.ago(s.LastActiveAt)}
	// A session's runs are few; their recorded tokens are summed here rather
	// than by a usage query over all time.
	runs, err := c.Store.RunList(ctx, &store.RunListParams{SessionID: s.ID, Limit: 500})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var used store.Usage
	for _, run := range runs {
		used.Runs, used.TokensIn, used.TokensOut = used.Runs+1, used.TokensIn+run.TokensIn, used.TokensOut+run.TokensOut
	}
	v.Usage = usagePhrase(used, "")
	if s.ForkedFrom != "" {
		v.ForkedFrom = &templates.Link{Label: s.ForkedFrom, URL: sessionURL(s.ForkedFrom)}
	}
	if s.ActiveRunID != "" && !strings.HasPrefix(s.ActiveRunID, "turn_") {
		// A chat turn is no workflow run and has no run page.
		v.ActiveRun = &templates.Link{Label: "the running workflow run", URL: runURL(s.ActiveRunID)}
	}
	if len(s.Context) > 0 {
		b, _ := json.MarshalIndent(s.Context, "", "  ")
		v.Context = string(b)
	}
	v.OpenHolds = c.sessionOpenHolds(ctx, s.ID)
	v.SlackURL = c.slackURL(ctx, s)
	v.RunsURL = templ.SafeURL("/runs?sessionId=" + url.QueryEscape(s.ID))
	// Anyone who may act may write to any session, as through the API; in
	// a Slack-bound one the bridge posts the message into the thread,
	// attributed (SPEC §5).
	v.CanMessage = canAct
	if canAct && s.Origin == store.OriginChannel {
		v.MessageHint = "Messages sent here are posted into its " + badge(s) + " thread, attributed to you."
	}
	names := c.userNames(ctx)
	v.DoneReason = peopleIn(s.DoneReason, names)
	for _, e := range evs {
		v.Events = append(v.Events, c.eventView(ctx, e, names, canAct, page.CSRF))
	}
	if s.EventCount > int64(len(evs)) {
		v.Older = fmt.Sprintf("Showing the latest %d of %d events.", len(evs), s.EventCount)
	}
	v.Poll = pollView(s.ID, lastTS(evs), s.Status)
	c.render(w, r, http.StatusOK, templates.SessionPage(v))
}

// pollView is the transcript's next poll: after the last event shown, with
// the status shown, so a status that moves without an event of its own (a
// cancelled turn, a turn settled between the page's two reads) still
// reaches the page.
func pollView(sessionID string, after time.Time, status string) templates.PollView {
	q := url.Values{}
	if !after.IsZero() {
		q.Set("after", after.UTC().Format(time.RFC3339Nano))
	}
	q.Set("status", status)
	return templates.PollView{URL: "/sessions/" + sessionID + "/events?" + q.Encode()}
}

// lastTS is the time of the last event in evs (zero when there is none).
func lastTS(evs []*store.Event) time.Time {
	if len(evs) == 0 {
		return time.Time{}
	}
	return evs[len(evs)-1].TS
}

// sessionEvents answers the transcript's poll: 204 when nothing is new (no
// event, the status as shown; htmx then leaves the page alone), else the
// new events, the status and a new tail.
func (c *Console) sessionEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := chi.URLParam(r, "id")
	var after time.Time
	if a := r.URL.Query().Get("after"); a != "" {
		t, err := time.Parse(time.RFC3339Nano, a)
		if err != nil {
			http.Error(w, "after must be an RFC 3339 time", http.StatusBadRequest)
			return
		}
		after = t
	}
	evs, err := c.Sessions.Events(ctx, id, after, sessions.DefaultEventPage)
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, "no such session", http.StatusNotFound)
		return
	} else if err != nil {
		c.fail(w, r, err)
		return
	}
	s, err := c.Sessions.GetByID(ctx, id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if len(evs) == 0 && s.Status == r.URL.Query().Get("status") {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if len(evs) > 0 {
		after = lastTS(evs)
	}
	cur := from(ctx)
	names := c.userNames(ctx)
	views := make([]templates.EventView, 0, len(evs))
	for _, e := range evs {
		views = append(views, c.eventView(ctx, e, names, cur.id.AtLeast(store.RoleSteward), cur.session.CSRFToken))
	}
	c.render(w, r, http.StatusOK, templates.EventsFragment(views, pollView(id, after, s.Status), s.Status))
}

// userNames maps "user:<id>" actors to usernames for display.
func (c *Console) userNames(ctx context.Context) map[string]string {
	out := map[string]string{}
	users, err := c.Store.UserList(ctx)
	if err != nil {
		return out
	}
	for _, u := range users {
		out["user:"+u.ID] = u.Username
	}
	// Slack users by the name the bridge cached for them (the one their
	// messages show).
	if slack, err := c.Store.SlackUserList(ctx); err == nil {
		for _, u := range slack {
			if u.Name != "" {
				out["slack:"+u.ID] = u.Name
			}
		}
	}
	// API keys by the name their owner gave them, under both ids the
	// engine writes for a key: an owner's key:<id> and a decider's.
	if keys, err := c.Store.APIKeyList(ctx); err == nil {
		for _, k := range keys {
			out["key:"+k.ID] = "API key “" + k.Name + "”"
		}
	}
	return out
}

func str(m map[string]any, k string) string {
	switch v := m[k].(type) {
	case string:
		return v
	case nil:
		return ""
	case float64:
		return fmt.Sprint(v)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func runURL(id string) templ.SafeURL  { return templ.SafeURL("/runs/" + id) }
func holdURL(id string) templ.SafeURL { return templ.SafeURL("/holds/" + id) }

// eventView digests one event for display by its type.
func (c *Console) eventView(ctx context.Context, e *store.Event, names map[string]string, canFork bool, csrf string) templates.EventView {
	actor := peopleIn(e.Actor, names) // "slack:U1" is Slack user U1; "engine" stays the engine
	if n, ok := names[e.Actor]; ok {
		actor = n
	}
	te := transcript.Read(ctx, c.Log, e)
	if _, said, _, _ := transcript.MessageOf(e); said.Speaker != "" {
		actor = said.Speaker // the display name recorded with the message (SPEC §3)
	}
	v := templates.EventView{ID: e.ID, Type: e.Type, Kind: "system", Actor: actor, When: c.ago(e.TS),
		TS: e.TS.UTC().Format(time.RFC3339Nano), CanFork: canFork, ForkURL: "/sessions/" + e.SessionID + "/fork", CSRF: csrf}
	p := e.Payload
	runLink := func() {
		if id := transcript.RunOf(te); id != "" {
			v.Links = append(v.Links, templates.Link{Label: "Open run", URL: runURL(id)})
		}
	}
	switch ev := te.(type) {
	case transcript.UserMessage:
		v.Kind, v.Text = "message", ev.Text
	case transcript.AssistantMessage:
		v.Kind, v.HTML = "message", renderMarkdown(ev.Text)
		runLink()
	case transcript.MessageEdited:
		// Slack edits: the first text stays where it was said (the
		// transcript is append-only); the conversation reads this one.
		v.Text = "Edited a message to read: “" + ev.Text + "”"
	case transcript.MessageDeleted:
		v.Text = "Deleted a message; the conversation leaves it out"
	case transcript.Command:
		v.Text = "Command " + ev.Command
	case transcript.PolicySet:
		v.Text = "Posture set to " + ev.Policy
	case transcript.CompactSummary:
		v.Text = "Summary of the conversation so far:"
		v.HTML = renderMarkdown(ev.Text)
	case transcript.ActionPlan:
		var b strings.Builder
		for i, s := range ev.Steps {
			fmt.Fprintf(&b, "%d. **%s** %s\n", i+1, s.Title, s.Description)
		}
		v.Text, v.HTML = "Plan", renderMarkdown(b.String())
	case transcript.ToolResult:
		// A chat turn's tool call and its result (SPEC §3).
		v.Text = "Tool " + ev.ToolID
		for _, f := range []struct {
			k string
			v map[string]any
		}{{"tool_input", ev.ToolInput}, {"result", ev.Result}} {
			b, _ := json.Marshal(f.v)
			v.Fields = append(v.Fields, [2]string{f.k, string(b)})
		}
	case transcript.RunStarted:
		v.Text = "Run started: " + ev.Command
		runLink()
	case transcript.RunStep:
		v.Text = fmt.Sprintf("Step %d %s: %s", ev.Step, ev.Kind, ev.Status)
	case transcript.HoldOpened:
		v.Kind = "hold"
		card := &templates.HoldCard{URL: holdURL(ev.HoldID), Command: ev.Command, GateLabel: ev.GateLabel,
			Status: "open", Preview: renderMarkdown(ev.Preview)}
		if card.GateLabel == "" {
			card.GateLabel = "Hold"
		}
		c.holdCardStatus(ctx, card, ev.HoldID, names)
		v.Hold = card
		runLink()
	case transcript.HoldDecided:
		v.Text = fmt.Sprintf("Hold %s by %s via %s", ev.Status, requester(ev.DecidedBy, names), ev.DecidedVia)
		if ev.Comment != "" {
			v.Text += ": “" + ev.Comment + "”"
		}
		if ev.HoldID != "" {
			v.Links = append(v.Links, templates.Link{Label: "Hold", URL: holdURL(ev.HoldID)})
		}
	case transcript.MemoDispatched:
		v.Text = "Memo published: " + ev.Title
		if ev.MemoID != "" {
			v.Links = append(v.Links, templates.Link{Label: "Open memo", URL: memoURL(ev.MemoID)})
		}
		runLink()
	case transcript.RunFinished:
		v.Text = "Run " + ev.Status
		if ev.ErrorKind != "" && ev.ErrorKind != ev.Status {
			v.Text += " (" + ev.ErrorKind + ")"
		}
		if rest, ok := strings.CutPrefix(ev.Error, "run "+ev.Status+" "); ok {
			v.Text += " " + peopleIn(rest, names) // "run cancelled by …" goes on the line's own "cancelled"
		} else if ev.Error != "" {
			v.Text += ": " + peopleIn(ev.Error, names)
		}
		runLink()
	default:
		// Context, reminders, partial approvals and types this version
		// does not know: their keys as written.
		keys := make([]string, 0, len(p))
		for k := range p {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v.Fields = append(v.Fields, [2]string{k, str(p, k)})
		}
	}
	return v
}

func (c *Console) sessionMessage(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	back := "/sessions/" + id
	if _, err := c.Sessions.Message(r.Context(), id, r.PostFormValue("text"), identity(r).Caller(), true); err != nil {
		c.sessionFail(w, r, back, err)
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func (c *Console) sessionCommand(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	res, err := c.Sessions.Command(r.Context(), id, r.PostFormValue("command"), identity(r).Caller())
	if err != nil {
		c.sessionFail(w, r, "/sessions/"+id, err)
		return
	}
	msg := res.Command + " done."
	if res.Command == sessions.CmdTerminate {
		msg = sessions.CommandAnswer(res)
	}
	c.redirect(w, r, "/sessions/"+id, msg, false)
}

func (c *Console) sessionFork(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	at, err := time.Parse(time.RFC3339Nano, r.PostFormValue("at_ts"))
	if err != nil {
		c.redirect(w, r, "/sessions/"+id, "Choose an event to fork at.", true)
		return
	}
	u := identity(r)
	s, err := c.Sessions.Fork(r.Context(), id, at, sessions.Source{Via: sessions.ViaConsole, UserID: u.UserID, Username: u.Username})
	if err != nil {
		c.sessionFail(w, r, "/sessions/"+id, err)
		return
	}
	c.redirect(w, r, "/sessions/"+s.ID, "Forked from "+id+".", false)
}

func (c *Console) sessionArchive(archive bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		var err error
		if archive {
			_, err = c.Sessions.Archive(r.Context(), id)
		} else {
			_, err = c.Sessions.Unarchive(r.Context(), id)
		}
		if err != nil {
			c.sessionFail(w, r, "/sessions/"+id, err)
			return
		}
		msg := "Archived: hidden from the listing unless archived sessions are shown."
		if !archive {
			msg = "Unarchived."
		}
		c.redirect(w, r, "/sessions/"+id, msg, false)
	}
}

func (c *Console) sessionPolicy(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	s, err := c.Sessions.SetPolicy(r.Context(), id, r.PostFormValue("policy"), identity(r).Caller())
	if err != nil {
		c.sessionFail(w, r, "/sessions/"+id, err)
		return
	}
	c.redirect(w, r, "/sessions/"+id, "Posture is now "+s.Policy+".", false)
}

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
