package record

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" when rejected
	}{
		{"1700000000000-0", "1700000000000-0"},
		{"0-1", "0-1"},
		{"007-08", "7-8"},
		{"18446744073709551615-18446744073709551615", "18446744073709551615-18446744073709551615"},
		{"18446744073709551616-0", ""},
		{"123", ""},
		{"+1-2", ""},
		{"1-+2", ""},
		{"-1", ""},
		{"1-", ""},
		{"1_0-2", ""},
		{"a-b", ""},
		{"", ""},
		{"1-2-3", ""},
	} {
		id, ok := ParseID(tc.in)
		if got := map[bool]string{true: id.String(), false: ""}[ok]; got != tc.want {
			t.Errorf("ParseID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	a, _ := ParseID("9-5")
	b, _ := ParseID("10-0")
	if a.Compare(b) >= 0 || b.Compare(a) <= 0 || a.Compare(a) != 0 {
		t.Errorf("9-5 must come before 10-0")
	}
}

func TestAgree(t *testing.T) {
	for _, tc := range []struct {
		typ, label, answer string
		want               bool
	}{
		{"noul", "true", "0.5", true},
		{"noul", "true", "0.49", false},
		{"noul", "false", "0.49", true},
		{"noul", "false", "1", false},
		{"noul", "true", "null", false},
		{"noul", "true", `"0.9"`, false},
		{"choice", `"good"`, `"good"`, true},
		{"choice", `"good"`, `"bad"`, false},
		{"choice", `"null"`, "null", false},
		{"choice", `""`, "null", false},
		{"score", "2", "1.5", true},
		{"score", "2", "2.5", true},
		{"score", "2", "1.49", false},
		{"score", "0", "0.51", false},
		{"score", "2", "", false},
		{"other", "true", "1", false},
	} {
		var answer json.RawMessage
		if tc.answer != "" {
			answer = json.RawMessage(tc.answer)
		}
		if got := Agree(tc.typ, json.RawMessage(tc.label), answer); got != tc.want {
			t.Errorf("agree(%s, %s, %s) = %v", tc.typ, tc.label, tc.answer, got)
		}
	}
}

func TestPendingAndPassLines(t *testing.T) {
	c := 0.9
	for _, tc := range []struct {
		l    Label
		want string
	}{
		{Label{Entry: "1-0", Model: "m", Type: "noul", Question: "q", Confidence: &c, Audit: true, Pending: true}, `"agree":null`},
		{Label{Entry: "1-0", Model: "m", Type: "noul", Question: "q", Confidence: &c, Audit: true, Pass: true, Label: json.RawMessage("true")}, `"pass":true`},
	} {
		b, err := tc.l.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) || !strings.Contains(string(b), `"agree":null`) || !strings.Contains(string(b), `"label":null`) || !strings.Contains(string(b), tc.want) {
			t.Fatalf("%s: want label and agree null and %s", b, tc.want)
		}
		got, err := ParseLabel(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.Pending != tc.l.Pending || got.Pass != tc.l.Pass || got.Agree {
			t.Errorf("%s read back as pending %v pass %v agree %v", b, got.Pending, got.Pass, got.Agree)
		}
	}
	for _, bad := range []string{
		`{"model":"m","type":"noul","question":"q","confidence":0.5,"audit":true,"label":true,"agree":null}`,
		`{"model":"m","type":"noul","question":"q","confidence":0.5,"audit":true,"label":null,"agree":true,"pass":true}`,
		`{"model":"m","type":"noul","question":"q","confidence":0.5,"audit":true,"agree":true,"pass":1}`,
	} {
		if _, err := ParseLabel([]byte(bad)); err == nil {
			t.Errorf("%s: read without an error", bad)
		}
	}
}
