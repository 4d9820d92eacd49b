//go:build !race

package thread_test

// raceSlowdown scales time bounds under the race detector (see
// race_on_test.go); without it the bound is issue 11's own.
const raceSlowdown = 1
