//go:build race

package thread_test

// raceSlowdown scales time bounds under the race detector, which makes
// decoding and the driver several times slower (make test runs with it;
// the benchmark is the figure without it).
const raceSlowdown = 10
