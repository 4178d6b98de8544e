package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// autoEntry queues an audited entry of one noul question at confidence c,
// routed route, and returns its id.
func (s *stack) autoEntry(t *testing.T, n int, c float64, route string) string {
	t.Helper()
	return s.addEntry(t, true, "request_id", fmt.Sprintf("r-%d", n), "route", route, "reason", "confident",
		"questions", fmt.Sprintf(`[{"id":"q","type":"noul","route":%q,"confidence":%v,"answer":0.9}]`, route, c))
}

// put labels entry id's question q as agreeing with the model (answer 0.9:
// yes) or not.
func (s *stack) put(t *testing.T, id string, agree bool) {
	t.Helper()
	if resp, body := s.call(t, http.MethodPut, "/review/items/"+id+"/labels", fmt.Sprintf(`{"labels":{"q":%v},"reviewer":"ann"}`, agree)); resp.StatusCode != 204 {
		t.Fatalf("PUT %s: %d %s", id, resp.StatusCode, body)
	}
}

// screenshot captures the tab's viewport as an image.
func (tb *tab) screenshot() image.Image {
	tb.b.t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(tb.do("Page.captureScreenshot", map[string]any{"format": "png"}), &shot); err != nil {
		tb.b.t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		tb.b.t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		tb.b.t.Fatal(err)
	}
	return img
}

// pixels counts the pixels of img of the colour #rrggbb.
func pixels(img image.Image, rgb uint32) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == rgb>>16&0xff && g>>8 == rgb>>8&0xff && bl>>8 == rgb&0xff {
				n++
			}
		}
	}
	return n
}

