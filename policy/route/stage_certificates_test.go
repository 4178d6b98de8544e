package route

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// An escalate line's certificate is checked as a pin line's is (its group
// is the escalate block's: second version, first version, type or
// question), and a certificate computed under another threshold of the
// first version than its pin holds now is a warning at load, never a
// refusal: the gateway still answers, and the operator learns the second
// stage's promise is about other questions.
func TestEscalateCertificates(t *testing.T) {
	first := certificate.Certificate{Model: "A", Type: "noul", Threshold: 0.8, Method: "anytime", DeltaUsed: 0.025}.Seal()
	under := 0.8
	path, c := certificatesFile(t,
		first,
		certificate.Certificate{Model: "B", Type: "noul", Threshold: 0.7, Method: "anytime", DeltaUsed: 0.025,
			Stage: 2, EscalatedFrom: "A", UnderThreshold: &under, UnderCert: first.ID},
		certificate.Certificate{Model: "B", Type: "choice", Threshold: 0.6, Method: "anytime", Stage: 2, EscalatedFrom: "A"}, // under none
	)
	firstID, second, secondNone := c[0].ID, c[1].ID, c[2].ID
	config := func(pin Pin, to Pin) Config {
		pin.Version, to.Version = "A", "B"
		return Config{Pins: []Pin{pin}, Escalations: []Escalation{{From: "A", To: to}}, Certificates: path}
	}
	load := func(t *testing.T, cfg Config) []observer.LoggedEntry {
		t.Helper()
		core, logs := observer.New(zapcore.WarnLevel)
		r, err := New(cfg, nil, "", zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		return logs.FilterMessage(MessageStageMismatch).All()
	}

	good := config(Pin{Noul: ptr(0.8), NoulCert: firstID}, Pin{Noul: ptr(0.7), NoulCert: second, Choice: ptr(0.6), ChoiceCert: secondNone})
	if mismatches, checked := good.CertificateMismatches(c); len(mismatches) != 0 || checked != 3 {
		t.Errorf("CertificateMismatches: %v, %d checked; want none of 3", mismatches, checked)
	}
	if got := good.StageMismatches(c); len(got) != 0 {
		t.Errorf("StageMismatches: %v", got)
	}
	if logged := load(t, good); len(logged) != 0 {
		t.Errorf("warnings for a block under its pin: %v", logged)
	}

	// The pin moved: a warning per line computed under another threshold.
	moved := config(Pin{Noul: ptr(0.85), Choice: ptr(0.5)}, Pin{Noul: ptr(0.7), NoulCert: second, Choice: ptr(0.6), ChoiceCert: secondNone})
	if err := moved.Validate(); err != nil {
		t.Fatalf("a moved pin is a warning, not a refusal: %v", err)
	}
	want := []string{
		`escalate "A" to "B": noul 0.7 cert ` + second + `: certificate ` + second + ` was computed under pin "A"'s noul threshold 0.8, and the pin's is now 0.85: its threshold is about the questions escalated under the first, not those escalated now; calibrate the block again, or put the pin's threshold back`,
		`escalate "A" to "B": choice 0.6 cert ` + secondNone + `: certificate ` + secondNone + ` was computed under pin "A"'s choice threshold none (every question escalated), and the pin's is now 0.5: its threshold is about the questions escalated under the first, not those escalated now; calibrate the block again, or put the pin's threshold back`,
	}
	got := moved.StageMismatches(c)
	if len(got) != len(want) {
		t.Fatalf("StageMismatches: %v", got)
	}
	for i := range want {
		if got[i].Error() != want[i] {
			t.Errorf("mismatch %d:\n%s\nwant\n%s", i, got[i], want[i])
		}
	}
	logged := load(t, moved)
	if len(logged) != 2 || logged[0].ContextMap()["mismatch"] != want[0] || logged[0].ContextMap()["certificates"] != path {
		t.Errorf("warnings at load: %v", logged)
	}

	// The same threshold as the fragment writes it matches; a pin line
	// carrying another certificate than the one the second stage names
	// does not.
	other := certificate.Certificate{Model: "A", Type: "noul", Threshold: 0.79995, Method: "anytime"}.Seal()
	path2, c2 := certificatesFile(t, c[0], c[1], c[2], other)
	rounded := config(Pin{Noul: ptr(0.8), NoulCert: other.ID}, Pin{Noul: ptr(0.7), NoulCert: second})
	rounded.Certificates = path2
	if got := rounded.StageMismatches(c2); len(got) != 1 || !strings.Contains(got[0].Error(), "was computed under the threshold of certificate "+firstID+", and the pin's line carries certificate "+other.ID) {
		t.Errorf("another first-stage certificate: %v", got)
	}

	// A second stage's certificate on a pin line, or a first stage's on an
	// escalate line, is of another group: refused like any mismatch.
	for name, tt := range map[string]struct {
		cfg  Config
		want string
	}{
		"a second stage's on a pin": {config(Pin{Noul: ptr(0.7), NoulCert: second}, Pin{Noul: ptr(0.7)}),
			`pin "A": noul 0.7 cert ` + second + `: certificate ` + second + ` is for escalate "A" to "B" noul`},
		"a first stage's on an escalate line": {config(Pin{Noul: ptr(0.8)}, Pin{Noul: ptr(0.8), NoulCert: firstID}),
			`escalate "A" to "B": noul 0.8 cert ` + firstID + `: certificate ` + firstID + ` is for pin "A" noul`},
	} {
		if err := tt.cfg.Validate(); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v\nwant %s", name, err, tt.want)
		}
	}
}
