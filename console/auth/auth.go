// Package auth carries the caller's identity through a request. Both the
// JSON API and the console set it; the engine receives it as plain values.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/holdfast-bot/holdfast/engine"
	"github.com/holdfast-bot/holdfast/store"
)

// Identity is who is calling.
type Identity struct {
	UserID      string
	Username    string
	Role        string
	SlackUserID string
	// KeyID is set when the caller used an API key, KeyName to its name.
	KeyID   string
	KeyName string
	// Cookie is true when the caller authenticated with a console cookie;
	// such requests need CSRF protection.
	Cookie bool
}

// AtLeast reports whether the caller holds role min or a stronger one.
func (i *Identity) AtLeast(min string) bool { return i != nil && store.RoleAtLeast(i.Role, min) }

// ListsUnlisted reports whether unlisted memos (dispatched outputs among
// them) appear in the caller's memo listings: for stewards and admins
// only (SPEC §7), on the console and the API alike.
func (i *Identity) ListsUnlisted() bool { return i.AtLeast(store.RoleSteward) }

// Name is how the identity appears in audit logs and transcripts.
func (i *Identity) Name() string {
	switch {
	case i == nil:
		return ""
	case i.Username != "":
		return i.Username
	default:
		return "key:" + i.KeyID
	}
}

// UID is the caller as the engine and transcripts name it: "user:<id>" for
// a console user, "key:<id>" for an API key. The engine's self-approval
// check compares it with a queue item's OwnerUID, so every surface must
// name callers the same way.
func (i *Identity) UID() string {
	switch {
	case i == nil:
		return ""
	case i.UserID != "":
		return "user:" + i.UserID
	case i.KeyID != "":
		return "key:" + i.KeyID
	default:
		return ""
	}
}

// Caller is the identity as the engine takes it: acting through the
// console when signed in with a cookie, else through the API.
func (i *Identity) Caller() engine.Decider {
	if i == nil {
		return engine.Decider{}
	}
	via := "api"
	if i.Cookie {
		via = "console"
	}
	d := engine.Decider{UserID: i.UserID, Username: i.Username, Role: i.Role, SlackUserID: i.SlackUserID, KeyID: i.KeyID, Via: via}
	if i.KeyID != "" && i.KeyName != "" {
		// A key's name is what its owner chose to know it by; its id
		// means nothing to a reader of a card or a transcript.
		d.DisplayName = "API key “" + i.KeyName + "”"
	}
	return d
}

type ctxKey struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the identity in ctx, or nil.
func From(ctx context.Context) *Identity {
	id, _ := ctx.Value(ctxKey{}).(*Identity)
	return id
}

// NewAPIKey returns a random 32-byte key and the SHA-256 hash to store.
// High-entropy keys need no slow hash (SPEC §1).
func NewAPIKey() (key, hash string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	key = "hf_" + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashKey(key)
}

// HashKey is the lookup hash of an API key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// BearerToken reads an Authorization header's bearer token. The scheme is
// matched without regard to case (RFC 9110 §11.1), so "bearer" and
// "BEARER" clients are not told their key is wrong.
func BearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
