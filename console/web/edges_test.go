package web_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

func TestEdgesPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	viewer := b.signedIn(t, store.RoleViewer)

	status, page := viewer.get("/edges")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Nothing went unresolved in this window.")
	require.Contains(t, page, `href="/edges"`, "the nav links the page")

	// A refused decision and a broken workflow, then the page lists them
	// with links, and the week's tokens.
	_, hold := b.heldRun(t, "user:someone", "otters")
	_, err := b.eng.Decide(ctx, engine.DecideParams{HoldID: hold.ID, Decision: "approve",
		Decider: engine.Decider{SlackUserID: "UNOBODY", Via: "slack"}})
	require.ErrorIs(t, err, store.ErrForbidden)
	_, _, err = b.lib.ImportWorkflow(ctx, "", "# Broken\n\n## Trigger\n- **Command** `/broken`\n")
	require.NoError(t, err)

	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/edges", "Decision attempts refused", http.StatusOK},
		{"/edges?since=" + url.QueryEscape("24h"), `href="/holds/` + hold.ID + `"`, http.StatusOK},
		{"/edges?since=30d", `href="/workflows/broken"`, http.StatusOK},
		{"/edges", "Tokens by workflow", http.StatusOK},
		{"/edges", `href="/workflows/draft-memo"`, http.StatusOK},
		{"/edges?since=soon", "is neither an RFC 3339 time nor a duration", http.StatusBadRequest},
	} {
		status, page := viewer.get(tc.path)
		require.Equal(t, tc.status, status, tc.path)
		require.Contains(t, page, tc.want, tc.path)
	}
}
