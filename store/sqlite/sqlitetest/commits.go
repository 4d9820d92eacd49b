package sqlitetest

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// CommitsPerSecond measures single-row commits at synchronous=FULL (WAL) in
// a scratch database in dir, one transaction each: the fsync limit that
// group commit amortises, measured on the same disk in the same run as the
// figures a benchmark reads against it.
func CommitsPerSecond(tb testing.TB, dir string) float64 {
	tb.Helper()
	raw, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "commits.db")+"?_journal_mode=WAL&_synchronous=FULL")
	if err != nil {
		tb.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	if _, err := raw.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		tb.Fatal(err)
	}
	const n = 300
	start := time.Now()
	for i := range n {
		if _, err := raw.Exec(`INSERT INTO t (v) VALUES (?)`, fmt.Sprint(i)); err != nil {
			tb.Fatal(err)
		}
	}
	return n / time.Since(start).Seconds()
}
