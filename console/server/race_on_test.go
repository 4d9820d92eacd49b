//go:build race

package server_test

// raceSlowdown scales time bounds under the race detector, which makes
// this code several times slower; the bounds stay far below what the
// unbounded search cost (seconds per query, 40 s for a listing).
const raceSlowdown = 5
