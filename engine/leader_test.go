package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/engine/model"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/postgres"
	"github.com/holdfast-bot/holdfast/store/postgres/pgtest"
	"github.com/holdfast-bot/holdfast/store/sqlite"
)

// errPartitioned is a replica's lease calls failing, as if it had lost the
// database (or died between two renewals).
var errPartitioned = errors.New("partitioned from the database")

// replicaStore is one replica's connection to the shared database, with
// counts of the leader-only work it does and a switch that cuts its lease
// calls off.
type replicaStore struct {
	store.Store
	cut       atomic.Bool
	stuck     atomic.Int64 // RunListStuck: recovery passes
	expired   atomic.Int64 // HoldListExpired: hold timeout passes
	remind    atomic.Int64 // HoldListRemindDue: reminder passes
	schedules atomic.Int64 // WorkflowList: the scheduler's scans

	mu      sync.Mutex
	created []string    // dedupe keys of the items this replica enqueued
	tries   []leaseCall // its calls to take or renew the leader lease
}

// leaseCall is one LeaseAcquire of the leader lease: when it was made, how
// long the store took to answer it, and whether it was granted.
type leaseCall struct {
	at   time.Time
	took time.Duration
	held bool
}

func (c leaseCall) String() string {
	return fmt.Sprintf("%s +%s held=%v", c.at.Format("15:04:05.000"), c.took.Round(time.Millisecond), c.held)
}

func (s *replicaStore) QueueItemInsert(ctx context.Context, p *store.QueueItemInsertParams) (*store.QueueItem, bool, error) {
	it, created, err := s.Store.QueueItemInsert(ctx, p)
	s.count(created, p)
	return it, created, err
}

// QueueItemInsertClaimed is the enqueue of an engine with an idle worker.
func (s *replicaStore) QueueItemInsertClaimed(ctx context.Context, p *store.QueueItemInsertParams, c *store.ItemInsertClaim) (*store.QueueItem, *store.Run, bool, error) {
	it, run, created, err := s.Store.QueueItemInsertClaimed(ctx, p, c)
	s.count(created, p)
	return it, run, created, err
}

func (s *replicaStore) count(created bool, p *store.QueueItemInsertParams) {
	if created {
		s.mu.Lock()
		s.created = append(s.created, p.DedupeKey)
		s.mu.Unlock()
	}
}

func (s *replicaStore) enqueued() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.created)
}

func (s *replicaStore) LeaseAcquire(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	if s.cut.Load() {
		return false, errPartitioned
	}
	at := time.Now()
	held, err := s.Store.LeaseAcquire(ctx, name, holder, now, ttl)
	if name == leaderLease {
		s.mu.Lock()
		s.tries = append(s.tries, leaseCall{at: at, took: time.Since(at), held: held})
		s.mu.Unlock()
	}
	return held, err
}

// triesSince answers the leader lease calls made from t on.
func (s *replicaStore) triesSince(t time.Time) []leaseCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(s.tries), func(c leaseCall) bool { return c.at.Before(t) })
}

func (s *replicaStore) LeaseRelease(ctx context.Context, name, holder string) error {
	if s.cut.Load() {
		return errPartitioned
	}
	return s.Store.LeaseRelease(ctx, name, holder)
}

func (s *replicaStore) RunListStuck(ctx context.Context, staleBefore time.Time, limit int) ([]*store.Run, error) {
	s.stuck.Add(1)
	return s.Store.RunListStuck(ctx, staleBefore, limit)
}

func (s *replicaStore) HoldListExpired(ctx context.Context, now time.Time, limit int) ([]*store.Hold, error) {
	s.expired.Add(1)
	return s.Store.HoldListExpired(ctx, now, limit)
}

func (s *replicaStore) HoldListRemindDue(ctx context.Context, now time.Time, limit int) ([]*store.Hold, error) {
	s.remind.Add(1)
	return s.Store.HoldListRemindDue(ctx, now, limit)
}

func (s *replicaStore) WorkflowList(ctx context.Context) ([]*store.Workflow, error) {
	s.schedules.Add(1)
	return s.Store.WorkflowList(ctx)
}

// leaderOnly is the leader-only work a replica has done.
func (s *replicaStore) leaderOnly() int64 {
	return s.stuck.Load() + s.expired.Load() + s.remind.Load() + s.schedules.Load()
}

