// Package wait is for tests: it waits for a condition another goroutine or
// process brings about, polling, and fails the test if it does not come
// within a bound far above any healthy wait, so that a bug reads as a
// failure rather than a hang. It is a condition, not a deadline: no test
// passes or fails on how fast something is.
package wait

import (
	"testing"
	"time"
)

// Bound is how long Until waits before it fails the test.
const Bound = 10 * time.Second

// Until polls cond every 200µs to 2ms until it holds, and fails the test
// (naming what it waited for) if it does not within Bound.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Bound)
	pause := 200 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", Bound, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
}
