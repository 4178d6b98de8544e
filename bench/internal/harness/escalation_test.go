package harness

import (
	"net/http"
	"slices"
	"testing"
)

// X asks again exactly the questions below the pin's threshold of their
// type: noul by |2p-1| (0.8), choice (0.6) and score (0.5) by confidence.
func TestEscalatedQuestions(t *testing.T) {
	body := []byte(`{"model":"service-latest","state":"s","questions":{` +
		`"n1":{"type":"noul","instructions":"?"},"n2":{"type":"noul","instructions":"?"},` +
		`"c1":{"type":"choice","instructions":"?","criteria":{"a":null,"b":null}},` +
		`"s1":{"type":"score","instructions":"?","criteria":["x","y"]}}}`)
	first := []byte(`{"model":"service-1.0.0","answers":{` +
		`"n1":{"type":"noul","noul":0.95},"n2":{"type":"noul","noul":0.85},` +
		`"c1":{"type":"choice","choice":"a","probabilities":{"a":0.59,"b":0.41},"confidence":0.59},` +
		`"s1":{"type":"score","score":0.4,"legend":{"0":"x","1":"y"},"probabilities":{"0":0.6,"1":0.4},"confidence":0.6}},` +
		`"usage":{"input_tokens":10,"output_tokens":1}}`)
	esc, err := escalatedQuestions(body, first)
	if err != nil {
		t.Fatal(err)
	}
	// n1: confidence 0.9; n2: 0.7 (below 0.8); c1: 0.59 (below 0.6); s1: 0.6.
	if !slices.Equal(esc.Asked, []string{"n2", "c1"}) || esc.Questions != 4 || esc.String() != "2 of 4 questions asked again" {
		t.Errorf("asked %v of %d, want n2 and c1 of 4", esc.Asked, esc.Questions)
	}
	if _, err := escalatedQuestions(body, []byte(`{"model":"service-1.0.0","answers":{}}`)); err == nil {
		t.Error("an answer missing a question read")
	}
}

// X's answers carry X-Route-Escalated, auto and reason escalated, when
// questions were asked again, and no X-Route-Escalated when none was;
// no other configuration's answer has one.
func TestEscalatedCheck(t *testing.T) {
	base := http.Header{"X-Route": {"auto"}, "X-Route-Model": {"service-1.0.0"}, "X-Ratelimit-Limit-Requests": {"10000000"}}
	escalated := base.Clone()
	escalated.Set("X-Route-Escalated", "n2=service-2.0.0")
	escalated.Set("X-Route-Reason", "escalated")
	partly := escalated.Clone()
	partly.Set("X-Route", "human")
	for _, tc := range []struct {
		asked bool
		h     http.Header
		ok    bool
	}{
		{true, escalated, true}, {true, base, false}, {true, partly, false},
		{false, base, true}, {false, escalated, false},
	} {
		if err := escalatedCheck(tc.asked)(tc.h); (err == nil) != tc.ok {
			t.Errorf("asked %v, headers %v: %v, want ok %v", tc.asked, tc.h, err, tc.ok)
		}
	}
	for _, c := range []string{Limits, EscalationIdle} {
		if err := HeaderCheck(c)(escalated); err == nil {
			t.Errorf("%s accepted an escalated answer", c)
		}
	}
}