// backends are the stores the replica tests run on; PostgreSQL skips
// without a server (failing under CI).
var backends = []string{"SQLite", "PostgreSQL"}

// cluster runs electing replicas on one database and records every change
// of leadership as its replicas' watchers see it.
type cluster struct {
	t    *testing.T
	open func(t *testing.T) store.Store
	cfg  Config

	mu      sync.Mutex
	changes []leaderChange
	wake    chan struct{}
	n       int
}

type leaderChange struct {
	replica *replica
	leading bool
	at      time.Time
}

type replica struct {
	name  string
	e     *Engine
	s     *replicaStore
	stop  context.CancelFunc
	done  chan struct{}
	ended atomic.Bool
}

// newCluster answers a cluster on a fresh database of backend; first, when
// set, prepares it (a workflow to import) through a connection of its own.
func newCluster(t *testing.T, backend string, cfg Config, first func(s store.Store)) *cluster {
	c := &cluster{t: t, cfg: cfg, wake: make(chan struct{}, 1)}
	switch backend {
	case "SQLite": // one process: its replicas share the one store
		db, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "h.db")})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		c.open = func(*testing.T) store.Store { return db }
	case "PostgreSQL": // a pool per replica, as replica processes have
		url := pgtest.SchemaURL(t)
		c.open = func(t *testing.T) store.Store {
			db, err := postgres.Open(context.Background(), postgres.Config{URL: url})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, db.Close()) })
			return db
		}
	}
	if first != nil {
		first(c.open(t))
	}
	return c
}

// start runs one more replica.
func (c *cluster) start() *replica {
	c.t.Helper()
	c.mu.Lock()
	c.n++
	name := fmt.Sprintf("r%d", c.n)
	c.mu.Unlock()
	cfg := c.cfg
	cfg.Elect = true
	cfg.RunnerID = name
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	cfg.RetryBase = time.Millisecond
	rs := &replicaStore{Store: c.open(c.t)}
	r := &replica{name: name, e: New(cfg, rs, model.NewRegistry("template", model.Config{}), nil), s: rs, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	watching := make(chan struct{})
	go func() {
		defer close(r.done)
		_ = r.e.Start(ctx)
	}()
	go func() { // the watcher: every change of r's leadership, in order
		was := false
		first := true
		watching := watching
		for {
			lctx, changed := r.e.leadState()
			if now := lctx != nil; now != was || first {
				was, first = now, false
				c.record(r, now)
			}
			if watching != nil {
				close(watching)
				watching = nil
			}
			select {
			case <-changed:
			case <-r.done:
				c.record(r, false)
				return
			}
		}
	}()
	<-watching
	c.t.Cleanup(func() { r.stop(); <-r.done })
	return r
}

func (c *cluster) record(r *replica, leading bool) {
	c.mu.Lock()
	c.changes = append(c.changes, leaderChange{replica: r, leading: leading, at: time.Now()})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// state answers each replica's latest recorded leadership and when it
// changed.
func (c *cluster) state() map[*replica]leaderChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[*replica]leaderChange{}
	for _, ch := range c.changes {
		out[ch.replica] = ch
	}
	return out
}

// leader waits until exactly one of among leads and answers it with the
// time it started leading.
func (c *cluster) leader(timeout time.Duration, among ...*replica) (*replica, time.Time) {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		var leaders []leaderChange
		for r, ch := range c.state() {
			if ch.leading && slices.Contains(among, r) {
				leaders = append(leaders, ch)
			}
		}
		if len(leaders) == 1 {
			return leaders[0].replica, leaders[0].at
		}
		select {
		case <-c.wake:
		case <-deadline:
			c.t.Fatalf("no single leader among %d replicas after %s (%d leading)", len(among), timeout, len(leaders))
		}
	}
}

// everLed answers whether r has led at any time.
func (c *cluster) everLed(r *replica) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.changes, func(ch leaderChange) bool { return ch.replica == r && ch.leading })
}

// neverTwoLeaders checks the recorded history: at no moment did two
// replicas lead at once.
func (c *cluster) neverTwoLeaders() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	leading := map[*replica]bool{}
	for _, ch := range c.changes {
		leading[ch.replica] = ch.leading
		n := 0
		for _, l := range leading {
			if l {
				n++
			}
		}
		require.LessOrEqual(c.t, n, 1, "two replicas led at once (%s took over at %s)", ch.replica.name, ch.at.Format(time.StampMicro))
	}
}

