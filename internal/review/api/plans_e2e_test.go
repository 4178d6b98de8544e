package api_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// runSubcommand runs one of the binary's subcommands whole, and returns
// its standard output and error, and its error.
func runSubcommand(t testing.TB, name string, args ...string) (stdout, stderr string, err error) {
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

// docs/calibration.md's plan commands (its ```sh plan blocks), run as
// shown against the review API: the plan stored before any label, then,
// once the entries are labelled, calibrate with the plan and verify.
func TestDocsPlan(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/calibration.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedIn(string(raw), "sh plan")
	if len(blocks) != 2 {
		t.Fatalf("%d sh plan blocks in docs/calibration.md, want the plan and the look", len(blocks))
	}
	s := newStack(t, stackOptions{review: progressReview})
	review := s.url + "/review"
	put := regexp.MustCompile(`^curl -s -X PUT "\$REVIEW(/plans)" -d '([^']*)'$`)
	m := put.FindStringSubmatch(strings.TrimSpace(blocks[0]))
	if m == nil {
		t.Fatalf("the plan command is not one the test runs: %q", blocks[0])
	}
	if resp, body := s.call(t, http.MethodPut, "/review"+m[1], m[2]); resp.StatusCode != 201 {
		t.Fatalf("%s: %d %s", blocks[0], resp.StatusCode, body)
	}
	s.labelAudited(t, "late", "noul", 320, 320, 0.9, true)

	t.Chdir(t.TempDir())
	// Labelled just now: the look a day later, once the window has passed.
	asOf := time.Now().Add(25 * time.Hour).UTC().Format(time.RFC3339)
	var outs []string
	for _, line := range strings.Split(strings.TrimSpace(blocks[1]), "\n") {
		words := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(line, `"$REVIEW`, review), `"`, ""))
		if len(words) < 2 || words[0] != "systemone-gateway" {
			t.Fatalf("a command the test does not run: %q", line)
		}
		args := words[2:]
		if words[1] == "calibrate" {
			args = append([]string{"--as-of", asOf}, args...)
		}
		out, stderr, err := runSubcommand(t, words[1], args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s\n%s", line, err, out, stderr)
		}
		outs = append(outs, out)
	}
	if len(outs) != 2 || !strings.Contains(outs[0], "300/300") || !strings.Contains(outs[0], " cert ") || !strings.HasPrefix(outs[1], "ok ") {
		t.Fatalf("calibrate with the plan, then verify:\n%s", strings.Join(outs, "\n"))
	}
}
