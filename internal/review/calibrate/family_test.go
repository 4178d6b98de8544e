package calibrate

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shares of --family sum to at most 1 however many groups come, each
// smaller than the one before, the first a familyHead+1-th.
func TestFamilyShares(t *testing.T) {
	sum := 0.0
	for k := 1; k <= 1_000_000; k++ {
		s := familyShare(k)
		if k > 1 && s >= familyShare(k-1) {
			t.Fatalf("share %d: %v, not below share %d", k, s, k-1)
		}
		sum += s
	}
	if sum > 1 || sum < 0.99999 {
		t.Errorf("the first million shares sum to %v, want at most 1 (and all but the tail of it)", sum)
	}
	if math.Abs(familyShare(1)-1.0/11) > 1e-15 || math.Abs(familyShare(14)-10.0/(23*24)) > 1e-15 {
		t.Errorf("shares 1 and 14: %v, %v", familyShare(1), familyShare(14))
	}
}

// familyLabelLines is n audited entries of the orgs in turn, one noul
// question each, all agreeing, confidence 0.9, labelled a second apart,
// as /labels lines; the entry ids start after from.
func familyLabelLines(from, n int, orgs ...string) []string {
	var out []string
	for i := range n {
		for j, org := range orgs {
			e := from + i*len(orgs) + j
			out = append(out, fmt.Sprintf(`{"entry":"%d-0","request_id":"r%d","org":%q,"model":"service-1.0.0","type":"noul","question":"q","confidence":0.9,"answer":0.9,"label":true,"agree":true,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-11-26T10:00:00Z"}`,
				1764000000000+e, e, org))
		}
	}
	return out
}

// --family through the command: the table and the fragment say the
// promise is family-wise, --json carries family and each group's delta,
// and verify recomputes the family's certificates. Without --family,
// --by org's fragment says its promise is per group. A group's share is
// where it formed in the stream: an org that forms later takes a later
// share, and the shares of the groups before it do not move.
func TestFamilyCommand(t *testing.T) {
	dir := t.TempDir()
	labels := filepath.Join(dir, "labels.ndjson")
	certs := filepath.Join(dir, "certs.jsonl")
	write := func(lines []string) {
		t.Helper()
		if err := os.WriteFile(labels, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lines := familyLabelLines(0, 300, "acme", "globex")
	write(lines)
	args := []string{"--target", "0.9", "--by", "org", "--max-questions", "1", "--as-of", "2026-11-28T00:00:00Z"}
	out, _, err := runCommand(t, nil, append(args, labels)...)
	if err != nil || !strings.Contains(out, "\t# per group: each threshold below") || strings.Contains(out, "family-wise") {
		t.Fatalf("--by org without --family: %v\n%s", err, out)
	}
	out, _, err = runCommand(t, nil, append(args, "--family", "--certificates", certs, labels)...)
	if err != nil || !strings.Contains(out, "for all 3 groups together (--family") || !strings.Contains(out, "\t# family-wise: the chance that any threshold below is wrong (agreement under 0.9) is at most 0.05") {
		t.Fatalf("--family: %v\n%s", err, out)
	}
	if strings.Count(out, " cert ") != 2 {
		t.Fatalf("--family: want both orgs certified:\n%s", out)
	}
	if stdout, err := verifyCommand(t, "--certificates", certs, labels); err != nil || strings.Count(stdout, "ok ") != 2 {
		t.Fatalf("verify of --family's certificates: %v\n%s", err, stdout)
	}

	deltas := func(lines []string) map[string]float64 {
		t.Helper()
		write(lines)
		out, _, err := runCommand(t, nil, append(args, "--family", "--json", labels)...)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Family bool
			Groups []struct {
				Org   string
				Delta *float64
			}
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || !doc.Family {
			t.Fatalf("--json with --family: %v\n%s", err, out)
		}
		got := map[string]float64{}
		for _, g := range doc.Groups {
			if g.Delta == nil {
				t.Fatalf("group %q without its delta:\n%s", g.Org, out)
			}
			got[g.Org] = *g.Delta
		}
		return got
	}
	before := deltas(lines)
	// The pooled group formed at the first entry, acme at its 30th,
	// globex at its 30th, just after.
	if before[""] != 0.05*familyShare(1) || before["acme"] != 0.05*familyShare(2) || before["globex"] != 0.05*familyShare(3) {
		t.Fatalf("shares %v", before)
	}
	after := deltas(append(lines, familyLabelLines(600, 40, "tiny")...))
	for org, d := range before {
		if after[org] != d {
			t.Errorf("%q's share moved when tiny formed later: %v, then %v", org, d, after[org])
		}
	}
	if after["tiny"] != 0.05*familyShare(4) {
		t.Errorf("tiny, formed last: %v, want the fourth share", after["tiny"])
	}
}
