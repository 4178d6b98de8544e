package replay

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Passed entries and questions not labelled yet stay in the replayed
// sample: a passed entry's questions are written under the new version
// as disagreements at confidence 1 (calibrate counts a pass as a
// disagreement at its confidence: at 1, against every threshold), and an
// audited question not labelled yet as a line with label null that holds
// its entry, and the later ones, out of the complete prefix, as it did
// for the original version. Neither is sent to the upstream.
func TestPassedAndPendingStayInTheSample(t *testing.T) {
	const n = 200
	f := newSampleFixture(t, n+1)
	var asked atomic.Int64
	f.fail = func(int) bool { asked.Add(1); return false }
	passed := func(i int) bool { return i%10 == 3 }
	var b strings.Builder
	for i := 1; i <= n+1; i++ {
		head := fmt.Sprintf(`{"entry":"%d-0","request_id":"r%d","org":"acme","model":"service-1.0.0","type":"noul","question":"late","confidence":0.5,"answer":0.75,`, i, i)
		switch {
		case i == n+1: // the newest entry, not labelled yet
			b.WriteString(head + `"label":null,"agree":null,"audit":true,"route":"auto"}` + "\n")
		case passed(i):
			b.WriteString(head + `"label":null,"agree":null,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-01-01T00:00:00Z","pass":true}` + "\n")
		default:
			b.WriteString(head + `"label":true,"agree":true,"audit":true,"route":"auto","reviewer":"ann","ts":"2026-01-01T00:00:00Z"}` + "\n")
		}
	}
	f.labels = b.String()
	sum, lines := f.replay(t)
	if sum.Replayed != n-n/10 || sum.Failed != 0 || sum.Skipped != 0 || asked.Load() != int64(sum.Replayed) {
		t.Fatalf("summary %+v, %d requests sent: want only the %d labelled entries replayed", sum, asked.Load(), n-n/10)
	}
	if len(lines) != n+1 {
		t.Fatalf("%d lines, want all %d: passed and unlabelled entries are never dropped", len(lines), n+1)
	}
	passes := 0
	for _, l := range lines {
		var i int
		fmt.Sscanf(l.Entry, "%d-0", &i)
		if l.Model != "service-2.0.0" {
			t.Errorf("line of entry %s under %q, want the new version", l.Entry, l.Model)
		}
		switch {
		case i == n+1:
			if !l.Pending || l.Pass || l.Route != record.RouteReplay {
				t.Errorf("the unlabelled entry's line %+v: want it pending, route replay", l)
			}
		case passed(i):
			passes++
			if !l.Pass || l.Confidence == nil || *l.Confidence != 1 || string(l.Answer) != "null" || l.Route != record.RouteReplay {
				t.Errorf("a passed entry's line %+v: want pass true at confidence 1, no answer, route replay", l)
			}
		}
	}
	if passes != n/10 {
		t.Errorf("%d passed lines, want %d", passes, n/10)
	}
	_, g := threshold(t, lines)
	if g.Labels != n || g.WaitingOn != fmt.Sprintf("%d-0", n+1) || g.ScoredAgree > n-n/10 {
		t.Errorf("calibrated: %d labels (want %d, passes counted), waiting on %q (want the unlabelled entry), %d of %d agreeing", g.Labels, n, g.WaitingOn, g.ScoredAgree, g.Scored)
	}
}
