package store

import (
	"context"
	"time"
)

// SlackStore persists the Slack bridge's durable inbox and outbox (SPEC §5)
// and the cursor with which the bridge follows Slack sessions' transcripts.
type SlackStore interface {
	// SlackInboxAdd stores raw inbound deliveries in one transaction, before
	// they are acknowledged. A key already stored is skipped: added[i] is false
	// for it, so a Slack retry of the same event_id is processed once.
	SlackInboxAdd(ctx context.Context, items []*SlackInboxAddParams) (added []bool, err error)
	// SlackInboxPending lists unprocessed deliveries, oldest first, held or
	// not (for inspection; processing claims them with SlackInboxClaim).
	SlackInboxPending(ctx context.Context, limit int) ([]*SlackInboxItem, error)
	// SlackInboxClaim claims, for p.Holder until p.Until, each thread's
	// oldest unprocessed delivery that nobody holds (or whose claim has
	// expired, or whose retry time has come), at most p.Limit, oldest first,
	// in one statement. Replicas that each claim so process every delivery
	// once and a thread's deliveries in arrival order, while other threads
	// proceed: a thread's next delivery is not claimable until its head is
	// done.
	SlackInboxClaim(ctx context.Context, p *SlackClaimParams) ([]*SlackInboxItem, error)
	// SlackInboxExtend moves a held claim's expiry to until, so a long
	// handling (a chat turn) keeps its delivery; ErrConflict when the claim
	// is no longer held (it expired and another holder took the delivery, or
	// it was processed).
	SlackInboxExtend(ctx context.Context, id int64, claim SlackClaim, until time.Time) error
	// SlackInboxRelease gives a claimed delivery back unprocessed, claimable
	// again from p.Next; p.Failed counts the attempt and keeps p.Error.
	// ErrConflict when the claim is no longer held.
	SlackInboxRelease(ctx context.Context, p *SlackInboxReleaseParams) error
	// SlackInboxDone marks a delivery processed; errMsg records why
	// processing gave up on it (empty when it succeeded). It is a
	// compare-and-set on the delivery being unprocessed (ErrNotFound after).
	SlackInboxDone(ctx context.Context, id int64, errMsg string) error
	// SlackInboxAppendEvent appends ev to a session's transcript and marks
	// the delivery processed in the same transaction, so a crash can neither
	// lose nor repeat the transcript line.
	SlackInboxAppendEvent(ctx context.Context, inboxID int64, ev *EventAppendParams) (*Event, error)
	// SlackEventAppendOnce appends ev, its payload stamped slackEventId, to
	// its session's transcript unless it appended a line of ev's type for
	// that slackEventId to that session before; added reports whether it
	// appended. The check costs the same however long the transcript is.
	// A delivery whose effects follow its transcript line (a mention
	// command) records it so: replayed after a crash, it records it once.
	SlackEventAppendOnce(ctx context.Context, slackEventID string, ev *EventAppendParams) (added bool, err error)

	// SlackOutboxAdd queues Slack writes; a message whose DedupeKey is already
	// queued is skipped. Answers how many were new.
	SlackOutboxAdd(ctx context.Context, msgs []*SlackOutboxAddParams) (int, error)
	// SlackOutboxClaim claims, for p.Holder until p.Until, each queue's
	// oldest pending message when it is due at p.Now and nobody holds it (or
	// its claim has expired), at most p.Limit, oldest first, in one
	// statement. Only a queue's head is ever claimable, and it stays the head
	// until it is sent or failed, so however many replicas send, a thread's
	// messages go out one at a time and in order while other threads
	// proceed; a head whose holder died is taken over once its claim expires
	// (the attempt on record then makes the new holder look it up in Slack
	// before posting it again).
	SlackOutboxClaim(ctx context.Context, p *SlackClaimParams) ([]*SlackOutboxMsg, error)
	// SlackOutboxNextDue answers when the earliest queue head is due, or its
	// claim expires if it is held (ErrNotFound when nothing is pending).
	SlackOutboxNextDue(ctx context.Context) (time.Time, error)
	// SlackOutboxGetByKey reads a message by its dedupe key.
	SlackOutboxGetByKey(ctx context.Context, key string) (*SlackOutboxMsg, error)
	// SlackOutboxAttempt records, durably and before the call, that a post
	// of pending message id is about to be made: from then on the message
	// may be in Slack even if its SlackOutboxSent never happens (a crash
	// between the post and the record), so the bridge looks it up before
	// posting it again (SPEC §5, exactly once). AttemptedAt keeps the first
	// attempt's time. It applies only under claim and before the claim
	// expires, so a holder that lost its claim never posts; ErrConflict
	// otherwise.
	SlackOutboxAttempt(ctx context.Context, id int64, claim SlackClaim) error
	// SlackOutboxSent records a delivered message and the ts Slack gave it.
	// Sent, Retry, Fail and Release apply only while claim is the message's
	// latest (ErrConflict otherwise: it was taken over, or is no longer
	// pending); an expired claim nobody took over still records its outcome.
	SlackOutboxSent(ctx context.Context, id int64, claim SlackClaim, ts string) error
	// SlackOutboxRetry records a failed attempt and when to try again, and
	// gives up the claim.
	SlackOutboxRetry(ctx context.Context, id int64, claim SlackClaim, next time.Time, errMsg string) error
	// SlackOutboxFail gives up on a message Slack refuses for good (it stays
	// in the table with its error, status failed), unblocking its queue.
	SlackOutboxFail(ctx context.Context, id int64, claim SlackClaim, errMsg string) error
	// SlackOutboxExtend moves a held claim's expiry to until while a send
	// is under way (ErrConflict when the claim is no longer held).
	SlackOutboxExtend(ctx context.Context, id int64, claim SlackClaim, until time.Time) error
	// SlackOutboxRelease gives up a claim with nothing recorded (a sender
	// shutting down before it called Slack), so another holder need not
	// wait for it to expire.
	SlackOutboxRelease(ctx context.Context, id int64, claim SlackClaim) error

	// SlackPrune deletes processed inbox deliveries received before
	// inboxBefore (past Slack's redelivery window, they dedupe nothing) and
	// sent outbox messages created before outboxBefore, except hold cards,
	// whose ts a later decision's chat.update still needs. Failed messages
	// are kept. Answers how many rows went.
	SlackPrune(ctx context.Context, inboxBefore, outboxBefore time.Time) (int64, error)

	// SlackMirrorEvents lists transcript events of sessions tagged "slack:…"
	// with id > afterID, oldest first, each with that tag.
	SlackMirrorEvents(ctx context.Context, afterID int64, limit int) ([]*SlackMirrorEvent, error)
	// SlackMirrorCursor answers the id of the last mirrored event (0 at first).
	SlackMirrorCursor(ctx context.Context) (int64, error)
	// SlackMirrorAdvance queues msgs and moves the cursor to eventID in one
	// transaction, so a crash neither loses nor repeats a mirrored message.
	// The cursor only moves forward. Answers how many messages were new.
	SlackMirrorAdvance(ctx context.Context, eventID int64, msgs []*SlackOutboxAddParams) (int, error)

	// SlackUserGet reads the cached name of a Slack user (ErrNotFound when
	// none is cached); SlackUserPut caches one, replacing what was there.
	// The bridge fills the cache from users.info, so transcripts and the
	// Thread load class name speakers without asking Slack each time.
	SlackUserGet(ctx context.Context, id string) (*SlackUser, error)
	SlackUserPut(ctx context.Context, u *SlackUser) error
	// SlackUserList lists every cached Slack user, by id.
	SlackUserList(ctx context.Context) ([]*SlackUser, error)

	// SlackBackfill* keep the thread backfills of SPEC §5 (see
	// SlackBackfill): durable, so a fetch cut short by a rate limit, a
	// crash or a restart goes on from where it stopped, once.
	SlackBackfillAdd(ctx context.Context, p *SlackBackfillAddParams) (*SlackBackfill, error)
	SlackBackfillGet(ctx context.Context, sessionID string) (*SlackBackfill, error)
	// SlackBackfillDue lists pending backfills due at now, soonest first.
	SlackBackfillDue(ctx context.Context, now time.Time, limit int) ([]*SlackBackfill, error)
	// SlackBackfillNextDue answers when the soonest pending backfill is due
	// (ErrNotFound when none is pending).
	SlackBackfillNextDue(ctx context.Context) (time.Time, error)
	// SlackBackfillPage records one fetched page: its events are appended
	// to the session and the backfill moves to the page's next cursor (or
	// is done) in one transaction, a compare-and-set on the cursor the page
	// was fetched from, so a page is recorded once however many processes
	// fetch it (ErrConflict when the backfill moved meanwhile).
	SlackBackfillPage(ctx context.Context, p *SlackBackfillPageParams) (*SlackBackfill, error)
	// SlackBackfillRetry records a failed fetch and when to try again.
	SlackBackfillRetry(ctx context.Context, sessionID string, next time.Time, errMsg string) error
}

