package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

// monitorStack is a gateway that audits every answer, with on_alarm human,
// and a review handler with monitor 0.9, on one Redis.
type monitorStack struct {
	url, metrics, reviewLog string
	rdb                     *redis.Client
}

func newMonitorStack(t *testing.T) *monitorStack {
	t.Helper()
	// The gateway reads the alarm set at its own period (2s): the test
	// holds the product to its promise (an alarm routes human within 10s
	// of the label that raised it) as it runs.
	rs := redistest.Start(t)
	zero := int64(0)
	h, err := simulator.New(simulator.Handler{RequestsPerMinute: &zero, TokensPerSecond: &zero})
	if err != nil {
		t.Fatal(err)
	}
	sim := gatewaytest.NewUpstream(t, h)
	port, metricsPort := gatewaytest.FreePort(t), gatewaytest.FreePort(t)
	reviewLog := filepath.Join(t.TempDir(), "review.log")
	options := fmt.Sprintf("\tlog review {\n\t\toutput file %s\n\t\tformat json\n\t\tinclude http.handlers.systemone_review\n\t}\n", reviewLog)
	sites := fmt.Sprintf(`:%[1]d {
	handle_path /review/* {
		systemone_review {
			redis %[2]s
			key_prefix gw:
			stream %[3]s
			monitor 0.9 alpha 0.05 settle 0s
			correct_within 0s
		}
	}
	handle_path /plain/* {
		systemone_review {
			redis %[2]s
			key_prefix gw:
			stream %[3]s
		}
	}
	handle {
		systemone {
			redis %[2]s
			key_prefix gw:
			route {
				pin service-1.0.0 {
					noul 0.5
					choice 0.6
				}
				queue %[3]s
				audit 1
				on_alarm human
			}
		}
		reverse_proxy %[4]s
	}
}
:%[5]d {
	metrics
}
`, port, rs.URL(), stream, sim.Addr(), metricsPort)
	gatewaytest.LoadOptions(t, options, sites)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return &monitorStack{
		url:       fmt.Sprintf("http://127.0.0.1:%d", port),
		metrics:   fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		reviewLog: reviewLog, rdb: rdb,
	}
}

// ask sends an evaluation of noul questions n0..n(k-1) at confidence 0.9
// and, when low, a choice question c at confidence 0.1 (routed human), and
// returns the response.
func (s *monitorStack) ask(t *testing.T, k int, low bool) *http.Response {
	t.Helper()
	var qs, conf []string
	for i := range k {
		qs = append(qs, fmt.Sprintf(`"n%d":{"type":"noul","instructions":"Was it late?"}`, i))
		conf = append(conf, fmt.Sprintf(`"n%d":0.9`, i))
	}
	if low {
		qs = append(qs, `"c":{"type":"choice","instructions":"Who?","criteria":{"yes":null,"no":null}}`)
		conf = append(conf, `"c":0.1`)
	}
	body := `{"state":"the parcel came a day late","questions":{` + strings.Join(qs, ",") + `}}`
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/systemone", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer monitor-test-key")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Simulator-Confidence", "{"+strings.Join(conf, ",")+"}")
	resp, raw := do(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("evaluation: %d %s", resp.StatusCode, raw)
	}
	return resp
}

// entryOf waits for the stream entry of the response and returns its Item.
func (s *monitorStack) entryOf(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	id := lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id"))
	var item map[string]any
	r, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/items/"+id, ""))
	if r.StatusCode != 200 || json.Unmarshal(raw, &item) != nil {
		t.Fatalf("item %s: %d %s", id, r.StatusCode, raw)
	}
	return item
}

func mustRequest(t *testing.T, method, u, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// label PUTs, for each question of item, a label that agrees with the
// model's answer or not.
func (s *monitorStack) label(t *testing.T, item map[string]any, agreeing bool) {
	t.Helper()
	labels := map[string]any{}
	for _, q := range item["questions"].([]any) {
		q := q.(map[string]any)
		switch q["type"] {
		case "noul":
			yes := q["answer"].(float64) >= 0.5
			labels[q["id"].(string)] = yes == agreeing
		case "choice":
			labels[q["id"].(string)] = "no"
			if q["answer"] == "no" {
				labels[q["id"].(string)] = "yes"
			}
		}
	}
	body, _ := json.Marshal(map[string]any{"labels": labels, "reviewer": "ana"})
	resp, raw := do(t, mustRequest(t, http.MethodPut, s.url+"/review/items/"+item["id"].(string)+"/labels", string(body)))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT labels: %d %s", resp.StatusCode, raw)
	}
}

type guaranteePage struct {
	Target float64 `json:"target"`
	Alpha  float64 `json:"alpha"`
	Groups []struct {
		Model    string  `json:"model"`
		Type     string  `json:"type"`
		Org      string  `json:"org"`
		Alpha    float64 `json:"alpha"`
		Entries  int     `json:"entries"`
		Labels   int     `json:"labels"`
		Agree    int     `json:"agree"`
		Evidence float64 `json:"evidence"`
		Alarm    bool    `json:"alarm"`
		RaisedAt *string `json:"raised_at"`
		ResetAt  *string `json:"reset_at"`
	} `json:"groups"`
}

