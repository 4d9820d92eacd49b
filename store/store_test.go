package store

import (
	"testing"
	"time"
)

// TestNewIDSortsInCreationOrder: ids made one after another sort, as text,
// in the order they were made, as NewID promises. Its base32 alphabet used
// to put digits after letters, so ids sorted out of order each time a
// character passed from z to 2 (every 512 ns at the tenth character).
func TestNewIDSortsInCreationOrder(t *testing.T) {
	t.Parallel()
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = NewID("run")
		// The next id's clock reading is later than this one's.
		for after := time.Now(); !time.Now().After(after); {
		}
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] < ids[i-1] {
			t.Fatalf("id %d sorts before the one made just before it: %s < %s", i, ids[i], ids[i-1])
		}
	}
}
