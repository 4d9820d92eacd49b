package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// TestReasonOf: the sentence a surface shows for an error never starts
// with a sentinel's own word ("conflict: …"), however the error was built.
func TestReasonOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{Refuse(ErrInvalid, "title is required"), "title is required"},
		{fmt.Errorf("%w: workflow /x is paused, not live", ErrConflict), "workflow /x is paused, not live"},
		{fmt.Errorf("memo write: %w", Refuse(ErrConflict, "version 3 is not current")), "version 3 is not current"},
		{fmt.Errorf("%w: payload.tags has 51 tags", ErrInvalid), "payload.tags has 51 tags"},
		{fmt.Errorf("no workflow has the command /x: %w", ErrNotFound), "no workflow has the command /x"},
		{fmt.Errorf("memo update mem_1: %w", fmt.Errorf("%w: memo is at version 2, expected 1", ErrConflict)), "memo is at version 2, expected 1"},
		{fmt.Errorf("session create: %w: tag slack:C1:1 is taken", ErrConflict), "tag slack:C1:1 is taken"},
		{errors.New("disk on fire"), "disk on fire"},
	} {
		require.Equal(t, tc.want, ReasonOf(tc.err), tc.err.Error())
	}
}
