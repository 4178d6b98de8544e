package certificate

import (
	"bytes"
	"strings"
	"testing"
)

func sample() Certificate {
	return Certificate{
		Model: "service-1.0.0", Type: "noul", Org: "acme", By: "org", MinLabels: 30,
		Threshold: 0.7442, Target: 0.95, Delta: 0.05, Method: "anytime",
		Entries: 61, Lines: 70, Agree: 70, Evidence: 25.5,
		LabelsSHA256: strings.Repeat("ab", 32),
		LabelsUntil:  "2026-11-26T10:00:00Z", Created: "2026-11-26T10:01:00Z",
	}
}

// The id is computed as the contract says, checked against an independent
// computation: Python's json.dumps(c, sort_keys=True,
// separators=(',', ':')) without "id", then hashlib.sha256, first 16 hex
// digits.
func TestSealMatchesIndependentComputation(t *testing.T) {
	c := sample().Seal()
	if c.ID != "1d2403ecac875758" {
		t.Fatalf("id %s, want 1d2403ecac875758", c.ID)
	}
	if !ValidID(c.ID) || !c.Sealed() {
		t.Fatal("a sealed certificate does not check")
	}
	c.Agree--
	if c.Sealed() {
		t.Fatal("an edited certificate still checks")
	}
}

func TestWriteReadRoundTripAndRefusesEdits(t *testing.T) {
	a, b := sample().Seal(), sample()
	b.Type = "choice"
	b = b.Seal()
	var buf bytes.Buffer
	if err := Write(&buf, []Certificate{a, b}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil || len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("round trip: %v %+v", err, got)
	}
	edited := strings.Replace(buf.String(), `"agree":70`, `"agree":69`, 1)
	if _, err := Read(strings.NewReader(edited)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("an edited line reads: %v", err)
	}
	if _, err := Read(strings.NewReader(`{"id":"x","bogus":1}` + "\n")); err == nil {
		t.Fatal("an unknown field reads")
	}
}

// The digest sorts by entry id as numbers (9-0 before 10-1), then
// question, writes keys sorted and values as in the line (1e-3 stays
// 1e-3), and is checked against Python's hashlib over the same text.
func TestDigestMatchesIndependentComputation(t *testing.T) {
	var d Digest
	for _, l := range []string{
		`{"entry":"10-1","question":"b","ts":"2026-11-26T09:00:00Z","label":true,"confidence":0.9}`,
		`{"entry":"9-0","question":"z","ts":"2026-11-26T09:30:00Z","label":"x","confidence": 1e-3}`,
		`{"entry":"10-1","question":"a","ts":"2026-11-26T08:00:00Z","label":2,"confidence":null}`,
	} {
		if err := d.Add([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	sum, until := d.Sum()
	if sum != "f103bb61304926666d99ebfe0ce68d51ff4c03463ffe4fa972b439cac7a5dd2d" {
		t.Fatalf("sha256 %s", sum)
	}
	if until != "2026-11-26T09:30:00Z" || d.Len() != 3 {
		t.Fatalf("until %s len %d", until, d.Len())
	}
	if err := d.Add([]byte(`{"entry":"x","question":"a"}`)); err == nil {
		t.Fatal("a line without a stream id adds")
	}
}

func TestDifferencesNameWhatChanged(t *testing.T) {
	a := sample()
	if d := Differences(a, a); len(d) != 0 {
		t.Fatalf("same certificate differs: %v", d)
	}
	b := a
	b.LabelsSHA256 = strings.Repeat("cd", 32)
	b.Agree = 69
	b.Threshold = 0.8
	d := strings.Join(Differences(a, b), "; ")
	for _, want := range []string{"labels changed", "threshold 0.7442, now 0.8", "agree 70, now 61 70 69"} {
		if !strings.Contains(d, want) {
			t.Errorf("differences %q lack %q", d, want)
		}
	}
	none := Certificate{}
	if d := strings.Join(Differences(a, none), "; "); !strings.Contains(d, "now none") {
		t.Errorf("a group without a threshold: %q", d)
	}
}

func TestUntil(t *testing.T) {
	if !Until("2026-11-26T09:00:00Z", "2026-11-26T09:00:00Z") || Until("2026-11-26T09:00:01Z", "2026-11-26T09:00:00Z") || Until("bad", "2026-11-26T09:00:00Z") {
		t.Fatal("Until")
	}
}
