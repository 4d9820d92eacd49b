package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/store"
)

// TestSessionListSearchIsExact pages the text filter over sessions whose
// activity spans many minutes and has moved (new events, touches within and
// across minutes, renames, archiving) and compares every page with a plain
// scan: the activity-keyed trigram index must find exactly the sessions a
// substring match on title or tags finds, in the listing's order — tags as
// people search them, an engine-minted workflow:<item id> as "workflow:".
func TestSessionListSearchIsExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openBench(t)
	seedSessions(t, db, 3_000) // one second apart: 50 minutes of activity
	// Rebuild the index as upgrading a database with sessions does: the
	// triggers below must re-key the entries the migration wrote.
	// Engine-minted sessions carry workflow:<item id>; one also has a tag of
	// its own.
	_, err := db.w.Exec(`UPDATE sessions SET tags = '["workflow:itm_' || printf('%08dQZ', rowid) || '"]' WHERE origin = 'workflow' AND rowid % 2 = 0`)
	require.NoError(t, err)
	_, err = db.w.Exec(`UPDATE sessions SET tags = '["brief:otters","workflow:itm_00000042QZ"]' WHERE id = 'ses_00000046'`)
	require.NoError(t, err)
	rebuild, err := migrationFS.ReadFile("migrations/028_sessions_search_skips_item_tags.sql")
	require.NoError(t, err)
	_, err = db.w.Exec(string(rebuild))
	require.NoError(t, err)
	_, _, err = db.SessionUpdate(ctx, &store.SessionUpdateParams{ID: "ses_00000056", Title: ptr("Workflow otters")})
	require.NoError(t, err)
	// Shuffle activity: some sessions move within their minute, others
	// across many minutes, forwards and back.
	_, err = db.w.Exec(`UPDATE sessions SET last_active_at = strftime('%Y-%m-%dT%H:%M:%S.000000Z', 1767225600 + (rowid * 7919) % 3000, 'unixepoch')
		WHERE rowid % 3 = 0`)
	require.NoError(t, err)
	_, err = db.w.Exec(`UPDATE sessions SET last_active_at = substr(last_active_at, 1, 17) || '59.999999Z' WHERE rowid % 5 = 0`)
	require.NoError(t, err)
	// A busy minute: 400 sessions active within it, more than a page plus
	// searchStreamSlack.
	_, err = db.w.Exec(`UPDATE sessions SET last_active_at = strftime('%Y-%m-%dT%H:%M', 1767225600 + 1200, 'unixepoch') || printf(':%02d.%06dZ', (rowid * 13) % 60, rowid)
		WHERE rowid BETWEEN 1000 AND 1400`)
	require.NoError(t, err)
	for _, id := range []string{"ses_00000012", "ses_00000150", "ses_00002003"} {
		_, err := db.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Type: store.EventUserMessage})
		require.NoError(t, err)
	}
	for _, id := range []string{"ses_00000011", "ses_00001500"} {
		_, _, err := db.SessionUpdate(ctx, &store.SessionUpdateParams{ID: id, Title: ptr("Renamed Otter")})
		require.NoError(t, err)
	}
	_, _, err = db.SessionUpdate(ctx, &store.SessionUpdateParams{ID: "ses_00000100", Archived: ptr(true)})
	require.NoError(t, err)

	all := []string{"user", "channel", "workflow", "api", "agent"}
	for _, q := range []string{"Session 1", "session 12", "SSION 29", "c1:2", "renamed otter", "ion", "Session 150", "no such thing",
		"workflow", "workflow:", "flow", "otters", "brief:otters", "itm_", "QZ", "Z", "wo"} {
		for _, origins := range [][]string{{"user", "channel"}, {"workflow"}, all} {
			for _, archived := range []bool{false, true} {
				for _, limit := range []int{7, 51} {
					name := fmt.Sprintf("%s/%s/archived=%v/limit=%d", q, strings.Join(origins, ","), archived, limit)
					var want []string
					args := []any{"%" + likeEscape(q) + "%", "%" + likeEscape(q) + "%", boolInt(archived)}
					for _, o := range origins {
						args = append(args, o)
					}
					rows, err := db.r.Query(`SELECT id FROM sessions NOT INDEXED WHERE (title LIKE ? ESCAPE '\' OR `+peopleSearch+` LIKE ? ESCAPE '\')
						AND event_count > 0 AND archived <= ? AND origin IN (?`+strings.Repeat(", ?", len(origins)-1)+`)
						ORDER BY last_active_at DESC, id DESC`, args...)
					require.NoError(t, err)
					for rows.Next() {
						var id string
						require.NoError(t, rows.Scan(&id))
						want = append(want, id)
					}
					require.NoError(t, rows.Err())

					var got []string
					var after *store.SessionCursor
					for {
						page, err := db.SessionList(ctx, &store.SessionListParams{Origins: origins, IncludeArchived: archived, Query: q, Limit: limit, After: after})
						require.NoError(t, err, name)
						require.LessOrEqual(t, len(page), limit, name)
						for _, s := range page {
							got = append(got, s.ID)
						}
						if len(page) < limit {
							break
						}
						last := page[len(page)-1]
						after = &store.SessionCursor{LastActiveAt: last.LastActiveAt, ID: last.ID}
					}
					require.Equal(t, want, got, name)
				}
			}
		}
	}
}

// peopleSearch is the tags people search, written apart from the store's
// searchTagsSQL: the tags with workflow:<item id> as "workflow:".
// Fixture item ids are 10 characters.
const peopleSearch = `replace(tags, 'workflow:itm_' || substr(tags, instr(tags, 'workflow:itm_') + 13, 10), 'workflow:')`

func ptr[T any](v T) *T { return &v }