// SlackUser is a Slack user's name as cached.
type SlackUser struct {
	ID string
	// Name is the display name (else the real name, else the handle).
	Name      string
	FetchedAt time.Time
}

// SlackBackfill is the backfill of one thread session (SPEC §5): the
// thread's messages before Before are fetched with conversations.replies,
// a page at a time from Cursor, and recorded as backfilled transcript
// events.
type SlackBackfill struct {
	SessionID string
	Channel   string
	ThreadTS  string
	// Before is the ts of the mention that bound the thread: the messages
	// before it are the backfill's, the ones after reach the bot as events.
	Before string
	// Cursor is the conversations.replies cursor of the next page ("" for
	// the first).
	Cursor string
	Done   bool
	// Fetched counts the messages recorded so far.
	Fetched   int
	Attempts  int
	NextAt    time.Time
	LastError string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// SlackBackfillAddParams starts a backfill; a session that has one keeps
// it (the call answers it unchanged).
type SlackBackfillAddParams struct {
	SessionID, Channel, ThreadTS, Before string
}

// SlackBackfillPageParams is one fetched page of a backfill.
type SlackBackfillPageParams struct {
	SessionID string
	// Cursor is the cursor the page was fetched from; the write applies
	// only while the backfill is still there.
	Cursor string
	// Next is the cursor of the following page; Done ends the backfill.
	Next string
	Done bool
	// Events are appended in order (their SessionID is set).
	Events []*EventAppendParams
}

// Inbox delivery kinds.
const (
	SlackKindEvent       = "event"       // an Events API callback (outer JSON)
	SlackKindInteraction = "interaction" // an interactivity payload (JSON)
	SlackKindCommand     = "command"     // a slash command (its form, URL-encoded)
)

// SlackInboxAddParams is one inbound delivery as Slack sent it.
type SlackInboxAddParams struct {
	Key  string // event_id for events; a digest for interactions
	Kind string
	Body []byte
	// Thread is the key a delivery's processing is ordered by (the bridge
	// derives it from the body): deliveries of one thread are claimed one
	// at a time, in arrival order. "" makes the delivery a thread of its own.
	Thread string
}

// SlackInboxItem is a stored inbound delivery.
type SlackInboxItem struct {
	ID         int64
	Key        string
	Kind       string
	Body       []byte
	Thread     string
	ReceivedAt time.Time
	// Attempts counts failed attempts at handling it (SlackInboxRelease).
	Attempts int
	// Claim is the claim SlackInboxClaim took (zero when read otherwise).
	Claim SlackClaim
}

// SlackClaim names one claim of an inbox delivery or an outbox message:
// who holds it and which of the row's claims it is. The sequence, not the
// holder alone, fences writes, so a holder whose claim expired and was
// taken over cannot record anything even if it claims the row again later.
type SlackClaim struct {
	Holder string
	Seq    int64
}

// SlackClaimParams claims rows for Holder (a runner id unique to the
// process) until Until, as of Now.
type SlackClaimParams struct {
	Holder string
	Now    time.Time
	Until  time.Time
	Limit  int
}

// SlackInboxReleaseParams gives a claimed delivery back.
type SlackInboxReleaseParams struct {
	ID    int64
	Claim SlackClaim
	// Next is when it may be claimed again.
	Next time.Time
	// Failed counts a failed attempt; Error is kept with it.
	Failed bool
	Error  string
}

// Slack outbox methods: the Web API method each message calls.
const (
	SlackPost      = "chat.postMessage"
	SlackUpdate    = "chat.update"
	SlackEphemeral = "chat.postEphemeral"
	// SlackPublish publishes User's App Home; the bridge renders the view
	// when it sends it, so a queued publish always shows the latest state.
	SlackPublish = "views.publish"
	// SlackRespond answers a slash command ephemerally at its ResponseURL.
	SlackRespond = "response_url"
)

// Outbox statuses.
const (
	SlackOutboxPending = "pending"
	SlackOutboxSentSt  = "sent"
	SlackOutboxFailed  = "failed"
)

// SlackOutboxAddParams is one Slack write to make.
type SlackOutboxAddParams struct {
	DedupeKey string
	// Queue orders messages: one queue per thread ("<channel>:<thread_ts>").
	Queue    string
	Method   string
	Channel  string
	ThreadTS string
	// User is the recipient of an ephemeral message.
	User string
	Text string
	// Blocks is the Block Kit JSON array, or empty.
	Blocks string
	// RefKey, for chat.update, is the dedupe key of the message to update:
	// its ts is the one recorded when it was posted.
	RefKey string
	// ResponseURL, for SlackRespond, is the slash command's response_url.
	ResponseURL string
	// TraceContext is the W3C traceparent of the work that queued the
	// message, so its post joins that trace ("" for none).
	TraceContext string
}

// SlackOutboxMsg is a queued Slack write.
type SlackOutboxMsg struct {
	SlackOutboxAddParams
	ID        int64
	Status    string
	Attempts  int
	NextAt    time.Time
	LastError string
	// SentTS is the ts Slack answered with once sent.
	SentTS    string
	CreatedAt time.Time
	SentAt    *time.Time
	// AttemptedAt is when a post of it was first attempted (nil: never),
	// see SlackOutboxAttempt.
	AttemptedAt *time.Time
	// Claim is the claim SlackOutboxClaim took, held until ClaimUntil.
	Claim      SlackClaim
	ClaimUntil *time.Time
}

// SlackMirrorEvent is a transcript event of a Slack session and its thread tag.
type SlackMirrorEvent struct {
	Event
	Tag string
}