// crash stops r without releasing its lease: its lease calls fail from now
// on (the renewal it would have made never comes), then it stops.
func (r *replica) crash() {
	r.s.cut.Store(true)
	r.stop()
	<-r.done
}

// shutdown stops r gracefully: it releases the lease.
func (r *replica) shutdown() {
	r.stop()
	<-r.done
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Only the leader runs recovery, hold timeouts, reminders and the
// scheduler; the gauge says which replica leads.
func TestOnlyTheLeaderRunsLeaderWork(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			pass := 200 * time.Millisecond
			c := newCluster(t, b, Config{PassInterval: pass}, func(s store.Store) {
				doc := strings.Replace(wfDoc("/tick"), "- **Status**", "- **Invoke** `every 1s`\n- **Status**", 1)
				_, _, err := library.New(s, nil).ImportWorkflow(context.Background(), "", doc)
				require.NoError(t, err)
			})
			rs := []*replica{c.start(), c.start(), c.start()}
			c.leader(5*time.Second, rs...)
			// The replica leading, by its own word and its gauge's, once
			// three passes are done: on a busy machine a slow renewal may
			// have moved the lead since the first, and the gauge follows a
			// change of lead a moment after it.
			var leader *replica
			waitUntil(t, 10*time.Second, "three recovery passes on the leader, its gauge reading 1", func() bool {
				for _, r := range rs {
					if r.e.Leading() && r.s.stuck.Load() >= 3 && scrape(t, r.e)["holdfast_leader"] == 1 {
						leader = r
						return true
					}
				}
				return false
			})
			followers := 0
			for _, r := range rs {
				if r == leader {
					require.Positive(t, r.s.expired.Load(), "hold timeouts run on the leader")
					require.Positive(t, r.s.remind.Load(), "reminders run on the leader")
					require.Positive(t, r.s.schedules.Load(), "the scheduler runs on the leader")
					continue
				}
				// Observed first, judged after: a slow renewal on a busy
				// machine may move the lead to r meanwhile, and r's
				// watcher records that a moment after r takes it.
				work, leading := r.s.leaderOnly(), r.e.Leading()
				v, ok := scrape(t, r.e)["holdfast_leader"]
				require.True(t, ok, "the gauge is exported")
				if c.everLed(r) {
					continue
				}
				if work != 0 || leading || v != 0 {
					waitUntil(t, 5*time.Second, r.name+" to have led: it ran leader work or said it leads", func() bool { return c.everLed(r) })
					continue
				}
				followers++
			}
			require.Positive(t, followers, "some replica never led")
			c.neverTwoLeaders()
		})
	}
}

// A leader that stops without releasing (a crash: no renewal, no release)
// is replaced within 2 × PassInterval (SPEC §9).
//
// Not parallel with the package's other tests, whose load is no part of
// what it measures.
func TestCrashedLeaderIsReplacedWithinTwoPassIntervals(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			// The bound leaves the takeover half an interval beyond the
			// lease's expiry (leaseTTL); at 300 ms that was 150 ms, which
			// a loaded machine under -race once overran (636 ms).
			pass := time.Second
			c := newCluster(t, b, Config{PassInterval: pass}, nil)
			rs := []*replica{c.start(), c.start(), c.start()}
			var took []time.Duration
			for range 2 {
				leader, _ := c.leader(5*time.Second, rs...)
				crashed := time.Now()
				leader.crash()
				rs = slices.DeleteFunc(rs, func(r *replica) bool { return r == leader })
				next, since := c.leader(5*time.Second, rs...)
				took = append(took, since.Sub(crashed))
				// The bound is on when the engine asks for the lease: how
				// long the store then takes to commit the grant is the
				// disk's (CI once saw a takeover at 3.4 s on a loaded
				// machine, its cause unrecorded; the calls are now).
				tries := next.s.triesSince(crashed)
				i := slices.IndexFunc(tries, func(c leaseCall) bool { return c.held })
				require.GreaterOrEqual(t, i, 0, "%s leads without a granted lease call since the crash: %v", next.name, tries)
				d := tries[i].at.Sub(crashed)
				require.Less(t, d, 2*pass, "%s asked for the lease it took %s after the leader crashed; its calls since: %v", next.name, d, tries)
				rs = append(rs, c.start())
			}
			t.Logf("%s: takeover after a crash took %v end to end (PassInterval %s, bound %s on the winning call)", b, took, pass, 2*pass)
			c.neverTwoLeaders()
		})
	}
}

