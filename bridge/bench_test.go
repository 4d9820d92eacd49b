package bridge_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast-bot/holdfast/bridge"
	"github.com/holdfast-bot/holdfast/store"
	"github.com/holdfast-bot/holdfast/store/testdb"
)

// BenchmarkHTTPEventsToInbox measures signed Events API deliveries through
// the real router and handler into the durable SQLite inbox, from 8
// concurrent senders as Slack's are: events/s and ack latency (p50, p99),
// with SQLite synchronous FULL (the default: each ack survives power loss)
// and NORMAL. In the same run, interleaved with it round by round, it
// measures a minimal reference handler (verify the signature, insert the
// raw body, ack after a group commit at the same synchronous setting) and
// reports Holdfast's rate as a fraction of the reference's (vs-reference,
// the median over rounds of each round's ratio): the overhead of the real
// inbox, with the machine's noise mostly cancelled. The process's CPU time
// per event while each handler is loaded (cpu-us/event, ref-cpu-us/event;
// the senders' share is the same for both) says how much of that overhead
// is work: on two cores the senders, the handler and the writer share the
// CPU, so more work per event is a lower rate even where the disk waits.
// A third handler in the same rounds, the reference's with Holdfast's
// envelope parse and inbox store in place of its own (store-vs-reference,
// store-cpu-us/event), splits the gap between the store and the HTTP
// surface in front of it.
func BenchmarkHTTPEventsToInbox(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		b.Run("sync="+sync, func(b *testing.B) { benchEvents(b, sync) })
	}
}

// sender posts signed deliveries to one URL and records ack latencies.
type sender struct {
	url  string
	seq  *atomic.Int64
	lats []time.Duration
	took time.Duration
	cpu  time.Duration
	sent int
}

// send posts n deliveries from 8 goroutines and answers their rate.
func (s *sender) send(b *testing.B, client *http.Client, n int) float64 {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		left atomic.Int64
	)
	left.Store(int64(n))
	start, cpu0 := time.Now(), cpuTime()
	for range 8 {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				s.lats = append(s.lats, mine...)
				mu.Unlock()
			}()
			for left.Add(-1) >= 0 {
				k := s.seq.Add(1)
				body := eventBody(fmt.Sprintf("EvB%d", k), message("C1", "U1", fmt.Sprintf("1700000000.%06d", k), "1.000001", "benchmark message"))
				ts := time.Now().Unix()
				req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
				req.Header.Set("X-Slack-Signature", sign(ts, body))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	s.cpu += cpuTime() - cpu0
	s.took += took
	s.sent += n
	return float64(n) / took.Seconds()
}

func (s *sender) rate() float64 { return float64(s.sent) / s.took.Seconds() }

