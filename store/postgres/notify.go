package postgres

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-bot/holdfast/store"
)

// Notice payloads on the work channel (a WorkNotice as JSON).
var (
	workQueued    = encodeJSON(store.WorkNotice{Kind: store.WorkQueued})
	workResumable = encodeJSON(store.WorkNotice{Kind: store.WorkResumable})
)

// maxNotice keeps a NOTIFY payload under PostgreSQL's 8000-byte limit.
const maxNotice = 7000

// cancelNotices splits a cancel request's run ids into payloads that fit.
func cancelNotices(ids []string, reason string) []string {
	if len(ids) == 0 {
		return nil
	}
	if len(reason) > 1000 {
		reason = reason[:1000]
	}
	var (
		out  []string
		cur  []string
		size int
	)
	for _, id := range ids {
		if len(cur) > 0 && size+len(id)+3 > maxNotice-len(reason)-64 {
			out = append(out, encodeJSON(store.WorkNotice{Kind: store.WorkCancel, RunIDs: cur, Reason: reason}))
			cur, size = nil, 0
		}
		cur = append(cur, id)
		size += len(id) + 3
	}
	return append(out, encodeJSON(store.WorkNotice{Kind: store.WorkCancel, RunIDs: cur, Reason: reason}))
}

// listener holds the one connection LISTENing on the store's channels and
// hands what it hears to subscribers. It starts with the first
// subscription; after a lost connection it reconnects and wakes every
// subscriber, since notices sent meanwhile were lost.
type listener struct {
	db  *DB
	cfg *pgx.ConnConfig

	start sync.Once
	ready chan struct{} // closed once the first LISTEN is in place
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}

	mu         sync.Mutex
	eventSubs  map[*eventSub]struct{}
	workSubs   map[*workSub]struct{}
	lastEvent  atomic.Int64
	listenOnce sync.Once

	// beforeReconnect, when set (by a test, before the first subscription),
	// runs before each reconnect: the test acts while nobody listens.
	beforeReconnect func()
}

type eventSub struct {
	last atomic.Int64
	wake chan struct{}
}

type workSub struct {
	ch chan store.WorkNotice
}

func newListener(db *DB, cfg *pgx.ConnConfig) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{db: db, cfg: cfg, ready: make(chan struct{}), ctx: ctx, stop: cancel, done: make(chan struct{}),
		eventSubs: map[*eventSub]struct{}{}, workSubs: map[*workSub]struct{}{}}
}

func (l *listener) close() {
	l.stop()
	l.start.Do(func() { close(l.done) }) // never started: nothing to wait for
	<-l.done
}

// ensure starts the listening goroutine once and waits (until ctx ends)
// for its LISTEN, so a subscriber is called for every commit after it
// subscribed.
func (l *listener) ensure(ctx context.Context) {
	l.start.Do(func() { go l.run() })
	select {
	case <-l.ready:
	case <-ctx.Done():
	case <-l.ctx.Done():
	case <-time.After(10 * time.Second):
		// The database is unreachable: subscribe anyway; the listener
		// wakes everyone once it connects.
	}
}

func (l *listener) run() {
	defer close(l.done)
	backoff := 50 * time.Millisecond
	for l.ctx.Err() == nil {
		err := l.listen()
		if l.ctx.Err() != nil {
			return
		}
		_ = err // a lost connection: reconnect, then wake everyone
		if l.beforeReconnect != nil {
			l.beforeReconnect()
		}
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listen connects, LISTENs and dispatches notifications until the
// connection fails or the store closes.
func (l *listener) listen() error {
	conn, err := pgx.ConnectConfig(l.ctx, l.cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, ch := range []string{l.db.eventsChannel, l.db.workChannel} {
		if _, err := conn.Exec(l.ctx, `LISTEN `+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	first := false
	l.listenOnce.Do(func() { first = true; close(l.ready) })
	if !first {
		// Notices sent while the connection was down are lost: wake every
		// subscriber as if they had come.
		var id int64
		if err := conn.QueryRow(l.ctx, `SELECT COALESCE(MAX(id), 0) FROM session_events`).Scan(&id); err == nil {
			l.eventCommitted(id)
		}
		l.work(store.WorkNotice{Kind: store.WorkQueued})
		l.work(store.WorkNotice{Kind: store.WorkResumable})
		l.work(store.WorkNotice{Kind: store.WorkLeaseFree}) // which lease, if any, is not known
	}
	for {
		n, err := conn.WaitForNotification(l.ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case l.db.eventsChannel:
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				l.eventCommitted(id)
			}
		case l.db.workChannel:
			var w store.WorkNotice
			if json.Unmarshal([]byte(n.Payload), &w) == nil {
				l.work(w)
			}
		}
	}
}

func (l *listener) eventCommitted(id int64) {
	for {
		cur := l.lastEvent.Load()
		if id <= cur {
			return
		}
		if l.lastEvent.CompareAndSwap(cur, id) {
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.eventSubs {
		s.last.Store(id)
		select {
		case s.wake <- struct{}{}:
		default: // a wake-up is already pending; it will read the new id
		}
	}
}

func (l *listener) work(w store.WorkNotice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.workSubs {
		select {
		case s.ch <- w:
		default: // a wake-up only: the engine's tick catches up
		}
	}
}

// EventSubscribe answers a channel that carries the newest event id after
// commits (by any process) that appended events, until ctx is done or the
// store closes (then it is closed).
func (db *DB) EventSubscribe(ctx context.Context) <-chan int64 {
	l := db.listener
	s := &eventSub{wake: make(chan struct{}, 1)}
	l.mu.Lock()
	l.eventSubs[s] = struct{}{}
	l.mu.Unlock()
	l.ensure(ctx)
	out := make(chan int64, 1)
	go func() {
		defer func() {
			l.mu.Lock()
			delete(l.eventSubs, s)
			l.mu.Unlock()
			close(out)
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.ctx.Done():
				return
			case <-s.wake:
			}
			if ctx.Err() != nil {
				return // no notice for a commit after the cancel
			}
			select {
			case out <- s.last.Load():
			case <-ctx.Done():
				return
			case <-l.ctx.Done():
				return
			}
		}
	}()
	return out
}

// WorkSubscribe answers a channel that carries a notice after commits (by
// any process) that made work for runners, until ctx is done or the store
// closes (then it is closed).
func (db *DB) WorkSubscribe(ctx context.Context) <-chan store.WorkNotice {
	l := db.listener
	s := &workSub{ch: make(chan store.WorkNotice, 256)}
	l.mu.Lock()
	l.workSubs[s] = struct{}{}
	l.mu.Unlock()
	l.ensure(ctx)
	go func() {
		select {
		case <-ctx.Done():
		case <-l.ctx.Done():
		}
		// work sends under mu: once s is out of the set, nothing sends.
		l.mu.Lock()
		delete(l.workSubs, s)
		l.mu.Unlock()
		close(s.ch)
	}()
	return s.ch
}
