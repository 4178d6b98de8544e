package guardrails

import (
	"net/http"
	"testing"
)

func TestSetHeaders(t *testing.T) {
	tests := []struct {
		v                      Verdict
		risk, action, category string
	}{
		{Verdict{Risk: RiskNone, Action: ActionPass}, "none", "pass", ""},
		{Verdict{Risk: RiskMedium, Action: ActionReview, Categories: []string{"pornography", "other"}}, "medium", "review", "pornography,other"},
		{Verdict{Risk: RiskLow, Action: ActionPass, Categories: []string{"abuse"}}, "low", "pass", "abuse"},
		{Verdict{Risk: RiskUnknown, Action: ActionUnchecked}, "unknown", "unchecked", ""},
		// Not forwarded: no headers.
		{Verdict{Risk: RiskHigh, Action: ActionBlock, Categories: []string{"abuse"}}, "", "", ""},
		{Verdict{Risk: RiskUnknown, Action: ActionUnavailable, Unavailable: true}, "", "", ""},
	}
	for _, tt := range tests {
		// The upstream's own X-Guardrails-* headers never pass as ours.
		h := http.Header{}
		h.Set(HeaderRisk, "forged")
		h.Set(HeaderAction, "forged")
		h.Set(HeaderCategories, "forged")
		h.Set("X-Other", "kept")
		tt.v.SetHeaders(h)
		for name, want := range map[string]string{HeaderRisk: tt.risk, HeaderAction: tt.action, HeaderCategories: tt.category} {
			if got := h.Values(name); (want == "" && len(got) != 0) || (want != "" && (len(got) != 1 || got[0] != want)) {
				t.Errorf("%+v: %s = %q, want %q", tt.v, name, got, want)
			}
		}
		if h.Get("X-Other") != "kept" {
			t.Error("another header was touched")
		}
	}
}

func TestBlockedBody(t *testing.T) {
	v := Verdict{Risk: RiskHigh, Categories: []string{"violent_crime", "prompt_attack"}, ServiceAction: "answer_on_behalf", SuggestAnswer: "抱歉，\"这个\"<问题>我不能回答。", Action: ActionBlock}
	want := `{"detail":"guardrails_blocked","guardrails":{"risk_level":"high","categories":["violent_crime","prompt_attack"],"action":"answer_on_behalf","suggest_answer":"抱歉，\"这个\"\u003c问题\u003e我不能回答。"}}`
	if got := string(v.BlockedBody()); got != want {
		t.Errorf("body\n got %s\nwant %s", got, want)
	}
	v = Verdict{Risk: RiskHigh, ServiceAction: "block", Action: ActionBlock}
	want = `{"detail":"guardrails_blocked","guardrails":{"risk_level":"high","categories":[],"action":"block","suggest_answer":""}}`
	if got := string(v.BlockedBody()); got != want {
		t.Errorf("body\n got %s\nwant %s", got, want)
	}
}

func TestForward(t *testing.T) {
	for action, want := range map[string]bool{ActionPass: true, ActionReview: true, ActionUnchecked: true, ActionBlock: false, ActionUnavailable: false, "": false} {
		if got := (Verdict{Action: action}).Forward(); got != want {
			t.Errorf("Forward() of %q = %v", action, got)
		}
	}
}
