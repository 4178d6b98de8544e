package caddyfile

import (
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/policy/route"
)

func TestUnmarshalActiveAudit(t *testing.T) {
	t.Setenv("SYSTEMONE_TEST_SHARE", "0.05")
	for input, want := range map[string]route.ActiveAudit{
		"audit active {env.SYSTEMONE_TEST_SHARE}": {MaxShare: 0.05},
		"audit active 0.2 floor 0.01":             {MaxShare: 0.2, Floor: 0.01},
		"audit active 0.2 from 0.7 floor 0.05":    {MaxShare: 0.2, Floor: 0.05, From: ptr(0.7)},
		"audit active 1 from 0":                   {MaxShare: 1, From: ptr(0.0)},
	} {
		h, err := parseString(t, "systemone {\n route {\n queue s\n "+input+"\n }\n}")
		if err != nil {
			t.Errorf("%q: %v", input, err)
			continue
		}
		got := h.Route.ActiveAudit
		if got == nil || got.MaxShare != want.MaxShare || got.Floor != want.Floor ||
			(got.From == nil) != (want.From == nil) || got.From != nil && *got.From != *want.From || h.Route.Audit != 0 {
			t.Errorf("%q: %+v, want %+v", input, got, want)
		}
	}
	// The uniform form is untouched.
	h, err := parseString(t, "systemone {\n route {\n queue s\n audit 0.05\n }\n}")
	if err != nil || h.Route.Audit != 0.05 || h.Route.ActiveAudit != nil {
		t.Errorf("audit 0.05: %v %+v", err, h.Route)
	}
}

func TestUnmarshalActiveAuditErrors(t *testing.T) {
	for input, want := range map[string]string{
		"audit active":                        "wrong argument count",
		"audit active x":                      `"x" is not a number`,
		"audit active 0":                      "share 0 is not in (0, 1]",
		"audit active 1.5":                    "share 1.5 is not in (0, 1]",
		"audit active 0.1 floor 0":            "floor must not be 0: leave it out for its default",
		"audit active 0.1 floor 0.2":          "floor 0.2 is not in (0, 0.1]",
		"audit active 0.1 floor":              "wrong argument count",
		"audit active 0.1 from 1.2":           "from 1.2 is outside 0..1",
		"audit active 0.1 from 0.5 from 0.6":  "duplicate from",
		"audit active 0.1 ceiling 0.5":        `not "ceiling"`,
		"audit 0.1\n audit active 0.1":        "duplicate audit",
		"audit active 0.1 floor 0.01 extra 1": `not "extra"`,
	} {
		_, err := parseString(t, "systemone {\n route {\n queue s\n "+input+"\n }\n}")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", input, err, want)
		}
	}
	if _, err := parseString(t, "systemone {\n route {\n audit active 0.1\n }\n}"); err == nil || !strings.Contains(err.Error(), "needs a queue") {
		t.Errorf("active audit without a queue: %v", err)
	}
}
