package store

import (
	"context"
	"time"
)

// ConsoleSession is a signed-in browser. The cookie carries "<id>.<secret>";
// only the secret's SHA-256 hash is stored, so a leaked database cannot be
// replayed as cookies. The CSRF token lives here, server-side, so it dies
// with the session.
type ConsoleSession struct {
	ID         string
	SecretHash string
	UserID     string
	CSRFToken  string
	UserAgent  string
	IP         string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	// User is the session's user as it is now (role changes apply at once).
	User *User
}

// ConsoleStore persists console sign-in sessions (SPEC §6) and the user
// changes only the console makes.
type ConsoleStore interface {
	// ConsoleSessionCreate stores s (ID, SecretHash, UserID, CSRFToken,
	// ExpiresAt required) and returns it with its user.
	ConsoleSessionCreate(ctx context.Context, s *ConsoleSession) (*ConsoleSession, error)
	// ConsoleSessionGetByID returns an unexpired session with its user;
	// an expired or unknown one is ErrNotFound.
	ConsoleSessionGetByID(ctx context.Context, id string) (*ConsoleSession, error)
	// ConsoleSessionDelete signs a session out; deleting a missing one is not
	// an error (signing out twice is harmless).
	ConsoleSessionDelete(ctx context.Context, id string) error
	// ConsoleSessionDeleteExpired removes sessions expired before now.
	ConsoleSessionDeleteExpired(ctx context.Context, now time.Time) (int, error)
	// UserRoleSet changes a user's role.
	UserRoleSet(ctx context.Context, userID, role string) (*User, error)

	// SignInFailureList answers the failure counts of keys whose window
	// started after p.Since; keys with no such count are absent.
	SignInFailureList(ctx context.Context, p *SignInFailureListParams) ([]*SignInFailure, error)
	// SignInFailureAddMany counts one failure against each key in one
	// transaction. A key whose window started at or before p.Since starts a
	// new window at p.Now; windows that old are removed.
	SignInFailureAddMany(ctx context.Context, p *SignInFailureAddManyParams) error
	// SignInFailureDeleteMany forgets the keys' counts.
	SignInFailureDeleteMany(ctx context.Context, keys []string) error
	// UserDisabledSet disables or enables a user; disabling also ends the
	// user's sign-in sessions, in the same transaction.
	UserDisabledSet(ctx context.Context, userID string, disabled bool) (*User, error)
	// UserPasswordSet replaces a user's password hash and ends the user's
	// sign-in sessions, in the same transaction.
	UserPasswordSet(ctx context.Context, userID, passwordHash string) (*User, error)
	// ConsoleDraftCreate keeps a form's text across a redirect (d.ID,
	// SessionID and Body required); drafts older than a day are dropped.
	ConsoleDraftCreate(ctx context.Context, d *ConsoleDraft) error
	// ConsoleDraftGetByID reads a draft of the sign-in sessionID; another
	// session's draft is ErrNotFound.
	ConsoleDraftGetByID(ctx context.Context, id, sessionID string) (*ConsoleDraft, error)
}

// SignInFailure is the count of failed sign-ins under one throttle key in
// its current window. The console decides the keys and limits (SPEC §7:
// per username and address, per username, per address for unknown
// usernames); the store only counts, so every replica sees one count.
type SignInFailure struct {
	Key         string
	Failures    int
	WindowStart time.Time
}

// SignInFailureListParams reads the counts of Keys in windows started after
// Since.
type SignInFailureListParams struct {
	Keys  []string
	Since time.Time
}

// SignInFailureAddManyParams counts a failure at Now against Keys; windows
// that started at or before Since are over.
type SignInFailureAddManyParams struct {
	Keys  []string
	Now   time.Time
	Since time.Time
}

// ConsoleDraft is a form's text kept for one sign-in across a redirect;
// Body is the console's own encoding.
type ConsoleDraft struct {
	ID        string
	SessionID string
	Body      string
	CreatedAt time.Time
}
