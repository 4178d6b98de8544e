package calibrate_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// orgLines writes `/labels` lines of audited entries, one noul question
// each, for each org in turn: agreement agree[org], confidence in
// [0.8, 1), labelled a second apart from base.
func orgLines(rng *rand.Rand, perOrg int, agree map[string]float64, orgs ...string) []string {
	base := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	var out []string
	n := 0
	for i := range perOrg {
		for _, org := range orgs {
			n++
			ok := rng.Float64() < agree[org]
			b, _ := json.Marshal(map[string]any{
				"entry": fmt.Sprintf("%d-0", 1764000000000+n), "request_id": fmt.Sprintf("req-%s-%d-%d", org, i, n),
				"org": org, "model": "service-1.0.0", "type": "noul", "question": "late",
				"confidence": 0.8 + 0.2*rng.Float64(), "answer": 0.95, "label": ok, "agree": ok,
				"audit": true, "route": "auto", "reviewer": "ann",
				"ts": base.Add(time.Duration(n) * time.Second).Format(time.RFC3339),
			})
			out = append(out, string(b))
		}
	}
	return out
}

func rawOf(lines []string) [][]byte {
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	return raw
}

func calibrateRaw(t *testing.T, lines []string, opts calibrate.Options) (calibrate.Result, [][]byte) {
	t.Helper()
	s, raw, err := calibrate.ReadSampleRaw(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Calibrate(opts)
	if err != nil {
		t.Fatal(err)
	}
	return res, raw
}

// The certificate round trip: calibrate --by org with certificates, the
// fragment with `org` blocks and `cert` ids that the real route block
// reads back, verify ok on the same labels, ok for one org from its own
// lines only, and a mismatch naming the labels when one label is flipped.
func TestCertificatesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 28))
	lines := orgLines(rng, 150, map[string]float64{"acme": 1, "globex": 1, "tiny": 1}, "acme", "globex")
	lines = append(lines, orgLines(rng, 5, map[string]float64{"tiny": 1}, "tiny")...) // under min_labels: pooled
	opts := calibrate.DefaultOptions()
	opts.Target, opts.By = 0.9, calibrate.ByOrg
	opts.MaxQuestions = 1
	res, raw := calibrateRaw(t, lines, opts)
	certs, err := calibrate.Certify(&res, opts, raw, time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	orgs := map[string]certificate.Certificate{}
	for _, c := range certs {
		if !c.Sealed() || c.By != "org" || c.Method != calibrate.MethodAnytime {
			t.Fatalf("certificate %+v", c)
		}
		orgs[c.Org] = c
	}
	if _, ok := orgs["acme"]; !ok {
		t.Fatalf("no certificate for acme's own group: %+v", certs)
	}
	if _, ok := orgs["tiny"]; ok {
		t.Fatal("an org under min_labels got a group of its own")
	}

	var frag bytes.Buffer
	if err := calibrate.WriteFragment(&frag, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(frag.String(), "org acme {") || !strings.Contains(frag.String(), "cert "+orgs["acme"].ID) {
		t.Fatalf("fragment without acme's block and certificate:\n%s", frag.String())
	}
	pins := adaptPins(t, indent(frag.String()))
	if len(pins) != 1 || !strings.Contains(mustJSON(t, pins[0]), orgs["acme"].ID) || !strings.Contains(mustJSON(t, pins[0]), `"acme"`) {
		t.Fatalf("the route block did not read the org block back: %s", mustJSON(t, pins))
	}

	verify := func(lines []string, certs []certificate.Certificate) []calibrate.Verification {
		t.Helper()
		v, err := calibrate.Verify(certs, rawOf(lines))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, v := range verify(lines, certs) {
		if !v.OK() {
			t.Errorf("verify on the same labels: %s", v)
		}
	}
	// An org checks its own group from its own lines.
	var acmeOnly []string
	for _, l := range lines {
		if strings.Contains(l, `"org":"acme"`) {
			acmeOnly = append(acmeOnly, l)
		}
	}
	if v := verify(acmeOnly, []certificate.Certificate{orgs["acme"]}); !v[0].OK() {
		t.Errorf("acme's own lines: %s", v[0])
	}
	// One label of acme flipped: its certificate no longer matches.
	flipped := append([]string(nil), lines...)
	for i, l := range flipped {
		if strings.Contains(l, `"org":"acme"`) {
			flipped[i] = strings.Replace(strings.Replace(l, `"agree":true`, `"agree":false`, 1), `"label":true`, `"label":false`, 1)
			break
		}
	}
	for _, v := range verify(flipped, certs) {
		want := orgs["acme"].ID == v.ID
		if v.OK() == want {
			t.Errorf("flipped one of acme's labels: %s", v)
		}
		if want && !strings.Contains(v.String(), "labels changed") {
			t.Errorf("the mismatch does not name the labels: %s", v)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An org whose own evidence does not reach the target is written `<type>
// human`, never sent back to the pooled line; the --json groups carry org.
func TestByOrgHardOrgIsHuman(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 28))
	lines := orgLines(rng, 200, map[string]float64{"easy": 1, "hard": 0.7}, "easy", "hard")
	opts := calibrate.DefaultOptions()
	opts.Target, opts.By = 0.9, calibrate.ByOrg
	opts.MaxQuestions = 1
	res, _ := calibrateRaw(t, lines, opts)
	var frag bytes.Buffer
	if err := calibrate.WriteFragment(&frag, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(frag.String(), "org hard {\n\t\t\tnoul human\n\t\t}") {
		t.Fatalf("the hard org is not routed human:\n%s", frag.String())
	}
	doc, _ := json.Marshal(res)
	if !strings.Contains(string(doc), `"org":"hard"`) || !strings.Contains(string(doc), `"org":""`) {
		t.Fatalf("--json groups lack org: %s", doc)
	}
}

// TestByOrgCatchesHardOrg is the simulation of the per-org promise: an org
// whose agreement is below the target while the pooled group's is above
// it. Pooled, the org's answers get the pooled threshold in most runs
// (its agreement under it is the org's own, below target). With --by org,
// the chance that the hard org's answers are routed auto (its own group
// has a threshold) is at most delta, as the method promises for any group
// under the target. Without the org's own group, it would get the pooled
// line again, and the test fails.
func TestByOrgCatchesHardOrg(t *testing.T) {
	simulationOnly(t)
	const runs, target = 60, 0.9
	rng := rand.New(rand.NewPCG(9, 28))
	hardAuto := func(res calibrate.Result) bool {
		for _, g := range res.Groups {
			if g.Org == "hard" {
				return g.HasThreshold
			}
		}
		for _, g := range res.Groups {
			if g.Org == "" && g.Question == "" {
				return g.HasThreshold // the pooled line
			}
		}
		return false
	}
	pooledAuto, ownAuto := 0, 0
	for range runs {
		lines := orgLines(rng, 300, map[string]float64{"big": 0.99, "hard": 0.85}, "big", "big", "big", "hard")
		opts := calibrate.DefaultOptions()
		opts.Target, opts.Expect = target, false
		opts.MaxQuestions = 1
		pooled, _ := calibrateRaw(t, lines, opts)
		if hardAuto(pooled) {
			pooledAuto++
		}
		opts.By = calibrate.ByOrg
		byOrg, _ := calibrateRaw(t, lines, opts)
		if hardAuto(byOrg) {
			ownAuto++
		}
	}
	t.Logf("runs %d: the hard org's answers routed auto: pooled %d, by org %d", runs, pooledAuto, ownAuto)
	if pooledAuto < runs/2 {
		t.Fatalf("the pooled group found a threshold in only %d of %d runs: the simulation shows nothing", pooledAuto, runs)
	}
	// delta plus three standard errors: 0.05*60 + 3*sqrt(60*0.05*0.95) = 3 + 5.1.
	if bound := 8.0; float64(ownAuto) > bound {
		t.Fatalf("the hard org's answers were routed auto in %d of %d runs, over %v", ownAuto, runs, bound)
	}
}