// The page during a guarantee alarm: a banner naming the group, when the
// alarm was raised and what to do (label since it, calibrate --since,
// reset); the progress panel from raised_at, its natural starting point;
// the threshold in force (0.85, as the routes before the alarm show it) in
// warning colours, since the labels after the alarm agree less than the
// target there; and a reliability diagram per group, drawn by the page.
// A screenshot shows the banner's colour and the diagram's bars; after
// the reset the banner's colour is gone. With Redis away, the banner says
// the guarantee is unknown.
func TestBrowserGuaranteeAlarm(t *testing.T) {
	b := startBrowser(t)
	s := newStack(t, stackOptions{monitor: "0.9 alpha 0.05 settle 0s", review: progressReview})
	ctx := context.Background()

	// Before the alarm: answers from 0.85 routed auto; people disagree
	// with them until the monitor alarms.
	var raisedAt string
	n := 0
	for ; raisedAt == "" && n < 60; n++ {
		s.put(t, s.autoEntry(t, n, 0.85+float64(n%5)/50, "auto"), n < 5)
		var page guaranteePage
		s.get(t, "/review/guarantee", &page)
		if len(page.Groups) == 1 && page.Groups[0].Alarm && page.Groups[0].RaisedAt != nil {
			raisedAt = *page.Groups[0].RaisedAt
		}
	}
	if raisedAt == "" {
		t.Fatal("no alarm after 60 disagreeing entries")
	}
	since, _ := calibrate.ParseSince(raisedAt)
	wait.Until(t, "Redis's clock past raised_at", func() bool {
		now, err := s.rdb.Time(ctx).Result()
		return err == nil && !now.Before(since.Time())
	})
	// After it: routed human, still audited; half of them agree, and one
	// is left for the reviewer.
	for i := range 20 {
		s.put(t, s.autoEntry(t, 100+i, 0.86+float64(i%7)/50, "human"), i%2 == 0)
	}
	s.autoEntry(t, 200, 0.9, "human")

	ctx2, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	tb := b.newTab(ctx2)
	tb.do("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 2400, "deviceScaleFactor": 1, "mobile": false})
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.getElementById('guarantee').dataset.kind === 'alarm' && document.getElementById('progress-status').dataset.since === ` + jsString(raisedAt) +
		` && document.querySelectorAll('#diagrams svg rect.bin').length > 0`)

	var banner struct {
		Text, Model, Type, RaisedAt string
		Hidden                      bool
	}
	tb.eval(`(() => { const a = document.querySelector('#guarantee .alarm'); return {Text: a.textContent, Model: a.dataset.model, Type: a.dataset.type, RaisedAt: a.dataset.raisedAt, Hidden: document.getElementById('guarantee').hidden}; })()`, &banner)
	for _, want := range []string{"Guarantee alarm: service-1.0.0 noul", "Raised " + raisedAt, "Label the audited entries queued since the alarm",
		"--since " + raisedAt, "/review/labels", "DELETE /review/guarantee/service-1.0.0/noul"} {
		if !strings.Contains(banner.Text, want) {
			t.Errorf("banner lacks %q: %q", want, banner.Text)
		}
	}
	if banner.Hidden || banner.Model != "service-1.0.0" || banner.Type != "noul" || banner.RaisedAt != raisedAt {
		t.Errorf("banner %+v", banner)
	}

	// The diagram: one bar per bin of the labels since the alarm, each
	// with its interval; the target; the threshold in force, warned.
	var diagram struct {
		Bars, Intervals, Target, InForceWarn, Supported int
		Heights                                         []float64
		Cell, CellClass, Audit                          string
	}
	tb.eval(`(() => { const d = document.querySelector('#diagrams .diagram'); const row = document.querySelector('#groups tbody tr');
		return {Bars: d.querySelectorAll('rect.bin').length, Intervals: d.querySelectorAll('line.interval').length,
			Target: d.querySelectorAll('line.target').length, InForceWarn: d.querySelectorAll('line.in-force.warn').length,
			Supported: d.querySelectorAll('line.supported').length,
			Heights: [...d.querySelectorAll('rect.bin')].map(r => r.getBBox().height),
			Cell: row.querySelector('td.in-force').textContent, CellClass: row.querySelector('td.in-force').className,
			Audit: document.getElementById('audit-kind').textContent}; })()`, &diagram)
	var progress struct {
		Groups []struct {
			Bins    []struct{ N, Agree int } `json:"bins"`
			InForce *struct {
				Threshold float64 `json:"threshold"`
				N         int     `json:"n"`
				Agree     int     `json:"agree"`
			} `json:"in_force"`
		} `json:"groups"`
	}
	s.get(t, "/review/progress?target=0.9&since="+since.String(), &progress)
	if len(progress.Groups) != 1 || progress.Groups[0].InForce == nil || progress.Groups[0].InForce.Threshold != 0.85 || progress.Groups[0].InForce.N != 20 {
		t.Fatalf("/progress since the alarm: %+v", progress)
	}
	if diagram.Bars != len(progress.Groups[0].Bins) || diagram.Intervals != diagram.Bars || diagram.Target != 1 || diagram.InForceWarn != 1 {
		t.Errorf("diagram %+v, /progress bins %+v", diagram, progress.Groups[0].Bins)
	}
	for _, h := range diagram.Heights {
		if h <= 0 {
			t.Errorf("an empty bar: heights %v", diagram.Heights)
		}
	}
	if !strings.Contains(diagram.CellClass, "warn") || !strings.HasPrefix(diagram.Cell, "0.85 (50.0% of 20)") || !strings.Contains(diagram.Audit, "uniform") {
		t.Errorf("in force cell %q (%s), audit %q", diagram.Cell, diagram.CellClass, diagram.Audit)
	}

	// The screenshot: the banner's colour (#c4320a), the bars' (#8fb3de)
	// and the warned threshold's (#d92d20) are drawn.
	shot := tb.screenshot()
	alarmPixels, barPixels, warnPixels := pixels(shot, 0xc4320a), pixels(shot, 0x8fb3de), pixels(shot, 0xd92d20)
	t.Logf("screenshot %v: %d banner, %d bar, %d warning pixels", shot.Bounds().Size(), alarmPixels, barPixels, warnPixels)
	if alarmPixels < 20000 || barPixels < 500 || warnPixels < 100 {
		t.Errorf("screenshot: %d banner pixels, %d bar pixels, %d warning pixels", alarmPixels, barPixels, warnPixels)
	}

	// The operator resets the group: no banner, no banner colour.
	if resp, body := s.call(t, http.MethodDelete, "/review/guarantee/service-1.0.0/noul", ""); resp.StatusCode != 204 {
		t.Fatalf("reset: %d %s", resp.StatusCode, body)
	}
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.getElementById('guarantee').hidden && document.getElementById('progress-status').dataset.since === '' && document.querySelectorAll('#since option').length === 2`)
	if n := pixels(tb.screenshot(), 0xc4320a); n != 0 {
		t.Errorf("%d banner pixels after the reset", n)
	}

	// Redis away: the guarantee cannot be read, and the banner says so.
	s.redis.Stop()
	tb.navigate(s.url + "/review/")
	tb.waitFor(`document.getElementById('guarantee').dataset.kind === 'unknown'`)
	var unknown string
	tb.eval(`document.getElementById('guarantee').textContent`, &unknown)
	if !strings.Contains(unknown, "Guarantee unknown") || !strings.Contains(unknown, "guarantee_unknown") || !strings.Contains(unknown, "503") {
		t.Errorf("unknown banner %q", unknown)
	}
	b.noProblems()
}
