package calibrate_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/systemone/systemone-gateway/caddyfile"
	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// verify --config compares a Caddyfile's cert ids with the certificates
// file: "ok" when each is a certificate of its line's group and threshold
// (as calibrate writes it, rounded up), a "mismatch" line per line that is
// not and an error (exit status 1) otherwise; a Caddyfile without cert
// ids is an error too.
func TestVerifyConfig(t *testing.T) {
	dir := t.TempDir()
	certs := []certificate.Certificate{
		certificate.Certificate{Model: "service-1.0.0", Type: "noul", Threshold: 0.91234, Method: "anytime"}.Seal(),
		certificate.Certificate{Model: "service-1.0.0", Type: "choice", Org: "acme", Threshold: 0.8, Method: "anytime"}.Seal(),
	}
	certsFile := filepath.Join(dir, "certs.jsonl")
	if err := certificate.WriteFile(certsFile, certs); err != nil {
		t.Fatal(err)
	}
	caddyfile := func(name, noul, acme string) string {
		return write(t, dir, name, fmt.Sprintf(":8080 {\n\tsystemone {\n\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\t%s\n\t\t\t\torg acme {\n\t\t\t\t\t%s\n\t\t\t\t}\n\t\t\t}\n\t\t}\n\t}\n\treverse_proxy localhost:9\n}\n", noul, acme))
	}

	good := caddyfile("good", "noul 0.9124 cert "+certs[0].ID, "choice 0.8 cert "+certs[1].ID)
	out, err := runVerify(t, "--certificates", certsFile, "--config", good)
	if err != nil || out != fmt.Sprintf("ok %s: every cert id (2) is a certificate in %s of its line's group and threshold\n", good, certsFile) {
		t.Errorf("matching ids: %v\n%s", err, out)
	}

	bad := caddyfile("bad", "noul 0.9123 cert "+certs[0].ID, "choice 0.8 cert 0123456789abcdef")
	out, err = runVerify(t, "--certificates", certsFile, "--config", bad)
	want := []string{
		fmt.Sprintf(`mismatch %s: pin "service-1.0.0": noul 0.9123 cert %s: certificate %s is for threshold 0.91234 (written 0.9124, rounded up to 4 decimals)`, bad, certs[0].ID, certs[0].ID),
		fmt.Sprintf(`mismatch %s: pin "service-1.0.0": org "acme": choice 0.8 cert 0123456789abcdef: the certificates file has no certificate 0123456789abcdef`, bad),
	}
	if err == nil || out != strings.Join(want, "\n")+"\n" {
		t.Errorf("mismatched ids: %v\n got:\n%s\nwant:\n%s", err, out, strings.Join(want, "\n"))
	}

	none := caddyfile("none", "noul 0.9", "choice human")
	if _, err := runVerify(t, "--certificates", certsFile, "--config", none); err == nil || !strings.Contains(err.Error(), "has no cert <id> on a threshold line") {
		t.Errorf("a Caddyfile without cert ids: %v", err)
	}
	if _, err := runVerify(t, "--certificates", certsFile); err == nil || !strings.Contains(err.Error(), "or --config <Caddyfile>") {
		t.Errorf("neither labels nor --config: %v", err)
	}
}

// An empty certificates file is an error, not a silent success.
func TestVerifyEmptyCertificates(t *testing.T) {
	dir := t.TempDir()
	empty := write(t, dir, "empty.jsonl", "")
	labels := write(t, dir, "labels.ndjson", `{"entry":"1-0","model":"m","type":"noul","question":"q","confidence":0.9,"label":true,"agree":true,"audit":true}`+"\n")
	out, err := runVerify(t, "--certificates", empty, labels)
	if err == nil || !strings.Contains(err.Error(), "holds no certificate") {
		t.Errorf("an empty certificates file: %v\n%s", err, out)
	}
	if _, err := runVerify(t, "--certificates", "/dev/zero", labels); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a device as certificates file: %v", err)
	}
}

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runVerify runs the verify command as the binary registers it, and
// returns what it wrote to standard output.
func runVerify(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runSubcommand(t, nil, "verify", args...)
}

// runSubcommand runs the subcommand name as the binary registers it, with
// stdin (nil: none) as its standard input, and returns what it wrote to
// standard output.
func runSubcommand(t *testing.T, stdin io.Reader, name string, args ...string) (string, error) {
	t.Helper()
	for _, c := range calibrate.Commands(caddyfile.CertificateMismatches) {
		if c.Name != name {
			continue
		}
		cmd := &cobra.Command{Use: name, SilenceUsage: true, SilenceErrors: true}
		c.CobraFunc(cmd)
		var out, errOut bytes.Buffer
		cmd.SetArgs(args)
		cmd.SetIn(stdin)
		cmd.SetOut(&out)
		cmd.SetErr(&errOut) // the error's one line; err carries it too
		err := cmd.Execute()
		return out.String(), err
	}
	t.Fatalf("no %s command", name)
	return "", nil
}
