package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The complete prefix through the API: /labels writes a pending line (label
// and agree null) for each audited question not labelled yet, so that an
// export holds the whole audited sample; /progress takes evidence only up
// to the first audited entry that is not complete, and names it; a pass
// completes an entry, its lines marked pass; a correction after an entry
// was taken as evidence leaves the export as it was and is counted in
// late_corrections.
func TestReviewCompletePrefix(t *testing.T) {
	s := newStack(t, stackOptions{review: "correct_within 0s\n\t\t\tmax_questions 2"})
	questions := `[{"id":"a","type":"noul","route":"auto","confidence":0.9,"answer":0.8},{"id":"b","type":"noul","route":"auto","confidence":0.7,"answer":0.8}]`
	var ids []string
	for _, rid := range []string{"r1", "r2", "r3"} {
		ids = append(ids, s.addEntry(t, true, "request_id", rid, "questions", questions))
	}
	s.addEntry(t, false, "request_id", "r4", "questions", questions) // not audited: no pending line

	export := func() []map[string]any {
		t.Helper()
		resp, body := s.call(t, http.MethodGet, "/review/labels", "")
		if resp.StatusCode != 200 {
			t.Fatalf("/labels: %d %s", resp.StatusCode, body)
		}
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			out = append(out, m)
		}
		return out
	}
	progress := func() map[string]any {
		t.Helper()
		resp, body := s.call(t, http.MethodGet, "/review/progress?target=0.9", "")
		var doc struct{ Groups []map[string]any }
		if resp.StatusCode != 200 || json.Unmarshal(body, &doc) != nil || len(doc.Groups) != 1 {
			t.Fatalf("/progress: %d %s", resp.StatusCode, body)
		}
		return doc.Groups[0]
	}
	put := func(id, body string) {
		t.Helper()
		if resp, b := s.call(t, http.MethodPut, "/review/items/"+id+"/labels", body); resp.StatusCode != 204 {
			t.Fatalf("PUT %s %s: %d %s", id, body, resp.StatusCode, b)
		}
	}

	lines := export()
	if len(lines) != 6 {
		t.Fatalf("nothing labelled: %d lines, want a pending line per audited question (6): %v", len(lines), lines)
	}
	for _, l := range lines {
		if _, ok := l["label"]; !ok || l["label"] != nil || l["agree"] != nil || l["audit"] != true {
			t.Errorf("pending line %v: want label and agree null", l)
		}
	}

	put(ids[1], `{"labels":{"a":true,"b":true},"reviewer":"ann"}`)
	put(ids[0], `{"labels":{"a":true},"reviewer":"ann"}`)
	g := progress()
	if g["waiting_on"] != ids[0] || g["complete_through"] != nil || g["labels"] != 0.0 || g["waiting"] != 3.0 {
		t.Errorf("entry 1 half labelled: %v, want waiting_on %s, nothing complete, 3 labels waiting", g, ids[0])
	}

	put(ids[0], `{"pass":true,"reviewer":"bob"}`)
	g = progress()
	if g["waiting_on"] != ids[2] || g["complete_through"] != ids[1] || g["labels"] != 4.0 || g["late_corrections"] != 0.0 {
		t.Errorf("entry 1 passed: %v, want complete through %s, waiting on %s", g, ids[1], ids[2])
	}
	passes := 0
	for _, l := range export() {
		if l["entry"] == ids[0] {
			if l["pass"] != true || l["agree"] != nil || l["label"] != nil {
				t.Errorf("passed line %v", l)
			}
			passes++
		}
	}
	if passes != 2 {
		t.Errorf("%d lines of the passed entry, want 2", passes)
	}
	if resp, body := s.call(t, http.MethodPut, "/review/items/"+ids[2]+"/labels", `{"pass":"yes"}`); resp.StatusCode != 422 {
		t.Errorf(`pass "yes": %d %s, want 422`, resp.StatusCode, body)
	}
	if resp, body := s.call(t, http.MethodPut, "/review/items/"+ids[2]+"/labels", `{"pass":true,"labels":{"a":true}}`); resp.StatusCode != 422 {
		t.Errorf("pass with labels: %d %s, want 422", resp.StatusCode, body)
	}

	// Entry 2 was taken (window 0s): a correction is late.
	before := export()
	put(ids[1], `{"labels":{"a":false,"b":false},"reviewer":"ann"}`)
	after := export()
	if len(before) != len(after) {
		t.Fatalf("a late correction changed the export: %d lines, then %d", len(before), len(after))
	}
	for i := range before {
		if before[i]["entry"] == ids[1] && before[i]["agree"] != after[i]["agree"] {
			t.Errorf("a late correction changed the evidence: %v then %v", before[i], after[i])
		}
	}
	if g = progress(); g["late_corrections"] != 2.0 {
		t.Errorf("late_corrections %v, want 2", g["late_corrections"])
	}
}
