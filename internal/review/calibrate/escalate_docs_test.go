package calibrate

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
	"github.com/systemone/systemone-gateway/policy/route"
)

// docs/escalation.md's section on calibrating an escalate block, held to
// the code: its commands run, its example output is the command's, its
// certificates are Certify's, the warning it shows is the router's, and
// its table of human shares is the simulation's.

const escalationDoc = "../../../docs/escalation.md"

// docBlockWith is the fenced block of docs/escalation.md with info
// string info ("" for none) that starts with prefix.
func docBlockWith(t *testing.T, info, prefix string) string {
	t.Helper()
	doc, err := os.ReadFile(escalationDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```" + regexp.QuoteMeta(info) + "\n(" + regexp.QuoteMeta(prefix) + ".*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/escalation.md has no ```%s block starting %q", info, prefix)
	}
	return string(m[1])
}

// The example output is the command's on the example's labels.
func TestEscalationDocExample(t *testing.T) {
	res := exampleResult(t, escalationExample())
	var out bytes.Buffer
	if err := WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	out.WriteString("\n")
	if err := WriteFragment(&out, res); err != nil {
		t.Fatal(err)
	}
	if want := docBlockWith(t, "", "target "); out.String() != want {
		t.Errorf("docs/escalation.md's example output:\n%s\nthe command's:\n%s", want, out.String())
	}
}

// The certificates the page shows are Certify's for the example, written
// at the time they name; the warning it shows is the router's for the
// pin it shows, with those certificates.
func TestEscalationDocCertificates(t *testing.T) {
	text := escalationExample()
	sample, raw, err := ReadSampleRaw(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	opts := exampleOptions()
	res, err := sample.Calibrate(opts)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := Certify(&res, opts, raw, time.Date(2026, 1, 11, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	if err := certificate.Write(&file, certs); err != nil {
		t.Fatal(err)
	}
	if want := docBlockWith(t, "json", `{"id":`); file.String() != want {
		t.Errorf("docs/escalation.md's certificates:\n%s\nCertify's:\n%s", want, file.String())
	}

	// The warning: the pin's line edited by hand to 0.5, its escalate
	// block as calibrate wrote it.
	cfg := route.Config{
		Pins:        []route.Pin{{Version: "service-1.0.0", Noul: ptrTo(0.5)}},
		Escalations: []route.Escalation{{From: "service-1.0.0", To: route.Pin{Version: "service-2.0.0", Noul: ptrTo(certs[1].Threshold), NoulCert: certs[1].ID}}},
	}
	mismatches := cfg.StageMismatches(certs)
	if len(mismatches) != 1 {
		t.Fatalf("StageMismatches: %v", mismatches)
	}
	warning := docBlockWith(t, "text", route.MessageStageMismatch)
	if want := route.MessageStageMismatch + "\n" + mismatches[0].Error() + "\n"; warning != want {
		t.Errorf("docs/escalation.md's warning:\n%s\nthe router's:\n%s", warning, want)
	}
}

func ptrTo(v float64) *float64 { return &v }

// The page's table of human shares is the simulation's (escalationShares),
// to the percent.
func TestEscalationShares(t *testing.T) {
	simulationOnly(t)
	doc, err := os.ReadFile(escalationDoc)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(service-[0-9.]+)` \\| `(service-[0-9.]+)` \\| (yes/no|choice of four) \\| ([0-9]+)% \\| ([0-9]+)% \\|")
	documented := map[string][2]float64{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		alone, _ := strconv.ParseFloat(m[4], 64)
		escalated, _ := strconv.ParseFloat(m[5], 64)
		documented[m[1]+" "+m[2]+" "+m[3]] = [2]float64{alone, escalated}
	}
	rows := escalationShares(t)
	if len(documented) != len(rows) {
		t.Errorf("docs/escalation.md's table has %d rows, the simulation %d", len(documented), len(rows))
	}
	for _, r := range rows {
		kind := map[string]string{"noul": "yes/no", "choice": "choice of four"}[r.typ]
		d, ok := documented[r.first+" "+r.second+" "+kind]
		measured := fmt.Sprintf("| `%s` | `%s` | %s | %.0f%% | %.0f%% |", r.first, r.second, kind, 100*r.alone, 100*r.escalated)
		if !ok || math.Abs(d[0]-100*r.alone) > 1 || math.Abs(d[1]-100*r.escalated) > 1 {
			t.Errorf("docs/escalation.md's row for %s to %s, %s: %v; the simulation's: %s", r.first, r.second, kind, d, measured)
		}
	}
}
