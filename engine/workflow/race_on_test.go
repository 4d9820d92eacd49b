//go:build race

package workflow

// raceSlowdown scales time bounds under the race detector, which makes
// the compiler 5–10× slower; the bounds stay far below what the unbounded
// parse cost (25 s to minutes at 1 MiB).
const raceSlowdown = 4
