package api_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// runSubcommand runs one of the binary's subcommands whole, and returns
// its standard output and error, and its error.
func runSubcommand(t *testing.T, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	c, ok := caddycmd.Commands()[name]
	if !ok {
		t.Fatalf("no %s command", name)
	}
	cmd := &cobra.Command{Use: c.Name, SilenceUsage: true, SilenceErrors: true}
	c.CobraFunc(cmd)
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

// The one-look method's certificate through the review API: the look is
// planned with PUT /plans before any label, calibrate --method uniform
// --plan takes exactly its entries from /labels and certifies the
// threshold, and verify checks it against the /plans beside the /labels
// URL. A plan PUT after labelling began is refused.
func TestUniformPlanEndToEnd(t *testing.T) {
	s := newStack(t, stackOptions{review: progressReview})
	if resp, body := s.call(t, http.MethodPut, "/review/plans", `{"model":"service-1.0.0","type":"noul","entries":40}`); resp.StatusCode != 201 {
		t.Fatalf("PUT /plans: %d %s", resp.StatusCode, body)
	}
	s.labelAudited(t, "q1", "noul", 60, 60, 0.9, true)
	if resp, body := s.call(t, http.MethodPut, "/review/plans", `{"model":"service-1.0.0","type":"noul","question":"q1","entries":20}`); resp.StatusCode != 409 {
		t.Fatalf("a plan after labelling began: %d %s", resp.StatusCode, body)
	}
	certs := filepath.Join(t.TempDir(), "certs.jsonl")
	labels := s.url + "/review/labels"
	out, _, err := runSubcommand(t, "calibrate", "--target", "0.9", "--method", "uniform", "--max-questions", "1", "--correct-within", "0s",
		"--plan", s.url+"/review/plans", "--certificates", certs, labels)
	if err != nil || !strings.Contains(out, "noul 0.9 cert ") || !strings.Contains(out, "40/40") {
		t.Fatalf("calibrate with the plan: %v\n%s", err, out)
	}
	written, err := os.ReadFile(certs)
	if err != nil || !bytes.Contains(written, []byte(`"plan_entries":40`)) {
		t.Fatalf("certificate: %v %s", err, written)
	}
	if out, _, err := runSubcommand(t, "verify", "--certificates", certs, labels); err != nil || !strings.HasPrefix(out, "ok ") {
		t.Fatalf("verify with the /plans beside /labels: %v %q", err, out)
	}
	if _, _, err := runSubcommand(t, "calibrate", "--target", "0.9", "--method", "uniform", "--certificates", certs, labels); err == nil {
		t.Fatal("uniform certificates without a plan were written")
	}
}