func (s *sender) cpuPerEvent() float64 { return float64(s.cpu.Microseconds()) / float64(s.sent) }

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchEvents(b *testing.B, syncMode string) {
	o := standIns()
	o.noStart = true // the ack path only: storing, not processing
	o.sync = syncMode
	tb := setup(b, o)
	ref := newReferenceInbox(b, syncMode)
	// The store-side handler's store is its own, fresh as the others are.
	hfStore := testdb.Open(b, testdb.Options{SQLiteSync: syncMode})
	storeSide := httptest.NewServer(referenceHandler(func(ctx context.Context, body []byte) error {
		env, err := bridge.ParseEnvelope(body)
		if err != nil || env.Event == nil {
			return errBadEvent
		}
		_, err = hfStore.SlackInboxAdd(ctx, []*store.SlackInboxAddParams{{
			Key: env.EventID, Kind: store.SlackKindEvent, Body: body, Thread: env.Event.Channel + ":" + env.Event.Root()}})
		return err
	}))
	b.Cleanup(storeSide.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	hf := &sender{url: tb.srv.URL + "/slack/events", seq: &seq}
	rf := &sender{url: ref.srv.URL, seq: &seq}
	st := &sender{url: storeSide.URL, seq: &seq}
	senders := []*sender{hf, rf, st}
	b.ResetTimer()
	// Rounds rotate which handler goes first, and each round's ratios are
	// taken on their own: a burst of load from elsewhere on the machine
	// falls on a whole round alike, and the median ignores the round it
	// fell across.
	const rounds = 12
	var vsRef, storeVsRef []float64
	for r := range rounds {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		var rate [3]float64
		for k := range senders {
			i := (k + r) % len(senders)
			rate[i] = senders[i].send(b, client, n)
		}
		vsRef = append(vsRef, rate[0]/rate[1])
		storeVsRef = append(storeVsRef, rate[2]/rate[1])
	}
	b.StopTimer()
	slices.Sort(hf.lats)
	if len(hf.lats) > 0 {
		b.ReportMetric(hf.rate(), "events/s")
		b.ReportMetric(float64(hf.lats[len(hf.lats)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(hf.lats[len(hf.lats)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(rf.rate(), "ref-events/s")
		b.ReportMetric(hf.cpuPerEvent(), "cpu-us/event")
		b.ReportMetric(rf.cpuPerEvent(), "ref-cpu-us/event")
		b.ReportMetric(st.cpuPerEvent(), "store-cpu-us/event")
		b.ReportMetric(median(vsRef), "vs-reference")
		b.ReportMetric(median(storeVsRef), "store-vs-reference")
	}
	for _, db := range []store.Store{tb.store, hfStore} {
		pending, err := db.SlackInboxPending(tb.ctx, b.N+1)
		require.NoError(b, err)
		require.Len(b, pending, b.N, "every acknowledged event is in the inbox")
	}
	var stored int
	require.NoError(b, ref.db.QueryRow(`SELECT COUNT(*) FROM inbox`).Scan(&stored))
	require.Equal(b, b.N, stored, "and in the reference's")
}

// referenceInbox is the minimal verify-and-insert handler the Slack ingest
// is measured against: check the signature and timestamp, read the event
// id, insert the raw body into a one-index table, and ack once a group
// commit holding it is durable (one writer, every request queued during a
// commit goes into the next).
type referenceInbox struct {
	db   *sql.DB
	srv  *httptest.Server
	reqs chan refReq
}

type refReq struct {
	id, body string
	done     chan error
}

func newReferenceInbox(b *testing.B, syncMode string) *referenceInbox {
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(b.TempDir(), "ref.db")+"?_journal_mode=WAL&_synchronous="+syncMode+"&_busy_timeout=5000")
	require.NoError(b, err)
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`CREATE TABLE inbox (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL UNIQUE, body TEXT NOT NULL, received_at TEXT NOT NULL)`)
	require.NoError(b, err)
	ri := &referenceInbox{db: db, reqs: make(chan refReq, 256)}
	stop := make(chan struct{})
	go ri.writer(stop)
	ri.srv = httptest.NewServer(referenceHandler(ri.put))
	b.Cleanup(func() {
		ri.srv.Close()
		close(stop)
		_ = db.Close()
	})
	return ri
}

var errBadEvent = errors.New("bad event")

// put reads the event id, hands the delivery to the writer and waits for
// its commit.
func (ri *referenceInbox) put(_ context.Context, body []byte) error {
	var ev struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.EventID == "" {
		return errBadEvent
	}
	req := refReq{id: ev.EventID, body: string(body), done: make(chan error, 1)}
	ri.reqs <- req
	return <-req.done
}

// referenceHandler verifies a delivery and acks once put has stored it.
func referenceHandler(put func(ctx context.Context, body []byte) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		ts, err := strconv.ParseInt(r.Header.Get("X-Slack-Request-Timestamp"), 10, 64)
		if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
			http.Error(w, "stale", http.StatusUnauthorized)
			return
		}
		mac := hmac.New(sha256.New, []byte(secret))
		fmt.Fprintf(mac, "v0:%d:", ts)
		mac.Write(body)
		want := "v0=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(want), []byte(r.Header.Get("X-Slack-Signature"))) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if err := put(r.Context(), body); errors.Is(err, errBadEvent) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// writer commits whatever queued while the previous commit synced.
func (ri *referenceInbox) writer(stop <-chan struct{}) {
	batch := make([]refReq, 0, 256)
	for {
		select {
		case <-stop:
			return
		case req := <-ri.reqs:
			batch = append(batch[:0], req)
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case req := <-ri.reqs:
				batch = append(batch, req)
			default:
				break more
			}
		}
		err := ri.commit(batch)
		for _, req := range batch {
			req.done <- err
		}
	}
}

func (ri *referenceInbox) commit(batch []refReq) error {
	tx, err := ri.db.Begin()
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, req := range batch {
		if _, err := tx.Exec(`INSERT INTO inbox (event_id, body, received_at) VALUES (?, ?, ?) ON CONFLICT (event_id) DO NOTHING`,
			req.id, req.body, now); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}
