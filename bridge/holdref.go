package bridge

import (
	"fmt"
	"strings"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// Naming a hold in a thread (SPEC §4.3): `@bot approve <short id> [comment]`
// decides the thread's open hold of that short id (engine.ShortHoldID), and
// a thread decision that cannot tell which hold is meant lists each open
// hold's short id and title. When two listed holds share a short id, the
// list shows those by full id, and the short id decides neither. The full
// id is accepted as well; both are matched in any case, and with or without
// the backticks the list shows them in.

// holdRef is ref as a thread decision reads it: lower-case, without the
// backticks a copied short id may keep.
func holdRef(ref string) string { return strings.ToLower(strings.Trim(ref, "`")) }

// holdsNamed is the holds among hs that ref names, by short id or full id.
func holdsNamed(hs []*store.Hold, ref string) []*store.Hold {
	ref = holdRef(ref)
	if ref == "" {
		return nil
	}
	var out []*store.Hold
	for _, h := range hs {
		if ref == strings.ToLower(h.ID) || ref == engine.ShortHoldID(h.ID) {
			out = append(out, h)
		}
	}
	return out
}

// isHoldID reports whether ref can only be meant as a hold's id (it begins
// as hold ids do), never as the first word of a comment.
func isHoldID(ref string) bool { return strings.HasPrefix(holdRef(ref), "hld_") }

// isShortHoldID reports whether ref has the shape of a short id (six
// characters of 0-9 and a-v), which words of a comment may have too.
func isShortHoldID(ref string) bool {
	ref = holdRef(ref)
	return len(ref) == engine.ShortHoldIDLen && strings.Trim(ref, "0123456789abcdefghijklmnopqrstuv") == ""
}

// isMistypedShortHoldID reports whether ref is shaped as a short id and
// mixes digits with letters, as nine in ten short ids do and no word that
// opens a comment does: one naming no hold is a mistyped or stale id,
// never a comment on whichever hold is open.
func isMistypedShortHoldID(ref string) bool {
	ref = holdRef(ref)
	return isShortHoldID(ref) && strings.ContainsAny(ref, "0123456789") && strings.Trim(ref, "0123456789") != ""
}

// holdList lists hs one a line, at most maxThreadHolds: each hold by what a
// thread decision takes (its short id, or its full id when another listed
// hold shares the short id), then its title, its workflow and its link in
// the console.
func (b *Bridge) holdList(hs []*store.Hold) string {
	shared := map[string]int{}
	for _, h := range hs {
		shared[engine.ShortHoldID(h.ID)]++
	}
	var sb strings.Builder
	for i, h := range hs {
		if i == maxThreadHolds {
			sb.WriteString("• … and more in the console\n")
			break
		}
		ref := engine.ShortHoldID(h.ID)
		if shared[ref] > 1 {
			ref = h.ID
		}
		fmt.Fprintf(&sb, "• `%s` — *%s* (%s, %s)\n", esc(ref), esc(engine.HoldTitle(h, nil)), esc(orDefault(h.WorkflowName, h.Command)),
			b.holdLink(h.ID, "open"))
	}
	return sb.String()
}