func (s *monitorStack) guarantee(t *testing.T) guaranteePage {
	t.Helper()
	resp, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/guarantee", ""))
	var p guaranteePage
	if resp.StatusCode != 200 || json.Unmarshal(raw, &p) != nil {
		t.Fatalf("GET /guarantee: %d %s", resp.StatusCode, raw)
	}
	return p
}

// emptyLabel is a label with an empty value, which Prometheus takes as no
// label: the guarantee gauges carry escalated_from="" on a version's own
// groups once the process has an escalated group.
var emptyLabel = regexp.MustCompile(`\w+="",?`)

// gauge returns the value of the metric line that starts with prefix,
// its labels with empty values left out.
func (s *monitorStack) gauge(t *testing.T, prefix string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(s.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.Replace(emptyLabel.ReplaceAllString(line, ""), ",}", "}", 1)
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// warnings returns the review handler's log entries with message msg.
func (s *monitorStack) warnings(t *testing.T, msg string) []map[string]any {
	t.Helper()
	f, err := os.Open(s.reviewLog)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil && e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// waitReason sends k-question evaluations until X-Route-Reason is want,
// failing when deadline passes first.
func (s *monitorStack) waitReason(t *testing.T, deadline time.Time, want string) *http.Response {
	t.Helper()
	for {
		resp := s.ask(t, 2, false)
		if resp.Header.Get("X-Route-Reason") == want {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("X-Route-Reason %q, want %q in time", resp.Header.Get("X-Route-Reason"), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The monitor end to end: audited auto answers that people label as
// wrong raise the group's alarm (GET /guarantee, the gauges, one warn
// entry), the gateway then routes the group human with reason
// guarantee_alarm within 10 seconds of the label, and a reset brings auto
// back. Replaced labels, human-routed questions and agreeing labels do
// not push the alarm.
func TestGuaranteeEndToEnd(t *testing.T) {
	s := newMonitorStack(t)
	if resp, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/plain/guarantee", "")); resp.StatusCode != 404 {
		t.Errorf("GET /guarantee without monitor: %d %s", resp.StatusCode, raw)
	}
	if p := s.guarantee(t); p.Target != 0.9 || p.Alpha != 0.05 || len(p.Groups) != 0 {
		t.Fatalf("before any label: %+v", p)
	}

	// Agreeing labels: one entry, one observation, no alarm.
	resp := s.ask(t, 3, false)
	if resp.Header.Get("X-Route") != "auto" {
		t.Fatalf("route %q %q", resp.Header.Get("X-Route"), resp.Header.Get("X-Route-Reason"))
	}
	s.label(t, s.entryOf(t, resp), true)
	p := s.guarantee(t)
	if len(p.Groups) != 1 || p.Groups[0].Type != "noul" || p.Groups[0].Entries != 1 || p.Groups[0].Labels != 3 || p.Groups[0].Agree != 3 ||
		p.Groups[0].Evidence > 1 || p.Groups[0].Alarm || p.Groups[0].Alpha != 0.025 || p.Groups[0].Org != "" {
		t.Fatalf("after 3 agreeing labels: %+v", p)
	}
	model := p.Groups[0].Model

	// Entries whose auto noul answers people judge wrong, each one
	// observation however many questions it holds, until the alarm; a
	// human-routed choice question labelled wrong is no observation.
	var item map[string]any
	var labelled time.Time
	entries := 1
	for !p.Groups[0].Alarm {
		if entries == 30 {
			t.Fatalf("no alarm after %d disagreeing entries: %+v", entries, p)
		}
		item = s.entryOf(t, s.ask(t, 4, true))
		s.label(t, item, false)
		labelled = time.Now()
		entries++
		p = s.guarantee(t)
		if len(p.Groups) != 1 || p.Groups[0].Entries != entries || p.Groups[0].Labels != 3+4*(entries-1) || p.Groups[0].Agree != 3 {
			t.Fatalf("after %d entries: %+v", entries, p)
		}
	}
	if p.Groups[0].Evidence < 40 {
		t.Errorf("alarm at evidence %v, below 1/0.025", p.Groups[0].Evidence)
	}
	t.Logf("alarm at the %d-th entry (evidence %.1f)", entries, p.Groups[0].Evidence)
	// raised_at: on the clock of the entry ids, after the entry that
	// raised the alarm was queued, so that --since <raised_at> leaves it
	// and every entry before it out.
	if p.Groups[0].RaisedAt == nil || p.Groups[0].ResetAt != nil {
		t.Fatalf("in alarm: raised_at %v, reset_at %v", p.Groups[0].RaisedAt, p.Groups[0].ResetAt)
	}
	raisedAt, err := calibrate.ParseSince(*p.Groups[0].RaisedAt)
	raisedEntry, _ := calibrate.ParseSince(item["id"].(string))
	if err != nil || raisedEntry.Compare(raisedAt) >= 0 || time.Since(raisedAt.Time()) > time.Minute {
		t.Errorf("raised_at %s (%v): want after the entry %s that raised it, and now", *p.Groups[0].RaisedAt, err, item["id"])
	}
	// The same labels again: the entry was observed, nothing changes.
	s.label(t, item, false)
	if p2 := s.guarantee(t); p2.Groups[0].Entries != p.Groups[0].Entries || p2.Groups[0].Evidence != p.Groups[0].Evidence {
		t.Errorf("replaced labels changed the group: %+v, was %+v", p2, p)
	}
	series := fmt.Sprintf(`{model=%q,type="noul"}`, model)
	if v, ok := s.gauge(t, "systemone_guarantee_alarm"+series); !ok || v != 1 {
		t.Errorf("systemone_guarantee_alarm%s = %v (%v), want 1", series, v, ok)
	}
	if v, ok := s.gauge(t, "systemone_guarantee_evidence"+series); !ok || v != p.Groups[0].Evidence {
		t.Errorf("systemone_guarantee_evidence%s = %v, want %v", series, v, p.Groups[0].Evidence)
	}
	var warns []map[string]any
	wait.Until(t, "the alarm's log entry", func() bool {
		warns = s.warnings(t, "guarantee alarm")
		return len(warns) > 0
	})
	if len(warns) != 1 || warns[0]["level"] != "warn" || warns[0]["model"] != model || warns[0]["type"] != "noul" {
		t.Errorf("alarm log entries %v, want one warn", warns)
	}

	// The gateway routes the group human within 10 seconds of the label.
	resp = s.waitReason(t, labelled.Add(10*time.Second), "guarantee_alarm")
	if resp.Header.Get("X-Route") != "human" || resp.Header.Get("X-Route-Questions") != "n0=human, n1=human" {
		t.Errorf("alarmed: X-Route %q, questions %q", resp.Header.Get("X-Route"), resp.Header.Get("X-Route-Questions"))
	}
	if after, _ := calibrate.ParseSince(s.entryOf(t, resp)["id"].(string)); after.Compare(raisedAt) < 0 {
		t.Errorf("an entry queued after the alarm, %s, is before raised_at %s", after, raisedAt)
	}
	t.Logf("guarantee_alarm %v after the label", time.Since(labelled).Round(time.Millisecond))

	// Reset: 204, the group starts afresh, auto comes back.
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodDelete, "/review/guarantee/never-seen/noul", 404},
		{http.MethodDelete, "/review/guarantee/" + url.PathEscape(model) + "/choice", 404},
		{http.MethodDelete, "/review/guarantee/" + url.PathEscape(model), 404},
		{http.MethodGet, "/review/guarantee/" + url.PathEscape(model) + "/noul", 405},
		{http.MethodDelete, "/plain/guarantee/" + url.PathEscape(model) + "/noul", 404},
		{http.MethodDelete, "/review/guarantee/" + url.PathEscape(model) + "/noul", 204},
	} {
		if resp, raw := do(t, mustRequest(t, c.method, s.url+c.path, "")); resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, resp.StatusCode, raw, c.status)
		}
	}
	p = s.guarantee(t)
	if len(p.Groups) != 1 || p.Groups[0].Labels != 0 || p.Groups[0].Entries != 0 || p.Groups[0].Agree != 0 || p.Groups[0].Evidence != 1 ||
		p.Groups[0].Alarm || p.Groups[0].Alpha != 0.0125 || p.Groups[0].RaisedAt != nil || p.Groups[0].ResetAt == nil {
		t.Errorf("after the reset (the second sequence runs at alpha/4, no raised_at, a reset_at): %+v", p)
	}
	if v, _ := s.gauge(t, "systemone_guarantee_alarm"+series); v != 0 {
		t.Errorf("alarm gauge after the reset: %v", v)
	}
	resp = s.waitReason(t, time.Now().Add(10*time.Second), "confident")
	if resp.Header.Get("X-Route") != "auto" {
		t.Errorf("after the reset: X-Route %q", resp.Header.Get("X-Route"))
	}
	// A reset group counts afresh. The audited auto entries asked while
	// the alarm was reaching the gateway are still unlabelled: they hold
	// the monitor's evidence back (the complete prefix) until labelled.
	last := s.entryOf(t, resp)
	s.label(t, last, true)
	if p := s.guarantee(t); p.Groups[0].Entries != 0 {
		t.Errorf("observed past unlabelled audited entries: %+v", p)
	}
	var list struct{ Items []map[string]any }
	if r, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/items?unlabeled=1&audit=1&limit=500", "")); r.StatusCode != 200 || json.Unmarshal(raw, &list) != nil {
		t.Fatalf("items: %d %s", r.StatusCode, raw)
	}
	entries, labels := 1, 2
	for _, it := range list.Items {
		auto := 0
		for _, q := range it["questions"].([]any) {
			if q.(map[string]any)["route"] == "auto" {
				auto++
			}
		}
		if auto > 0 {
			entries, labels = entries+1, labels+auto
		}
		s.label(t, it, true)
	}
	if p := s.guarantee(t); p.Groups[0].Labels != labels || p.Groups[0].Entries != entries || p.Groups[0].Agree != labels || p.Groups[0].Alarm {
		t.Errorf("after the reset and %d agreeing entries: %+v", entries, p)
	}
}
