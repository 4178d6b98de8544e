package calibrate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The commands end to end: calibrate --by org --certificates writes the
// file and the ids on the fragment's lines; verify prints "ok <id>" and
// exits 0 on the same labels, "mismatch <id>: ..." and an error on a
// flipped label, and refuses a run without --certificates.
func TestCertificatesCommands(t *testing.T) {
	var lines []string
	for i := range 120 {
		for j, org := range []string{"acme", "globex"} {
			n := 2*i + j
			lines = append(lines, fmt.Sprintf(`{"entry":"%d-0","request_id":"r%d","org":%q,"model":"service-1.0.0","type":"noul","question":"q","confidence":%.2f,"answer":0.9,"label":true,"agree":true,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-11-26T10:%02d:%02dZ"}`,
				1764000000000+n, n, org, 0.5+0.5*float64(n%50)/50, n/60, n%60))
		}
	}
	dir := t.TempDir()
	labels := filepath.Join(dir, "labels.ndjson")
	certs := filepath.Join(dir, "certs.jsonl")
	if err := os.WriteFile(labels, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCommand(t, nil, "--target", "0.9", "--by", "org", "--max-questions", "1", "--certificates", certs, labels)
	if err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(certs)
	if err != nil || bytes.Count(written, []byte("\n")) != 2 {
		t.Fatalf("certificates file: %v\n%s\n%s", err, written, out)
	}
	if strings.Count(out, " cert ") != 2 || !strings.Contains(out, "org acme {") {
		t.Fatalf("fragment without the org blocks' certificates:\n%s", out)
	}

	stdout, err := verifyCommand(t, "--certificates", certs, labels)
	if err != nil || strings.Count(stdout, "ok ") != 2 {
		t.Fatalf("verify on the same labels: %v\n%s", err, stdout)
	}
	lines[0] = strings.Replace(strings.Replace(lines[0], `"agree":true`, `"agree":false`, 1), `"label":true`, `"label":false`, 1)
	if err := os.WriteFile(labels, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, err = verifyCommand(t, "--certificates", certs, labels)
	if err == nil || !strings.Contains(stdout, "mismatch ") || !strings.Contains(stdout, "labels changed") || strings.Count(stdout, "ok ") != 1 {
		t.Fatalf("verify after a flipped label: %v\n%s", err, stdout)
	}
	if _, err := verifyCommand(t, labels); err == nil {
		t.Fatal("verify without --certificates succeeded")
	}
}

func verifyCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "verify", SilenceUsage: true, SilenceErrors: true}
	setUpVerify(cmd, nil)
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err := cmd.Execute()
	return out.String(), err
}
