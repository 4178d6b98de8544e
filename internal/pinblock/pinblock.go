// Package pinblock reads, for tests, the `pin` and `escalate` blocks that
// `calibrate` prints, as an operator pastes them into a route block.
package pinblock

import (
	"regexp"
	"strconv"
	"testing"
)

// Find returns the pin block of version in calibrate's output, and fails
// the test when there is none.
func Find(t testing.TB, out, version string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)\tpin ` + regexp.QuoteMeta(version) + ` \{\n.*?\n\t\}`).FindString(out)
	if m == "" {
		t.Fatalf("no pin %s in:\n%s", version, out)
	}
	return m
}

// FindEscalate returns the escalate block from version first to second in
// calibrate's output, and fails the test when there is none.
func FindEscalate(t testing.TB, out, first, second string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)\tescalate ` + regexp.QuoteMeta(first) + ` to ` + regexp.QuoteMeta(second) + ` \{\n.*?\n\t\}`).FindString(out)
	if m == "" {
		t.Fatalf("no escalate %s to %s in:\n%s", first, second, out)
	}
	return m
}

var noulRE = regexp.MustCompile(`noul ([0-9.]+)`)

// Noul reads the noul threshold of a pin or escalate block, and fails the test when it
// has none.
func Noul(t testing.TB, pin string) float64 {
	t.Helper()
	m := noulRE.FindStringSubmatch(pin)
	if m == nil {
		t.Fatalf("no noul threshold in %s", pin)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
