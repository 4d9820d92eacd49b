//go:build race

package web

// raceSlowdown scales time bounds under the race detector, which makes
// the markdown renderer 7–9× slower; the bounds stay far below what the
// unbounded parse cost (minutes at 1 MiB).
const raceSlowdown = 4
