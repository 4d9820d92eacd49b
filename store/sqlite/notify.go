package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"

	"github.com/holdfast-bot/holdfast/store"
)

// eventNotifier tells EventSubscribe's subscribers about committed
// transcript events. After each commit the writer reads the newest event id
// (one seek at the end of the primary key, skipped while nobody listens)
// instead of each write path reporting what it appended: no path that
// inserts into session_events, today's or a future one, can forget to.
type eventNotifier struct {
	n    atomic.Int32 // subscribers
	last int64        // newest event id notified; the writer goroutine's alone

	mu   sync.Mutex
	subs map[*eventSub]struct{}
	stop <-chan struct{} // the store's: closing it ends every subscription
}

type eventSub struct {
	last atomic.Int64
	wake chan struct{}
}

// committed runs on the writer goroutine after a successful commit.
func (en *eventNotifier) committed(w *sql.DB) {
	if en.n.Load() == 0 {
		return
	}
	var id sql.NullInt64
	if err := w.QueryRowContext(context.Background(), `SELECT MAX(id) FROM session_events`).Scan(&id); err != nil || !id.Valid {
		return // a wake-up is best effort: subscribers' ticks catch up
	}
	if id.Int64 <= en.last {
		return
	}
	en.last = id.Int64
	en.mu.Lock()
	defer en.mu.Unlock()
	for s := range en.subs {
		s.last.Store(id.Int64)
		select {
		case s.wake <- struct{}{}:
		default: // a wake-up is already pending; it will read the new id
		}
	}
}

// EventSubscribe answers a channel that carries the newest event id after
// commits that appended events, until ctx is done or the store closes
// (then it is closed).
func (db *DB) EventSubscribe(ctx context.Context) <-chan int64 {
	en := &db.events
	s := &eventSub{wake: make(chan struct{}, 1)}
	en.mu.Lock()
	en.subs[s] = struct{}{}
	en.mu.Unlock()
	en.n.Add(1)
	out := make(chan int64, 1)
	go func() {
		defer func() {
			en.mu.Lock()
			delete(en.subs, s)
			en.mu.Unlock()
			en.n.Add(-1)
			close(out)
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-en.stop:
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
			case <-en.stop:
				return
			}
		}
	}()
	return out
}

// workNotifier is WorkSubscribe's, in process: one SQLite file has one
// process writing to it, so a notice need not travel further.
type workNotifier struct {
	mu   sync.Mutex
	subs map[chan store.WorkNotice]struct{}
}

// notify hands w to every subscriber, dropping it for one that is behind
// (a wake-up only).
func (wn *workNotifier) notify(w store.WorkNotice) {
	wn.mu.Lock()
	defer wn.mu.Unlock()
	for ch := range wn.subs {
		select {
		case ch <- w:
		default:
		}
	}
}

// WorkSubscribe answers a channel that carries a notice after commits that
// made work for runners, until ctx is done or the store closes (then it is
// closed).
func (db *DB) WorkSubscribe(ctx context.Context) <-chan store.WorkNotice {
	wn := &db.work
	ch := make(chan store.WorkNotice, 256)
	wn.mu.Lock()
	if wn.subs == nil {
		wn.subs = map[chan store.WorkNotice]struct{}{}
	}
	wn.subs[ch] = struct{}{}
	wn.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-db.stop:
		}
		// notify sends under mu: once ch is out of the set, nothing sends.
		wn.mu.Lock()
		delete(wn.subs, ch)
		wn.mu.Unlock()
		close(ch)
	}()
	return ch
}
