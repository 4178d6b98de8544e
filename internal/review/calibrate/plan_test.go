package calibrate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/cli"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// planFixture is a labels file of n audited entries of one noul question,
// all agreeing at confidence 0.9, labelled from 10:00 a second apart on
// 2026-11-26, and a plans file.
type planFixture struct {
	dir, labels, plans, certs string
}

func newPlanFixture(t *testing.T, n int) *planFixture {
	t.Helper()
	f := &planFixture{dir: t.TempDir()}
	f.labels, f.plans, f.certs = filepath.Join(f.dir, "labels.ndjson"), filepath.Join(f.dir, "plans.json"), filepath.Join(f.dir, "certs.jsonl")
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"entry":"%d-0","request_id":"r%d","org":"acme","model":"service-1.0.0","type":"noul","question":"q","confidence":0.9,"answer":0.9,"label":true,"agree":true,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-11-26T10:%02d:%02dZ"}`,
			1764000000000+i, i, i/60, i%60))
	}
	if err := os.WriteFile(f.labels, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// plan writes the plans file: the noul group's look at entries, stored
// at created.
func (f *planFixture) plan(t *testing.T, entries int, created string) {
	t.Helper()
	doc := fmt.Sprintf(`{"plans":[{"model":"service-1.0.0","type":"noul","question":"","org":"","entries":%d,"created":%q}]}`, entries, created)
	if err := os.WriteFile(f.plans, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
}

var planArgs = []string{"--target", "0.9", "--method", "uniform", "--max-questions", "1", "--as-of", "2026-11-28T00:00:00Z"}

// Uniform certificates only where the look was planned: without --plan
// the command refuses (exit status 2, one line saying why); --plan with
// another method is refused too. With a plan stored before the first
// label, the look takes exactly the plan's entries, the certificate
// names the plan, and verify checks it against /plans; a certificate
// whose plan /plans does not hold as it says, or one stored after the
// first label, or a uniform certificate with no plan at all (one cherry-
// picked from looks after every label), is a mismatch.
func TestUniformCertificatesNeedAPlan(t *testing.T) {
	f := newPlanFixture(t, 80)
	_, _, err := runCommand(t, nil, append(planArgs, "--certificates", f.certs, f.labels)...)
	if cli.Status(err) != cli.StatusUsage || !strings.Contains(err.Error(), "--plan") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("uniform certificates without a plan: %v, want a one-line usage error naming --plan", err)
	}
	if _, err := os.Stat(f.certs); err == nil {
		t.Fatal("a certificates file was written")
	}
	f.plan(t, 40, "2026-11-26T09:00:00Z")
	_, _, err = runCommand(t, nil, "--target", "0.9", "--plan", f.plans, f.labels)
	if cli.Status(err) != cli.StatusUsage {
		t.Fatalf("--plan with the anytime method: %v, want a usage error", err)
	}

	out, _, err := runCommand(t, nil, append(planArgs, "--plan", f.plans, "--certificates", f.certs, f.labels)...)
	if err != nil || strings.Count(out, " cert ") != 1 {
		t.Fatalf("planned: %v\n%s", err, out)
	}
	certs, err := certificate.ReadFile(f.certs)
	if err != nil || len(certs) != 1 {
		t.Fatalf("certificates: %v %+v", err, certs)
	}
	c := certs[0]
	if c.PlanEntries != 40 || c.PlanCreated != "2026-11-26T09:00:00Z" || c.Lines != 40 || c.Entries != 40 {
		t.Fatalf("certificate %+v: want the plan's look, 40 entries of the 80", c)
	}
	verify := func(args ...string) string {
		t.Helper()
		stdout, _ := verifyCommand(t, append([]string{"--certificates", f.certs}, append(args, f.labels)...)...)
		return stdout
	}
	if got := verify("--plan", f.plans); got != "ok "+c.ID+"\n" {
		t.Fatalf("verify with the plan: %q", got)
	}
	if got := verify(); !strings.Contains(got, "mismatch "+c.ID+": a uniform certificate: its plan cannot be checked") {
		t.Errorf("verify without the plans: %q", got)
	}
	f.plan(t, 50, "2026-11-26T09:00:00Z")
	if got := verify("--plan", f.plans); !strings.Contains(got, "plan of 40 entries stored 2026-11-26T09:00:00Z, /plans holds 50") {
		t.Errorf("verify against another plan: %q", got)
	}
	f.plan(t, 40, "2026-11-26T10:00:30Z")
	late := newPlanFixture(t, 80) // the same labels, a plan stored after the first
	if err := os.Rename(f.plans, late.plans); err != nil {
		t.Fatal(err)
	}
	if _, _, err = runCommand(t, nil, append(planArgs, "--plan", late.plans, "--certificates", late.certs, late.labels)...); err != nil {
		t.Fatal(err)
	}
	stdout, _ := verifyCommand(t, "--certificates", late.certs, "--plan", late.plans, late.labels)
	if !strings.Contains(stdout, "not before the first label of service-1.0.0 noul (2026-11-26T10:00:00Z): the look was not fixed before labelling began") {
		t.Errorf("a plan stored after the first label: %q", stdout)
	}

	// A certificate cherry-picked from looks without a plan (as the
	// command wrote them before the refusal).
	allowUnplannedUniform = true
	t.Cleanup(func() { allowUnplannedUniform = false })
	picked := filepath.Join(f.dir, "picked.jsonl")
	s, raw, err := LoadRaw(t.Context(), f.labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Target, opts.Method, opts.MaxQuestions, opts.AsOf = 0.9, MethodUniform, 1, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	res, err := s.Calibrate(opts)
	if err != nil {
		t.Fatal(err)
	}
	cherry, err := Certify(&res, opts, raw, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	if err != nil || len(cherry) != 1 {
		t.Fatalf("the cherry-picked certificate: %v %+v", err, cherry)
	}
	allowUnplannedUniform = false
	if err := certificate.WriteFile(picked, cherry); err != nil {
		t.Fatal(err)
	}
	f.plan(t, 40, "2026-11-26T09:00:00Z")
	stdout, err = verifyCommand(t, "--certificates", picked, "--plan", f.plans, f.labels)
	if err == nil || !strings.Contains(stdout, "mismatch "+cherry[0].ID+": a uniform certificate without a plan: valid for one look fixed in advance only, refused") {
		t.Errorf("verify of a cherry-picked uniform certificate: %v %q", err, stdout)
	}
	if _, err := Certify(&res, opts, raw, time.Now()); !errors.Is(err, ErrUniformUnplanned) {
		t.Errorf("Certify of an unplanned uniform threshold: %v, want the refusal", err)
	}
}

// Planned, a group's look waits until its complete prefix holds the
// plan's entries, and the table says so; a group without a plan gets no
// threshold.
func TestPlanWaits(t *testing.T) {
	f := newPlanFixture(t, 30)
	f.plan(t, 40, "2026-11-26T09:00:00Z")
	out, _, err := runCommand(t, nil, append(planArgs, "--plan", f.plans, f.labels)...)
	if err != nil || !strings.Contains(out, "service-1.0.0 noul: no threshold yet: its plan's one look takes 40 complete entries, 10 more to come") {
		t.Fatalf("a plan not reached: %v\n%s", err, out)
	}
	if err := os.WriteFile(f.plans, []byte(`{"plans":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCommand(t, nil, append(planArgs, "--plan", f.plans, f.labels)...)
	if err != nil || !strings.Contains(out, "service-1.0.0 noul: no threshold: no plan fixes its one look") {
		t.Fatalf("no plan: %v\n%s", err, out)
	}
}
