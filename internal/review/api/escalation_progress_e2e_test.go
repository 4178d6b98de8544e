package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// /progress shows an escalated question's second answers as a group of
// their own (stage 2, escalated_from the first version), calibrated at
// half of delta as the first version's type is, never as the second
// version's own answers, with the escalate block's threshold in force.
func TestProgressOfEscalatedQuestions(t *testing.T) {
	s := newEscalationStack(t)
	resp := s.askIDs(t, "sure", "esc", "hard")
	id := lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id"))
	s.put(t, id, map[string]any{"sure": true, "esc": true, "hard": true})

	r, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/progress?target=0.9", ""))
	var doc struct {
		Groups []map[string]any `json:"groups"`
	}
	if r.StatusCode != http.StatusOK || json.Unmarshal(raw, &doc) != nil {
		t.Fatalf("progress: %d %s", r.StatusCode, raw)
	}
	var got []string
	for _, g := range doc.Groups {
		inForce, _ := g["in_force"].(map[string]any)
		got = append(got, fmt.Sprintf("%v %v stage=%v from=%v under=%v delta=%v labels=%v in_force=%v", g["model"], g["type"], g["stage"], g["escalated_from"], g["under_threshold"], g["delta"], g["labels"], inForce["threshold"]))
	}
	// One entry gives the first version no threshold: both of its
	// escalated questions' second answers count. The threshold in force
	// of the second stage is the escalate block's, as its routes show it:
	// esc's second answer routed auto at 0.75, below the pin's 0.8 (hard's,
	// at 0.25, routed human); the first version's is sure's 0.875.
	want := []string{
		"service-1.0.0 noul stage=1 from= under=<nil> delta=0.025 labels=3 in_force=0.875",
		"service-2.0.0 noul stage=2 from=service-1.0.0 under=<nil> delta=0.025 labels=2 in_force=0.75",
	}
	if !slices.Equal(got, want) {
		t.Errorf("progress groups\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
