// Package wait is for tests: it waits for a condition another goroutine or
// process brings about, polling, and fails the test if it does not come
// within a bound far above any healthy wait, so that a bug reads as a
// failure rather than a hang. It is a condition, not a deadline: no test
// passes or fails on how fast something is.
package wait

import (
	"errors"
	"testing"
	"time"
)

// Bound is how long Until waits before it fails the test.
const Bound = 10 * time.Second

// errNotYet is what Until's condition reports while it does not hold.
var errNotYet = errors.New("not yet")

// Until polls cond every 200µs to 2ms until it holds, and fails the test
// (naming what it waited for) if it does not within Bound.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll(t, Bound, 2*time.Millisecond, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// Within is Until with a bound of its own (Bound unless a healthy wait can
// take longer: a process outside the test starting) and a condition that
// says what it saw: nil when it holds, else an error the failure quotes,
// the last one seen. Its pauses grow to a hundredth of the bound (at
// least 2ms): its conditions often ask another process.
func Within(t testing.TB, bound time.Duration, what string, cond func() error) {
	t.Helper()
	poll(t, bound, max(bound/100, 2*time.Millisecond), what, cond)
}

// poll is Until and Within: cond every 200µs, doubling to longest.
func poll(t testing.TB, bound, longest time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	pause := 200 * time.Microsecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("waited %s for %s", bound, what)
			}
			t.Fatalf("waited %s for %s: %v", bound, what, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, longest)
	}
}
