//go:build !race

package server_test

// raceSlowdown scales time bounds under the race detector (see
// race_on_test.go); without it the bounds are the spec's own.
const raceSlowdown = 1
