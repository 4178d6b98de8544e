package calibrate_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// runCalibrate runs the calibrate command as the binary registers it.
func runCalibrate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runSubcommand(t, nil, "calibrate", args...)
}

// Certificates of an escalate block end to end: calibrate --certificates
// certifies the pin's line and the escalate line, the second naming the
// first's threshold and id; verify recomputes both from the labels and
// checks the one against the other; verify --config checks a Caddyfile's
// escalate lines too, and says when the pin has moved from the threshold
// the second stage was computed under.
func TestEscalateCertificatesCommands(t *testing.T) {
	dir := t.TempDir()
	labels, certs := write(t, dir, "labels.ndjson", calibrate.EscalationExample()), filepath.Join(dir, "certs.jsonl")
	out, err := runCalibrate(t, "--target", "0.9", "--max-questions", "1", "--certificates", certs, labels)
	if err != nil {
		t.Fatal(err)
	}
	file, err := certificate.ReadFile(certs)
	if err != nil || len(file) != 2 {
		t.Fatalf("certificates: %v %+v", err, file)
	}
	first, second := file[0], file[1]
	if first.Stage != 0 || first.DeltaUsed != 0.025 || second.Stage != 2 || second.EscalatedFrom != "service-1.0.0" || second.Model != "service-2.0.0" ||
		second.UnderThreshold == nil || !first.Matches(*second.UnderThreshold) || second.UnderCert != first.ID || second.DeltaUsed != 0.025 {
		t.Errorf("certificates:\n%+v\n%+v", first, second)
	}
	fragment := regexp.MustCompile(`(?s)route \{.*\n\}\n`).FindString(out)
	if !strings.Contains(fragment, "noul "+certificate.FormatThreshold(first.Threshold)+" cert "+first.ID) ||
		!strings.Contains(fragment, "escalate service-1.0.0 to service-2.0.0 {\n\t\tnoul "+certificate.FormatThreshold(second.Threshold)+" cert "+second.ID) {
		t.Fatalf("fragment:\n%s", out)
	}

	if stdout, err := runVerify(t, "--certificates", certs, labels); err != nil || stdout != "ok "+first.ID+"\nok "+second.ID+"\n" {
		t.Errorf("verify on the same labels: %v\n%s", err, stdout)
	}
	site := func(name, route string) string {
		return write(t, dir, name, ":8080 {\n\tsystemone {\n"+indent(route)+"\t}\n\treverse_proxy localhost:9\n}\n")
	}
	pasted := site("pasted", fragment)
	if stdout, err := runVerify(t, "--certificates", certs, "--config", pasted); err != nil || !strings.HasPrefix(stdout, "ok "+pasted+": every cert id (2)") {
		t.Errorf("verify --config on the pasted fragment: %v\n%s", err, stdout)
	}
	moved := site("moved", strings.Replace(fragment, "noul "+certificate.FormatThreshold(first.Threshold)+" cert "+first.ID, "noul 0.5", 1))
	stdout, err := runVerify(t, "--certificates", certs, "--config", moved)
	want := fmt.Sprintf("mismatch %s: escalate \"service-1.0.0\" to \"service-2.0.0\": noul %v cert %s: certificate %s was computed under pin \"service-1.0.0\"'s noul threshold %v, and the pin's is now 0.5",
		moved, certificate.Written(second.Threshold), second.ID, second.ID, *second.UnderThreshold)
	if err == nil || !strings.HasPrefix(stdout, want) {
		t.Errorf("verify --config with the pin moved: %v\n%s\nwant %s...", err, stdout, want)
	}

	// A second stage's certificate that names another first-stage
	// certificate than the one of its threshold is a mismatch.
	other := first
	other.Threshold, other.ID = 0.5, ""
	other = other.Seal()
	forged := second
	forged.UnderCert, forged.ID = other.ID, ""
	forged = forged.Seal()
	forgedFile := filepath.Join(dir, "forged.jsonl")
	if err := certificate.WriteFile(forgedFile, []certificate.Certificate{first, other, forged}); err != nil {
		t.Fatal(err)
	}
	stdout, err = runVerify(t, "--certificates", forgedFile, labels)
	if err == nil || !strings.Contains(stdout, "mismatch "+forged.ID+": computed under threshold "+fmt.Sprint(*second.UnderThreshold)+", but the certificate "+other.ID+" it names is for 0.5") {
		t.Errorf("verify with a forged under_cert: %v\n%s", err, stdout)
	}
	var doc struct {
		Groups []map[string]any `json:"groups"`
	}
	out, err = runCalibrate(t, "--target", "0.9", "--max-questions", "1", "--json", labels)
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Groups) != 2 {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if g := doc.Groups[1]; g["stage"] != 2.0 || g["escalated_from"] != "service-1.0.0" || g["under_threshold"] != *second.UnderThreshold || doc.Groups[0]["stage"] != 1.0 {
		t.Errorf("--json groups: %v", doc.Groups)
	}
}
