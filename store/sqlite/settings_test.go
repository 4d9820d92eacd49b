package sqlite

import "testing"

// TestMemoryAccountingOff: the setting only takes before SQLite starts, so
// an open, or the auto-extension's registration, moved ahead of it would
// silently lose it.
func TestMemoryAccountingOff(t *testing.T) {
	if memstatusRC != 0 {
		t.Fatalf("sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) answered %d", memstatusRC)
	}
}
