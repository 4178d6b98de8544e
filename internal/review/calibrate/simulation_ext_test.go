package calibrate_test

import (
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
)

// simulationOnly is the package's own (simulation_test.go), for its external
// tests.
func simulationOnly(t *testing.T) {
	t.Helper()
	if calibrate.RaceDetector {
		t.Skip("a simulation: .ci/run runs it without the race detector")
	}
}
