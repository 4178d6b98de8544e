package handlers

import (
	"fmt"
	"strings"
	"testing"
)

// A label keyed by what the upstream answers keeps its first values and
// folds the rest, and names too long to be a version, into "other".
func TestBoundedLabel(t *testing.T) {
	b := newBoundedLabel(3, 16)
	for i := range 3 {
		if got := b.label(fmt.Sprintf("service-%d", i)); got != fmt.Sprintf("service-%d", i) {
			t.Errorf("value %d within the bound: %q", i, got)
		}
	}
	for i := 3; i < 50; i++ {
		if got := b.label(fmt.Sprintf("service-%d", i)); got != otherLabel {
			t.Errorf("value %d past the bound: %q, want other", i, got)
		}
	}
	if got := b.label("service-1"); got != "service-1" {
		t.Errorf("a value seen before: %q", got)
	}
	b = newBoundedLabel(3, 16)
	if got := b.label(strings.Repeat("x", 17)); got != otherLabel {
		t.Errorf("a value over the length bound: %q", got)
	}
	if len(b.seen) != 0 {
		t.Errorf("a value over the length bound took a slot")
	}
}