// A leader whose renewal is refused (another holder has the lease) stops
// its leader work at once, and no replica leads until that lease expires.
func TestLostRenewalStopsLeaderWork(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pass := 200 * time.Millisecond
			c := newCluster(t, b, Config{PassInterval: pass}, nil)
			rs := []*replica{c.start(), c.start()}
			leader, _ := c.leader(5*time.Second, rs...)
			var work atomic.Int64
			stopped := make(chan time.Time, 1)
			lctx, cancelLead := context.WithCancel(ctx)
			defer cancelLead()
			go leader.e.Lead(lctx, func(ctx context.Context) {
				work.Add(1)
				<-ctx.Done()
				select {
				case stopped <- time.Now():
				default:
				}
			})
			waitUntil(t, 5*time.Second, "leader work to start", func() bool { return work.Load() == 1 })

			// Another holder takes the lease over for ten intervals, as
			// after a stall long enough for it to expire: its clock is past
			// the leader's expiry, and nothing is released (a release would
			// wake the follower).
			s := leader.s.Store
			held, err := s.LeaseAcquire(ctx, leaderLease, "intruder", time.Now().Add(c.cfg.leaseTTL()+pass), 10*pass)
			require.NoError(t, err)
			require.True(t, held)
			lost := time.Now()
			var at time.Time
			select {
			case at = <-stopped:
			case <-time.After(5 * time.Second):
				t.Fatal("leader work went on after the lease was lost")
			}
			require.Less(t, at.Sub(lost), pass+pass/2, "leader work stops at the next renewal")
			require.False(t, leader.e.Leading())
			for _, r := range rs {
				require.False(t, r.e.Leading(), "%s leads while another holder has the lease", r.name)
			}
			waitUntil(t, 5*time.Second, "a replica to lead after the intruder's lease expired", func() bool {
				return rs[0].e.Leading() || rs[1].e.Leading()
			})
			require.GreaterOrEqual(t, time.Since(lost), 10*pass-pass/2, "nobody took the lease before it expired")
			c.neverTwoLeaders()
		})
	}
}

// A clean stop releases the lease and a follower takes over at once, not
// at the lease's expiry nor at its next try (PassInterval is long here).
func TestGracefulStopHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			pass := 5 * time.Second
			c := newCluster(t, b, Config{PassInterval: pass}, nil)
			rs := []*replica{c.start(), c.start()}
			leader, _ := c.leader(2*pass, rs...)
			var took []time.Duration
			for range 2 {
				stopped := time.Now()
				leader.shutdown()
				rs = slices.DeleteFunc(rs, func(r *replica) bool { return r == leader })
				next, since := c.leader(pass, rs...)
				d := since.Sub(stopped)
				took = append(took, d)
				require.Less(t, d, pass/5, "%s took over %s after a clean stop", next.name, d)
				leader = next
				rs = append(rs, c.start())
			}
			t.Logf("%s: handover after a clean stop took %v (PassInterval %s)", b, took, pass)
			c.neverTwoLeaders()
		})
	}
}

