package monitor

import "testing"

// simulationOnly marks a test as one of the monitor's simulations: many runs
// of pure computation, no goroutines, so the race detector has nothing to
// find in them and only makes them ten times slower. Under it they are
// skipped; .ci/run runs them once more without it (its step "the
// guarantee's simulations"), so CI always runs them.
func simulationOnly(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a simulation: .ci/run runs it without the race detector")
	}
}
