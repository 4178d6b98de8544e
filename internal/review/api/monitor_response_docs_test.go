package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/simulator"
)

// responseGateway is docs/monitor.md's Caddyfile, served: every answer
// audited, each entry taken as evidence as soon as it is labelled (settle
// and correction window 0s, one question per entry), so that a drift
// alarms and a recalibration follows in seconds.
type responseGateway struct {
	url string
	rdb *redis.Client
	n   int
}

func startResponseGateway(t *testing.T, doc string) *responseGateway {
	t.Helper()
	return serveMonitorDoc(t, doc, map[string]string{
		"audit 0.02":              "audit 1",
		"monitor 0.95 alpha 0.05": "monitor 0.95 alpha 0.05 settle 0s\n\t\t\tcorrect_within 0s\n\t\t\tmax_questions 1",
	})
}

// serveMonitorDoc serves docs/monitor.md's one Caddyfile in front of the
// simulator, with Redis from REDIS_URL and the ports moved to free ones,
// after the replacements in adapt (each must find its text).
func serveMonitorDoc(t *testing.T, doc string, adapt map[string]string) *responseGateway {
	t.Helper()
	configs := fencedIn(doc, "caddyfile")
	if len(configs) != 1 {
		t.Fatalf("%d caddyfile blocks, want 1", len(configs))
	}
	rs := redistest.Start(t)
	t.Setenv("REDIS_URL", rs.URL())
	zero := int64(0)
	h, err := simulator.New(simulator.Handler{RequestsPerMinute: &zero, TokensPerSecond: &zero})
	if err != nil {
		t.Fatal(err)
	}
	sim := gatewaytest.NewUpstream(t, h)
	port := gatewaytest.FreePort(t)
	adapt = maps.Clone(adapt)
	if adapt == nil {
		adapt = map[string]string{}
	}
	adapt[":8080 {"] = fmt.Sprintf(":%d {", port)
	adapt["localhost:9080"] = sim.Addr()
	config := configs[0]
	for old, adapted := range adapt {
		if !strings.Contains(config, old) {
			t.Fatalf("the example lacks %q", old)
		}
		config = strings.Replace(config, old, adapted, 1)
	}
	gatewaytest.Load(t, config)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return &responseGateway{url: fmt.Sprintf("http://127.0.0.1:%d", port), rdb: rdb}
}

// answer asks one noul question at confidence c (the simulator answers
// yes with probability (1 + c) / 2, in hundredths: the gateway reads a
// noul answer's confidence as |2p - 1|), then labels its entry as ann,
// agreeing with the model's answer or not; it returns the entry id.
func (g *responseGateway) answer(t *testing.T, c float64, agree bool) string {
	t.Helper()
	g.n++
	req := mustRequest(t, http.MethodPost, g.url+"/v1/systemone", `{"state":"the parcel came late","questions":{"late":{"type":"noul","instructions":"Was it late?"}}}`)
	req.Header.Set("Authorization", "Bearer response-docs-key")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Simulator-Confidence", fmt.Sprintf(`{"late":%.2f}`, (1+c)/2))
	resp, raw := do(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("evaluation: %d %s", resp.StatusCode, raw)
	}
	id := lastEntry(t, g.rdb, resp.Header.Get("X-Request-Id"))
	var item struct {
		Questions []struct {
			Answer float64 `json:"answer"`
		} `json:"questions"`
	}
	r, raw := g.call(t, http.MethodGet, "/review/items/"+id, "")
	if r.StatusCode != 200 || json.Unmarshal(raw, &item) != nil || len(item.Questions) != 1 {
		t.Fatalf("item %s: %d %s", id, r.StatusCode, raw)
	}
	label := (item.Questions[0].Answer >= 0.5) == agree
	if r, raw := g.call(t, http.MethodPut, "/review/items/"+id+"/labels", fmt.Sprintf(`{"labels":{"late":%v},"reviewer":"ann"}`, label)); r.StatusCode != 204 {
		t.Fatalf("PUT %s: %d %s", id, r.StatusCode, raw)
	}
	return id
}

func (g *responseGateway) call(t *testing.T, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req := mustRequest(t, method, g.url+path, body)
	req.SetBasicAuth("ann", "secret")
	return do(t, req)
}

// entryIDs are the stream ids in calibrate's output, which differ from
// run to run.
var entryIDs = regexp.MustCompile(`\b\d{13}-\d+\b`)

