//go:build !race

package workflow

// raceSlowdown scales time bounds under the race detector (see
// race_on_test.go).
const raceSlowdown = 1
