package guardrails

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// FuzzParseAnswer: the reader of the service's answer never panics, and
// what it reads is in contract terms: a known level (an unknown one reads
// as high, so that it never lets content through), categories known to the
// contract (others as "other"), each once, in the contract's fixed order.
// The default policy then decides block, review or pass, never a failure.
// Seeds: testdata/fuzz/FuzzParseAnswer.
func FuzzParseAnswer(f *testing.F) {
	checker, err := New(Config{URL: "http://127.0.0.1:1", APIKey: "k"}, nil, "", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := parseAnswer(data)
		var raw serviceAnswer
		readable := json.Unmarshal(data, &raw) == nil && raw.OverallRiskLevel != nil
		if err != nil {
			if readable {
				t.Fatalf("refused a readable answer: %v", err)
			}
			return
		}
		if !readable {
			t.Fatalf("read an unreadable answer as %+v", a)
		}

		want, known := serviceLevels[strings.TrimSpace(*raw.OverallRiskLevel)]
		if !known {
			want = RiskHigh
		}
		if a.Risk != want {
			t.Fatalf("overall %q read as %q, want %q", *raw.OverallRiskLevel, a.Risk, want)
		}
		last := -1
		for _, c := range a.Categories {
			i := slices.Index(categoryNames, c)
			if i <= last {
				t.Fatalf("categories %q: unknown, repeated or out of order", a.Categories)
			}
			last = i
		}
		for _, c := range slices.Concat(raw.Result.Compliance.Categories, raw.Result.Security.Categories) {
			c = strings.TrimSpace(c)
			name, ok := serviceCategories[c]
			switch {
			case c == "":
				continue
			case !ok && slices.Contains(categoryNames, c):
				name = c
			case !ok:
				name = CategoryOther
			}
			if !slices.Contains(a.Categories, name) {
				t.Fatalf("category %q lost: %q", c, a.Categories)
			}
		}

		v := checker.decide(a)
		switch {
		case v.Risk == RiskHigh && v.Action != ActionBlock,
			v.Risk != RiskHigh && v.Action == ActionBlock,
			!v.Forward() && v.Action != ActionBlock:
			t.Fatalf("risk %q decided %q by the default policy", v.Risk, v.Action)
		}
		if _, err := json.Marshal(v.BlockedBody()); err != nil {
			t.Fatal(err)
		}
	})
}
