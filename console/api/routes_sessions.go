package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/holdfast-bot/holdfast/console/auth"
	"github.com/holdfast-bot/holdfast/engine/sessions"
	"github.com/holdfast-bot/holdfast/store"
)

// SessionHeader carries the session an API call belongs to (SPEC §3, agent
// tracking).
const SessionHeader = "X-Holdfast-Session"

// sessionRoutes mounts the sessions routes. Reading needs any role;
// changing a session needs steward, like every other write.
func (a *API) sessionRoutes(r chi.Router) {
	r.Route("/sessions", func(r chi.Router) {
		w := r.With(a.require(store.RoleSteward))
		r.Get("/", a.sessionList)
		w.Post("/", a.sessionCreate)
		r.Get("/resolve", a.sessionResolve)
		r.Get("/{id}", a.sessionGet)
		r.Get("/{id}/events", a.sessionEvents)
		w.Post("/{id}/messages", a.sessionMessage)
		w.Post("/{id}/commands", a.sessionCommand)
		w.Post("/{id}/fork", a.sessionFork)
		w.Post("/{id}/archive", a.sessionArchive(true))
		w.Post("/{id}/unarchive", a.sessionArchive(false))
		w.Post("/{id}/policy", a.sessionPolicy)
	})
}

// sessionInternalRoutes mounts POST /api/internal/sessions (behind the
// internal key, not an API key).
func (a *API) sessionInternalRoutes(r chi.Router) {
	r.Post("/sessions", a.internalSessionCreate)
}

// requireInternalKey guards /api/internal/*: with no key configured the
// routes do not exist (404); a wrong or missing key is 401. The compare is
// constant-time.
func (a *API) requireInternalKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.InternalKey == "" {
			WriteError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path)
			return
		}
		switch got := r.Header.Get("x-internal-key"); {
		case got == "":
			WriteError(w, http.StatusUnauthorized, "internal routes need the x-internal-key header")
			return
		case subtle.ConstantTimeCompare([]byte(got), []byte(a.InternalKey)) != 1:
			WriteError(w, http.StatusUnauthorized, "the x-internal-key header is not this server's internal key (HOLDFAST_INTERNAL_KEY)")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), internalCall{}, true)))
	})
}

// trackSession is the one place the X-Holdfast-Session header is read: every
// /api request carrying it counts against that session and stamps the
// caller, and an enqueue carrying it joins that session (SPEC §3). An
// unknown id is 404, so an agent with a stale or mistyped id hears of it at
// once instead of its activity going untracked; a caller who may not stamp
// the session (not its creator, not an admin) is 403 and nothing is counted.
// Requests on the internal routes hold the internal key, the deployment's
// own secret, and may stamp any session.
func (a *API) trackSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimSpace(r.Header.Get(SessionHeader))
		if id == "" || a.Sessions == nil {
			next.ServeHTTP(w, r)
			return
		}
		c := sessions.Caller{Admin: internal(r.Context())}
		if who := auth.From(r.Context()); who != nil {
			c.UID, c.Username, c.KeyID = who.UID(), who.Username, who.KeyID
			if c.Username == "" {
				c.Username = who.UserID
			}
			c.Admin = c.Admin || who.Role == store.RoleAdmin
		}
		switch err := a.Sessions.Track(r.Context(), id, c); {
		case errors.Is(err, store.ErrNotFound):
			WriteError(w, http.StatusNotFound, "unknown session "+strconv.Quote(id)+" in "+SessionHeader)
			return
		case errors.Is(err, store.ErrForbidden):
			WriteError(w, http.StatusForbidden, store.ReasonOf(err)+" through "+SessionHeader)
			return
		case err != nil:
			Fail(w, r, a.Log, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), trackedKey{}, id)))
	})
}

type trackedKey struct{}

// trackedSession is the session the request's X-Holdfast-Session header
// named and trackSession accepted, or "".
func trackedSession(ctx context.Context) string {
	id, _ := ctx.Value(trackedKey{}).(string)
	return id
}

// internalCall marks a request requireInternalKey let through.
type internalCall struct{}

// internal reports whether the request holds the internal key.
func internal(ctx context.Context) bool {
	ok, _ := ctx.Value(internalCall{}).(bool)
	return ok
}

func source(id *auth.Identity) sessions.Source {
	src := sessions.Source{Via: sessions.ViaConsole}
	if id != nil {
		src.UserID, src.Username, src.KeyID = id.UserID, id.Username, id.KeyID
		if id.KeyID != "" {
			src.Via = sessions.ViaAPI
		}
	}
	return src
}

type sessionCreateRequest struct {
	Title   string         `json:"title"`
	Tag     string         `json:"tag"`
	Context map[string]any `json:"context"`
}

