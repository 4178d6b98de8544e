package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// The progress panel and the banner during an escalated group's alarm:
// the second answers form a group of their own, named by the second
// version and the first it is escalated from, marked in the table and on
// a diagram of its own, with the escalate block's threshold in force
// (0.75, below the pin's 0.8: only the block routes second answers
// there); a note says both stages are calibrated at half of delta. The
// banner names the escalated group and the block, and its reset is the
// DELETE with escalated_from, which the test sends from the banner's own
// text. Per organization the second answers pool, as calibrate pools
// them. A screenshot shows the escalated group's mark beside the banner
// and the bars.
func TestBrowserProgressOfEscalatedGroup(t *testing.T) {
	b := startBrowser(t)
	s := newEscalationStack(t)
	ask := func() {
		resp := s.askIDs(t, "sure", "esc0", "esc1", "esc2", "esc3", "hard")
		// The first version is right about sure, the second wrong about
		// each esc question (routed auto by the block) and right about
		// hard (routed human by it).
		s.put(t, lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id")),
			map[string]any{"sure": true, "esc0": false, "esc1": false, "esc2": false, "esc3": false, "hard": true})
	}
	for entries := 1; !s.alarmed(t, secondVersion, firstVersion); entries++ {
		if entries == 30 {
			t.Fatalf("no alarm of the escalated group after %d entries", entries)
		}
		ask()
	}
	if s.alarmed(t, firstVersion, "") {
		t.Fatal("the first version's agreeing group is in alarm too")
	}
	var raisedAt string
	for _, g := range s.guarantee(t).Groups {
		if g.Alarm && g.RaisedAt != nil {
			raisedAt = *g.RaisedAt
		}
	}
	since, err := calibrate.ParseSince(raisedAt)
	if err != nil {
		t.Fatalf("raised_at %q: %v", raisedAt, err)
	}
	wait.Until(t, "Redis's clock past raised_at", func() bool {
		now, err := s.rdb.Time(context.Background()).Result()
		return err == nil && now.After(since.Time())
	})
	ask() // one entry labelled since the alarm: the panel's natural window

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tb := b.newTab(ctx)
	tb.do("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 2400, "deviceScaleFactor": 1, "mobile": false})
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.getElementById('guarantee').dataset.kind === 'alarm' && document.getElementById('progress-status').dataset.since === ` + jsString(raisedAt) +
		` && document.querySelectorAll('#diagrams figure').length === 2`)

	type row struct{ Stage, From, Model, Org, InForce, InForceClass, InForceTitle string }
	var rows []row
	tb.eval(`[...document.querySelectorAll('#groups tbody tr')].map(r => ({Stage: r.dataset.stage, From: r.dataset.escalatedFrom,
		Model: r.cells[0].textContent, Org: r.querySelector('td.org').textContent,
		InForce: r.querySelector('td.in-force').textContent, InForceClass: r.querySelector('td.in-force').className,
		InForceTitle: r.querySelector('td.in-force').title}))`, &rows)
	// Since the alarm: sure agrees at the pin's 0.875; the esc questions'
	// second answers, at 0.75, all disagree.
	if len(rows) != 2 || rows[0] != (row{"1", "", "service-1.0.0", "(all)", "0.875 (100.0% of 1)", "in-force", rows[0].InForceTitle}) ||
		rows[1].Stage != "2" || rows[1].From != firstVersion || rows[1].Model != "service-2.0.0, escalated from service-1.0.0" ||
		rows[1].InForce != "0.75 (0.0% of 4)" || rows[1].InForceClass != "in-force warn" ||
		!strings.HasPrefix(rows[1].InForceTitle, "The threshold in force of the block escalate service-1.0.0 to service-2.0.0") {
		t.Errorf("progress rows %+v", rows)
	}

	type figure struct {
		Stage, From, Caption, InForce string
		Bars, InForceLines            int
	}
	var figures []figure
	tb.eval(`[...document.querySelectorAll('#diagrams figure')].map(f => ({Stage: f.dataset.stage, From: f.dataset.escalatedFrom,
		Caption: f.querySelector('figcaption').textContent, InForce: f.querySelector('.legend li.in-force').textContent,
		Bars: f.querySelectorAll('rect.bin').length, InForceLines: f.querySelectorAll('line.in-force').length}))`, &figures)
	var progress struct {
		Groups []struct {
			EscalatedFrom string `json:"escalated_from"`
			Bins          []any  `json:"bins"`
		} `json:"groups"`
	}
	if resp, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/progress?target=0.9&since="+since.String(), "")); resp.StatusCode != 200 || json.Unmarshal(raw, &progress) != nil {
		t.Fatalf("progress: %d %s", resp.StatusCode, raw)
	}
	if len(figures) != 2 || len(progress.Groups) != 2 || progress.Groups[1].EscalatedFrom != firstVersion {
		t.Fatalf("diagrams %+v, /progress %+v", figures, progress)
	}
	if f := figures[1]; f.Stage != "2" || f.From != firstVersion || f.Bars != len(progress.Groups[1].Bins) || f.InForceLines != 1 ||
		!strings.HasPrefix(f.Caption, "service-2.0.0 noul, escalated from service-1.0.0: agreement of the second answers") ||
		!strings.HasPrefix(f.InForce, "in force in the escalate block 0.75 (0.0% of 4)") {
		t.Errorf("the escalated group's diagram %+v", f)
	}
	if f := figures[0]; f.Stage != "1" || f.From != "" || !strings.HasPrefix(f.Caption, "service-1.0.0 noul: ") || !strings.HasPrefix(f.InForce, "in force 0.875") {
		t.Errorf("the first version's diagram %+v", f)
	}
	var note string
	tb.eval(`(document.getElementById('escalation-note') || {}).textContent || ''`, &note)
	if !strings.Contains(note, "half of delta (0.025 each)") || !strings.Contains(note, "escalate block") {
		t.Errorf("escalation note %q", note)
	}

	var banner struct {
		Alarms       int
		Title, From  string
		Text, Reset  string
		StartingOpts []string
	}
	tb.eval(`(() => { const a = document.querySelectorAll('#guarantee .alarm'); const codes = a[0].querySelectorAll('code');
		return {Alarms: a.length, Title: a[0].querySelector('h2').textContent, From: a[0].dataset.escalatedFrom, Text: a[0].textContent,
			Reset: codes[codes.length - 1].textContent, StartingOpts: [...document.querySelectorAll('#since option')].map(o => o.textContent)}; })()`, &banner)
	wantReset := "DELETE /review/guarantee/service-2.0.0/noul?escalated_from=service-1.0.0"
	if banner.Alarms != 1 || banner.Title != "Guarantee alarm: service-2.0.0 noul, escalated from service-1.0.0" || banner.From != firstVersion ||
		banner.Reset != wantReset || !strings.Contains(banner.Text, "in the block escalate service-1.0.0 to service-2.0.0") ||
		!strings.Contains(banner.Text, "the auto answers of service-2.0.0 to the questions service-1.0.0 escalated") ||
		!slices.Equal(banner.StartingOpts, []string{"All labels", "Since the alarm of service-2.0.0 noul, escalated from service-1.0.0, " + raisedAt}) {
		t.Errorf("banner %+v", banner)
	}

	// The screenshot: the banner's colour (#c4320a), the bars' (#8fb3de)
	// and the escalated group's mark (#6941c6) on its row and diagram.
	shot := tb.screenshot()
	alarmPixels, barPixels, markPixels := pixels(shot, 0xc4320a), pixels(shot, 0x8fb3de), pixels(shot, 0x6941c6)
	t.Logf("screenshot %v: %d banner, %d bar, %d escalated-mark pixels", shot.Bounds().Size(), alarmPixels, barPixels, markPixels)
	if alarmPixels < 20000 || barPixels < 500 || markPixels < 800 {
		t.Errorf("screenshot: %d banner pixels, %d bar pixels, %d escalated-mark pixels", alarmPixels, barPixels, markPixels)
	}

	// Per organization, the second answers pool: the escalate block has
	// no organization lines.
	tb.eval(`(() => { const by = document.getElementById('by'); by.value = 'org'; by.dispatchEvent(new Event('change')); return true; })()`, nil)
	tb.waitFor(`document.getElementById('progress-status').dataset.by === 'org'`)
	var orgs []string
	tb.eval(`[...document.querySelectorAll('#groups tbody tr')].map(r => r.dataset.escalatedFrom + ': ' + r.querySelector('td.org').textContent)`, &orgs)
	if want := []string{": others, pooled", "service-1.0.0: (all, pooled)"}; !slices.Equal(orgs, want) {
		t.Errorf("per organization %q, want %q", orgs, want)
	}

	// The reset the banner shows resets the escalated group.
	method, path, _ := strings.Cut(banner.Reset, " ")
	if resp, raw := do(t, mustRequest(t, method, s.url+path, "")); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%s: %d %s", banner.Reset, resp.StatusCode, raw)
	}
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.getElementById('guarantee').hidden && document.getElementById('progress-status').dataset.since === ''`)
	if n := pixels(tb.screenshot(), 0xc4320a); n != 0 {
		t.Errorf("%d banner pixels after the reset", n)
	}
	b.noProblems()
}