// A per-second schedule fires every slot exactly once while replicas start,
// stop cleanly and crash: no slot is lost in a change of leader, none is
// enqueued twice.
func TestScheduleFiresEachSlotOnceAcrossLeaders(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// A crashed leader is replaced about 1.5 × PassInterval later:
			// with this interval two or three slots fall in that gap.
			pass := 1500 * time.Millisecond
			var db store.Store
			c := newCluster(t, b, Config{PassInterval: pass}, func(s store.Store) {
				db = s
				doc := strings.Replace(wfDoc("/tick"), "- **Status**", "- **Invoke** `every 1s`\n- **Status**", 1)
				_, _, err := library.New(s, nil).ImportWorkflow(ctx, "", doc)
				require.NoError(t, err)
			})
			rs := []*replica{c.start(), c.start()}
			all := slices.Clone(rs)
			enqueued := func() (keys []string) {
				for _, r := range all {
					keys = append(keys, r.s.enqueued()...)
				}
				return keys
			}
			begin := time.Now()
			for _, what := range []string{"stop", "crash", "stop", "crash", "stop"} {
				leader, _ := c.leader(5*time.Second, rs...)
				// Each leader fires two slots of its own before it goes.
				before := len(leader.s.enqueued())
				waitUntil(t, 10*time.Second, "two slots fired by "+leader.name, func() bool { return len(leader.s.enqueued()) >= before+2 })
				if what == "crash" {
					leader.crash()
				} else {
					leader.shutdown()
				}
				rs = slices.DeleteFunc(rs, func(r *replica) bool { return r == leader })
				r := c.start()
				rs, all = append(rs, r), append(all, r)
			}
			end := time.Now()
			for _, r := range rs {
				r.shutdown()
			}
			counts, err := db.QueueItemCountByStatus(ctx)
			require.NoError(t, err)
			keys := enqueued()
			require.Equal(t, int64(len(keys)), sum(counts), "every item in the queue was enqueued by a leader's scheduler")
			var slots []time.Time
			seen := map[string]int{}
			for _, k := range keys {
				seen[k]++
				s, err := time.Parse(time.RFC3339, k)
				require.NoError(t, err)
				slots = append(slots, s)
			}
			for k, n := range seen {
				require.Equal(t, 1, n, "slot %s enqueued %d times", k, n)
			}
			sort.Slice(slots, func(i, j int) bool { return slots[i].Before(slots[j]) })
			require.NotEmpty(t, slots)
			for i := 1; i < len(slots); i++ {
				require.Equal(t, time.Second, slots[i].Sub(slots[i-1]), "a slot went missing between %s and %s", slots[i-1], slots[i])
			}
			require.False(t, slots[0].After(begin.Add(2*time.Second)), "the first slot is fired early on")
			require.False(t, slots[len(slots)-1].Before(end.Add(-2*time.Second)), "slots are fired to the end")
			for _, r := range all {
				if r.s.schedules.Load() == 0 {
					require.Empty(t, r.s.enqueued(), "%s never led, so it enqueued nothing", r.name)
				}
			}
			t.Logf("%s: %d slots from %s to %s, each once, over 3 clean stops and 2 crashes", b, len(slots),
				slots[0].Format(time.TimeOnly), slots[len(slots)-1].Format(time.TimeOnly))
			c.neverTwoLeaders()
		})
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// The HTTP cron path (RunPass) of a replica that does not run the loop
// recovers stuck runs only when it can take the leader lease, and gives the
// lease back after its pass; the loop's leader is left to do it otherwise.
func TestRunPassDoesLeaderWorkOnlyWithTheLease(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := &clock{}
			var s store.Store
			newCluster(t, b, Config{}, func(db store.Store) { s = db })
			_, _, err := library.New(s, nil).ImportWorkflow(ctx, "", wfDoc("/draft"))
			require.NoError(t, err)
			e := New(Config{Elect: true, RunnerID: "cron", StuckRun: time.Minute, DisableScheduler: true, Now: clk.Now}, s,
				model.NewRegistry("template", model.Config{}), nil)
			_, _, err = e.Enqueue(ctx, EnqueueParams{Command: "/draft", DedupeKey: "a", Payload: map[string]any{"brief": "x"}})
			require.NoError(t, err)
			dead := New(Config{RunnerID: "dead", DisableScheduler: true}, s, model.NewRegistry("template", model.Config{}), nil)
			runs, err := dead.claim(ctx, 1)
			require.NoError(t, err)
			require.Len(t, runs, 1)
			clk.Advance(2 * time.Minute) // the dead runner's run is stuck

			held, err := s.LeaseAcquire(ctx, leaderLease, "the-leader", clk.Now(), time.Hour)
			require.NoError(t, err)
			require.True(t, held)
			res, err := e.RunPass(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Recovered, "another replica leads: recovery is its work")

			require.NoError(t, s.LeaseRelease(ctx, leaderLease, "the-leader"))
			res, err = e.RunPass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Recovered, "with the lease free the pass recovers")
			_, err = s.LeaseGet(ctx, leaderLease)
			require.ErrorIs(t, err, store.ErrNotFound, "and gives the lease back")
		})
	}
}
