// Package paging reads the listing and report parameters the JSON API and
// the console share: keyset paging of the runs and holds listings (`limit`,
// `cursor`, the opaque `next`) and the time window of reports (`since`).
package paging

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-bot/holdfast/engine/workflow"
	"github.com/holdfast-bot/holdfast/store"
)

// Page sizes of the runs and holds listings (SPEC §7: paged lists answer
// `next`, empty on the last page).
const (
	DefaultSize = 50
	MaxSize     = 200
)

// Params reads a listing's `limit` and `cursor` query parameters.
func Params(q url.Values) (limit int, after *store.ListCursor, err error) {
	limit = DefaultSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxSize {
			return 0, nil, store.Refuse(store.ErrInvalid, "limit must be a whole number from 1 to %d", MaxSize)
		}
		limit = n
	}
	if c := q.Get("cursor"); c != "" {
		if after, err = DecodeCursor(c); err != nil {
			return 0, nil, err
		}
	}
	return limit, after, nil
}

// EncodeCursor makes the opaque `next` value for a listing whose last shown
// row was created at createdAt with id.
func EncodeCursor(createdAt time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(createdAt.UTC().Format(time.RFC3339Nano) + "|" + id))
}

// DecodeCursor reads a `next` value back; anything else is the client's
// error, never a silent first page.
func DecodeCursor(c string) (*store.ListCursor, error) {
	if raw, err := base64.RawURLEncoding.DecodeString(c); err == nil {
		ts, id, ok := strings.Cut(string(raw), "|")
		if t, perr := time.Parse(time.RFC3339Nano, ts); ok && perr == nil && id != "" {
			return &store.ListCursor{CreatedAt: t, ID: id}, nil
		}
	}
	return nil, store.Refuse(store.ErrInvalid, "malformed cursor %q (pass back the listing's next value)", c)
}

// DefaultWindow is how far back edges and usage look when since is not
// given: a week, the window the weekly digest reports.
const DefaultWindow = 7 * 24 * time.Hour

// Since reads a since parameter: an RFC 3339 time, or a duration back
// from now ("7d", "36h", "90m"); empty is DefaultWindow back from now.
func Since(v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return now.Add(-DefaultWindow).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	d, err := workflow.EdgesWindow(v)
	if err != nil || d <= 0 {
		return time.Time{}, store.Refuse(store.ErrInvalid, "since %q is neither an RFC 3339 time nor a duration back from now like 7d or 24h", v)
	}
	return now.Add(-d).UTC(), nil
}

var runStatuses = map[string]bool{store.RunRunning: true, store.RunSuspended: true, store.RunSucceeded: true,
	store.RunFailed: true, store.RunCancelled: true, store.RunRecoveryExhausted: true}

// RunFilter reads GET /api/runs's filters (also the console's Runs page):
// status, workflow (a command, with or without its slash), sessionId and q
// (text in the title or brief).
func RunFilter(q url.Values) (*store.RunListParams, error) {
	p := &store.RunListParams{Status: q.Get("status"), SessionID: strings.TrimSpace(q.Get("sessionId")),
		Query: strings.TrimSpace(q.Get("q"))}
	if p.Status != "" && !runStatuses[p.Status] {
		return nil, store.Refuse(store.ErrInvalid, "status must be one of running, suspended, succeeded, failed, cancelled, recovery_exhausted")
	}
	if wf := strings.TrimSpace(q.Get("workflow")); wf != "" {
		p.Command = "/" + strings.TrimPrefix(wf, "/")
	}
	if len(p.Query) > 1000 {
		return nil, store.Refuse(store.ErrInvalid, "q is at most 1,000 characters")
	}
	return p, nil
}
