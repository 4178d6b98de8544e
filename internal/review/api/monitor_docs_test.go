package api_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
)

// fenced returns the fenced blocks of doc with the given info string.
func fencedIn(doc, info string) []string {
	var out []string
	for _, part := range strings.Split(doc, "```"+info+"\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		out = append(out, block)
	}
	return out
}

// docs/monitor.md as an operator follows it: its Caddyfile adapts and
// serves (Redis from REDIS_URL, the ports moved to free ones), its JSON
// example has GET /guarantee's fields, and its curl commands get the
// answers it describes (the reset after seeding a group, since labelling
// to an alarm is TestGuaranteeEndToEnd's).
func TestMonitorDocs(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/monitor.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	g := serveMonitorDoc(t, doc, nil)
	config := fencedIn(doc, "caddyfile")[0]
	for _, want := range []string{"monitor 0.95 alpha 0.05", "on_alarm human", "{env.REDIS_URL}"} {
		if !strings.Contains(config, want) {
			t.Errorf("the example lacks %q", want)
		}
	}

	var example struct {
		Target, Alpha float64
		Groups        []map[string]any
	}
	if blocks := fencedIn(doc, "json"); len(blocks) != 1 || json.Unmarshal([]byte(blocks[0]), &example) != nil ||
		len(example.Groups) != 1 || !slices.Equal(slices.Sorted(maps.Keys(example.Groups[0])), []string{"agree", "alarm", "alpha", "entries", "escalated", "escalated_from", "evidence", "labels", "late_corrections", "model", "org", "raised_at", "refused", "reset_at", "type"}) {
		t.Errorf("the JSON example is not GET /guarantee's form: %+v", example)
	}

	rdb := g.rdb
	curl := regexp.MustCompile(`^curl -s -u (\S+):(\S+)(?: -X (\S+))? http://localhost:8080(\S+)$`)
	var commands [][]string
	for _, block := range fencedIn(doc, "sh") {
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			m := curl.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				t.Fatalf("a command the test does not run: %q", line)
			}
			commands = append(commands, m)
		}
	}
	if len(commands) != 2 {
		t.Fatalf("%d commands, want GET and DELETE", len(commands))
	}
	if commands[0][1] != "ann" || commands[1][1] != "ops" {
		t.Fatalf("the GET is the reviewer's and the reset the operator's: %q", commands)
	}
	send := func(m []string) (*http.Response, []byte) {
		method := m[3]
		if method == "" {
			method = http.MethodGet
		}
		req := mustRequest(t, method, g.url+m[4], "")
		req.SetBasicAuth(m[1], m[2])
		return do(t, req)
	}
	// GET /guarantee: the monitor's settings, no group yet.
	resp, body := send(commands[0])
	var page guaranteePage
	if resp.StatusCode != 200 || json.Unmarshal(body, &page) != nil || page.Target != 0.95 || page.Alpha != 0.05 || len(page.Groups) != 0 {
		t.Errorf("GET /guarantee: %d %s", resp.StatusCode, body)
	}
	// DELETE of a group never seen: 404; of a group in alarm: 204 and afresh.
	if resp, body := send(commands[1]); resp.StatusCode != 404 {
		t.Errorf("DELETE of a group never seen: %d %s", resp.StatusCode, body)
	}
	ctx := context.Background()
	member := monitor.Group{Model: "service-1.0.0", Type: "noul"}.Member()
	alarmed := monitor.State{Target: 0.95, Sequence: 1, Entries: 61, Labels: 143, Agree: 121, Evidence: 41.7, Curvature: 2, Alarm: true}
	if err := rdb.HSet(ctx, monitor.StateKey("systemone:", "review:human"), member, alarmed.Encode()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(ctx, monitor.AlarmKey("systemone:", "review:human"), member).Err(); err != nil {
		t.Fatal(err)
	}
	// The reset is the operator's: a reviewer's login is refused, on any
	// group, and the group stays in alarm.
	asReviewer := slices.Clone(commands[1])
	asReviewer[1], asReviewer[2] = commands[0][1], commands[0][2]
	if resp, body := send(asReviewer); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("DELETE with the reviewer's login: %d %s, want 401", resp.StatusCode, body)
	}
	if n, _ := rdb.SCard(ctx, monitor.AlarmKey("systemone:", "review:human")).Result(); n != 1 {
		t.Errorf("a reviewer's DELETE touched the alarm")
	}
	// The operator reads too.
	asOperator := slices.Clone(commands[0])
	asOperator[1], asOperator[2] = commands[1][1], commands[1][2]
	if resp, body := send(asOperator); resp.StatusCode != 200 {
		t.Errorf("GET /guarantee as the operator: %d %s", resp.StatusCode, body)
	}
	if resp, body := send(commands[1]); resp.StatusCode != 204 {
		t.Errorf("DELETE of a group in alarm: %d %s", resp.StatusCode, body)
	}
	resp, body = send(commands[0])
	if json.Unmarshal(body, &page) != nil || len(page.Groups) != 1 || page.Groups[0].Labels != 0 || page.Groups[0].Evidence != 1 || page.Groups[0].Alarm ||
		page.Groups[0].Alpha != 0.0125 {
		t.Errorf("after the reset: %d %s", resp.StatusCode, body)
	}
	if n, _ := rdb.SCard(ctx, monitor.AlarmKey("systemone:", "review:human")).Result(); n != 0 {
		t.Errorf("%d groups still in the alarm set", n)
	}
}