func (a *API) sessionCreate(w http.ResponseWriter, r *http.Request) {
	var req sessionCreateRequest
	if !Decode(w, r, &req) {
		return
	}
	ses, err := a.Sessions.Create(r.Context(), sessions.CreateParams{Title: req.Title, Tag: req.Tag, Context: req.Context,
		Source: source(auth.From(r.Context()))})
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusCreated, ses)
}

// internalSessionCreate creates an agent session. An agent that also sends
// its API key (Authorization: Bearer) owns the session: that key may stamp
// it through X-Holdfast-Session. Without one only admins may.
func (a *API) internalSessionCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Purpose string `json:"purpose"`
	}
	if !Decode(w, r, &req) {
		return
	}
	src := sessions.Source{Via: sessions.ViaAPI}
	if id := auth.From(r.Context()); id != nil {
		src = source(id)
	}
	ses, err := a.Sessions.CreateAgent(r.Context(), req.Purpose, src)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusCreated, ses)
}

func (a *API) sessionList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := sessions.ListParams{Query: q.Get("q"), Cursor: q.Get("cursor")}
	for _, o := range strings.Split(q.Get("origin"), ",") {
		if o = strings.TrimSpace(o); o != "" {
			p.Origins = append(p.Origins, o)
		}
	}
	var err error
	if p.IncludeArchived, err = boolParam(q.Get("includeArchived")); err != nil {
		WriteError(w, http.StatusBadRequest, "includeArchived must be true or false")
		return
	}
	if p.Limit, err = intParam(q.Get("limit")); err != nil {
		WriteError(w, http.StatusBadRequest, "limit must be a positive number")
		return
	}
	page, err := a.Sessions.List(r.Context(), p)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, page)
}

func boolParam(s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	return strconv.ParseBool(s)
}

func intParam(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err == nil && n <= 0 {
		err = errors.New("not positive")
	}
	return n, err
}

func (a *API) sessionResolve(w http.ResponseWriter, r *http.Request) {
	tag := strings.TrimSpace(r.URL.Query().Get("tag"))
	if tag == "" {
		WriteError(w, http.StatusBadRequest, "tag is required: /api/sessions/resolve?tag=…")
		return
	}
	ses, err := a.Sessions.GetByTag(r.Context(), tag)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, ses)
}

func (a *API) sessionGet(w http.ResponseWriter, r *http.Request) {
	ses, err := a.Sessions.GetByID(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, ses)
}

func (a *API) sessionEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after time.Time
	if s := q.Get("after"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			WriteError(w, http.StatusBadRequest, "after must be an RFC 3339 time, e.g. 2026-04-15T10:30:00.123456Z")
			return
		}
		after = t
	}
	limit, err := intParam(q.Get("limit"))
	if err != nil {
		WriteError(w, http.StatusBadRequest, "limit must be a positive number")
		return
	}
	evs, err := a.Sessions.Events(r.Context(), chi.URLParam(r, "id"), after, limit)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"events": evs})
}

func (a *API) sessionMessage(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Text string `json:"text"`
	}
	if !Decode(w, r, &req) {
		return
	}
	res, err := a.Sessions.Message(r.Context(), chi.URLParam(r, "id"), req.Text, auth.From(r.Context()).Caller(), true)
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusAccepted, res)
}

func (a *API) sessionCommand(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command string `json:"command"`
	}
	if !Decode(w, r, &req) {
		return
	}
	res, err := a.Sessions.Command(r.Context(), chi.URLParam(r, "id"), req.Command, auth.From(r.Context()).Caller())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, res)
}

func (a *API) sessionFork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AtTS string `json:"atTs"`
	}
	if !Decode(w, r, &req) {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, req.AtTS)
	if err != nil {
		WriteError(w, http.StatusBadRequest, "atTs must be an RFC 3339 time (an event's ts)")
		return
	}
	ses, err := a.Sessions.Fork(r.Context(), chi.URLParam(r, "id"), at, source(auth.From(r.Context())))
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusCreated, ses)
}

func (a *API) sessionArchive(archived bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		var (
			ses *store.Session
			err error
		)
		if archived {
			ses, err = a.Sessions.Archive(r.Context(), id)
		} else {
			ses, err = a.Sessions.Unarchive(r.Context(), id)
		}
		if err != nil {
			Fail(w, r, a.Log, err)
			return
		}
		WriteJSON(w, http.StatusOK, ses)
	}
}

func (a *API) sessionPolicy(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Policy string `json:"policy"`
	}
	if !Decode(w, r, &req) {
		return
	}
	ses, err := a.Sessions.SetPolicy(r.Context(), chi.URLParam(r, "id"), req.Policy, auth.From(r.Context()).Caller())
	if err != nil {
		Fail(w, r, a.Log, err)
		return
	}
	WriteJSON(w, http.StatusOK, ses)
}