// docs/monitor.md's response to an alarm, as a team follows it: answers
// of the group drift and raise the alarm, the audited entries queued
// after it are labelled, and the doc's `calibrate --since <raised_at>`
// prints the output the doc shows (entry ids aside); without --since, the
// labels from before the alarm bring back a threshold the doc states.
func TestMonitorResponseDocs(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/monitor.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	steps, outputs := fencedIn(doc, "sh response"), fencedIn(doc, "text response")
	if len(steps) != 1 || len(outputs) != 1 {
		t.Fatalf("%d response command blocks and %d outputs, want 1 and 1", len(steps), len(outputs))
	}
	command := regexp.MustCompile(`^systemone-gateway calibrate (.*) --since (\S+) http://ann:secret@localhost:8080(/review/labels)$`).
		FindStringSubmatch(strings.TrimSpace(steps[0]))
	if command == nil {
		t.Fatalf("the response block is not one calibrate --since command: %q", steps[0])
	}
	if _, err := calibrate.ParseSince(command[2]); err != nil {
		t.Errorf("the doc's --since value: %v", err)
	}
	g := startResponseGateway(t, doc)

	// Before the drift: 200 answers from 0.84 to 0.98, routed auto, that
	// people agree with: the threshold in force, 0.83, holds.
	for i := range 200 {
		g.answer(t, 0.84+float64(i*3%8)/50, true)
	}
	// The drift: answers from 0.84 to 0.88 agree one time in two, until
	// the alarm.
	var raisedAt string
	for i := 0; raisedAt == ""; i++ {
		if i == 100 {
			t.Fatal("no alarm after 100 drifted answers")
		}
		g.answer(t, 0.84+float64(i%3)/50, i%2 == 1)
		var page guaranteePage
		if r, body := g.call(t, http.MethodGet, "/review/guarantee", ""); r.StatusCode != 200 || json.Unmarshal(body, &page) != nil || len(page.Groups) != 1 {
			t.Fatalf("GET /guarantee: %d %s", r.StatusCode, body)
		} else if page.Groups[0].Alarm && page.Groups[0].RaisedAt != nil {
			raisedAt = *page.Groups[0].RaisedAt
		}
	}
	// raised_at is the first millisecond after the alarm on Redis's clock:
	// the entries of the procedure are queued from then on.
	since, err := calibrate.ParseSince(raisedAt)
	if err != nil {
		t.Fatalf("raised_at %q: %v", raisedAt, err)
	}
	wait.Until(t, "Redis's clock to pass raised_at", func() bool {
		now, err := g.rdb.Time(context.Background()).Result()
		return err == nil && !now.Before(since.Time())
	})
	// After the alarm: the audited entries, now routed human, labelled.
	// Above 0.9 the answers agree; below it three in five.
	for i := range 400 {
		c := 0.8 + float64(i%10)/50
		g.answer(t, c, c >= 0.9 || i/10%5 < 3)
	}

	// The doc's command, at raised_at, a day later (the labels are final
	// once the default correction window has passed).
	args := append(strings.Fields(command[1]), "--since", raisedAt, "--as-of", time.Now().Add(25*time.Hour).UTC().Format(time.RFC3339), g.url+command[3])
	args[len(args)-1] = strings.Replace(args[len(args)-1], "http://", "http://ann:secret@", 1)
	out := calibrateJSON(t, args...)
	got, want := entryIDs.ReplaceAllString(out, "<id>"), entryIDs.ReplaceAllString(outputs[0], "<id>")
	if got != want {
		t.Errorf("calibrate --since %s prints:\n%s\nthe doc shows:\n%s", raisedAt, out, outputs[0])
	}

	// Without --since: every label, the 200 from before the drift and the
	// drifted ones included, as the doc says.
	all := calibrateJSON(t, append(strings.Fields(command[1]), "--json", "--as-of", time.Now().Add(25*time.Hour).UTC().Format(time.RFC3339), args[len(args)-1])...)
	var res struct {
		Groups []struct {
			Threshold *float64 `json:"threshold"`
			Labels    int      `json:"labels"`
		} `json:"groups"`
	}
	if json.Unmarshal([]byte(all), &res) != nil || len(res.Groups) != 1 {
		t.Fatalf("calibrate without --since: %s", all)
	}
	withoutSince := "no threshold"
	if res.Groups[0].Threshold != nil {
		withoutSince = calibrate.FormatThreshold(*res.Groups[0].Threshold)
	}
	t.Logf("without --since: %d labels, %s", res.Groups[0].Labels, withoutSince)
	if !strings.Contains(doc, fmt.Sprintf("Without `--since`, the same command over all %d labels", res.Groups[0].Labels)) ||
		!strings.Contains(doc, "gives "+withoutSince) {
		t.Errorf("the doc does not state what calibrate gives without --since: %d labels, %s", res.Groups[0].Labels, withoutSince)
	}
}
