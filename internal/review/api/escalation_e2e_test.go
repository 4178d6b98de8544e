package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
)

const (
	firstVersion  = "service-1.0.0"
	secondVersion = "service-2.0.0"
)

// escalatingUpstream answers noul questions by their id's prefix and the
// version asked (no model: the first; any other version answers as the
// second): "sure" yes at 0.9375 from either (confidence 0.875); "esc" no
// at 0.25 from the first version (confidence 0.5), yes at 0.875 from the
// others (0.75); "hard" no at 0.25 from the first, yes at 0.625 from the
// others (0.25). Binary fractions, so that the confidences print exactly.
// A "pick" question is a choice, answered "yes" at confidence 0.5.
func escalatingUpstream(t *testing.T) *gatewaytest.Upstream {
	return gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model     string                     `json:"model"`
			Questions map[string]json.RawMessage `json:"questions"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		version := firstVersion
		if req.Model != "" {
			version = req.Model
		}
		answers := map[string]any{}
		for id := range req.Questions {
			p := 0.9375
			switch {
			case version == firstVersion && (strings.HasPrefix(id, "esc") || strings.HasPrefix(id, "hard")):
				p = 0.25
			case strings.HasPrefix(id, "esc"):
				p = 0.875
			case strings.HasPrefix(id, "hard"):
				p = 0.625
			}
			answers[id] = map[string]any{"type": "noul", "noul": p}
			if strings.HasPrefix(id, "pick") {
				answers[id] = map[string]any{"type": "choice", "choice": "yes", "probabilities": map[string]float64{"yes": 0.75, "no": 0.25}, "confidence": 0.5}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", fmt.Sprintf("req-%s-%p", version, r))
		_ = json.NewEncoder(w).Encode(map[string]any{"model": version, "answers": answers, "usage": map[string]any{"input_tokens": 10, "output_tokens": 1}})
	}))
}

// escalationStack is a gateway that escalates service-1.0.0's unsure noul
// answers to service-2.0.0 (noul 0.8, then 0.6), audits every answer and
// routes alarmed groups human, and a review handler with monitor 0.9 at
// once (settle and correct_within 0s), on one Redis.
type escalationStack struct {
	monitorStack
	upstream *gatewaytest.Upstream
}

func newEscalationStack(t *testing.T) *escalationStack {
	t.Helper()
	rs := redistest.Start(t)
	s := &escalationStack{upstream: escalatingUpstream(t)}
	up := s.upstream
	port, metricsPort := gatewaytest.FreePort(t), gatewaytest.FreePort(t)
	gatewaytest.Load(t, fmt.Sprintf(`:%[1]d {
	handle_path /review/* {
		systemone_review {
			redis %[2]s
			stream %[3]s
			monitor 0.9 alpha 0.05 settle 0s
			correct_within 0s
		}
	}
	handle {
		systemone {
			redis %[2]s
			route {
				pin %[6]s {
					noul 0.8
				}
				escalate %[6]s to %[7]s {
					noul 0.6
				}
				queue %[3]s
				include_content
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
`, port, rs.URL(), stream, up.Addr(), metricsPort, firstVersion, secondVersion))
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	s.monitorStack = monitorStack{
		url:     fmt.Sprintf("http://127.0.0.1:%d", port),
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		rdb:     rdb,
	}
	return s
}

// askIDs sends noul questions with the given ids (a choice of yes or no
// for an id starting with "pick") and returns the response.
func (s *escalationStack) askIDs(t *testing.T, ids ...string) *http.Response {
	t.Helper()
	qs := make([]string, len(ids))
	for i, id := range ids {
		qs[i] = fmt.Sprintf(`%q:{"type":"noul","instructions":"Was it late?"}`, id)
		if strings.HasPrefix(id, "pick") {
			qs[i] = fmt.Sprintf(`%q:{"type":"choice","instructions":"Whose fault?","criteria":{"yes":null,"no":null}}`, id)
		}
	}
	req := mustRequest(t, http.MethodPost, s.url+"/v1/systemone", `{"state":"the parcel came a day late","questions":{`+strings.Join(qs, ",")+`}}`)
	req.Header.Set("Authorization", "Bearer escalation-test-key")
	req.Header.Set("Content-Type", "application/json")
	resp, raw := do(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("evaluation: %d %s", resp.StatusCode, raw)
	}
	return resp
}

// put labels the questions of entry id: question id -> label.
func (s *escalationStack) put(t *testing.T, id string, labels map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"labels": labels, "reviewer": "ana"})
	if resp, raw := do(t, mustRequest(t, http.MethodPut, s.url+"/review/items/"+id+"/labels", string(body))); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT labels: %d %s", resp.StatusCode, raw)
	}
}

// labels returns GET /labels, one decoded line per element.
func (s *escalationStack) labels(t *testing.T) []map[string]any {
	t.Helper()
	resp, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/labels", ""))
	if resp.StatusCode != 200 {
		t.Fatalf("labels: %d %s", resp.StatusCode, raw)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// lineShape is a `/labels` line without the fields every line of an entry
// shares, as "question stage model confidence answer label agree route
// escalated_from".
func lineShape(l map[string]any) string {
	return fmt.Sprint(l["question"], " ", l["stage"], " ", l["model"], " ", l["confidence"], " ", l["answer"], " ",
		l["label"], " ", l["agree"], " ", l["route"], " ", l["escalated_from"])
}

// An escalated question's labels export as two lines, the first answer's
// (stage 1) and the second's (stage 2, escalated_from the first version),
// each agreeing against the same label by its own answer, from before
// the entry is labelled (label and agree null) to after; a question not
// escalated has its one stage 1 line. The monitor observes the escalated
// question's second answer in a group of its own, shown in /guarantee and
// the gauges as the escalated group.
func TestLabelsOfEscalatedQuestions(t *testing.T) {
	s := newEscalationStack(t)
	resp := s.askIDs(t, "sure", "esc", "hard")
	if got := resp.Header.Get("X-Route-Questions"); got != "sure=auto, esc=auto, hard=human" || resp.Header.Get("X-Route-Escalated") != "esc="+secondVersion {
		t.Fatalf("routes %q escalated %q", got, resp.Header.Get("X-Route-Escalated"))
	}
	id := lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id"))

	shapes := func() []string {
		var out []string
		for _, l := range s.labels(t) {
			if l["entry"] != id || l["audit"] != true || l["request_id"] != resp.Header.Get("X-Request-Id") || l["type"] != "noul" {
				t.Errorf("line %v: want the entry's fields", l)
			}
			out = append(out, lineShape(l))
		}
		return out
	}
	// Before any label: the audited entry's lines, label and agree null,
	// in the entry's order.
	pending := []string{
		"sure 1 service-1.0.0 0.875 0.9375 <nil> <nil> auto <nil>",
		"esc 1 service-1.0.0 0.5 0.25 <nil> <nil> human <nil>",
		"esc 2 service-2.0.0 0.75 0.875 <nil> <nil> auto service-1.0.0",
		"hard 1 service-1.0.0 0.5 0.25 <nil> <nil> human <nil>",
		"hard 2 service-2.0.0 0.25 0.625 <nil> <nil> human service-1.0.0",
	}
	if got := shapes(); !slices.Equal(got, pending) {
		t.Errorf("pending lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(pending, "\n"))
	}

	// Labelled yes: the first version said no to esc and hard, the second
	// yes to both. Stored lines export in question id order.
	s.put(t, id, map[string]any{"sure": true, "esc": true, "hard": true})
	labelled := []string{
		"esc 1 service-1.0.0 0.5 0.25 true false human <nil>",
		"esc 2 service-2.0.0 0.75 0.875 true true auto service-1.0.0",
		"hard 1 service-1.0.0 0.5 0.25 true false human <nil>",
		"hard 2 service-2.0.0 0.25 0.625 true true human service-1.0.0",
		"sure 1 service-1.0.0 0.875 0.9375 true true auto <nil>",
	}
	if got := shapes(); !slices.Equal(got, labelled) {
		t.Errorf("labelled lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(labelled, "\n"))
	}
	// The item shows the one label per question.
	var item struct {
		Labels    map[string]any   `json:"labels"`
		Questions []map[string]any `json:"questions"`
	}
	if r, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/items/"+id, "")); r.StatusCode != 200 || json.Unmarshal(raw, &item) != nil {
		t.Fatalf("item: %d %s", r.StatusCode, raw)
	}
	if len(item.Labels) != 3 || item.Labels["esc"] != true || item.Questions[1]["reason"] != "low_confidence" || item.Questions[0]["reason"] != "confident" {
		t.Errorf("item labels %v, questions %v", item.Labels, item.Questions)
	}

	// The monitor: sure in service-1.0.0's noul group, esc's second answer
	// in the escalated group; hard was routed human, no observation.
	p := s.guaranteeGroups(t)
	want := []string{
		"service-1.0.0 noul escalated=false from= entries=1 labels=1 agree=1 late=0",
		"service-2.0.0 noul escalated=true from=service-1.0.0 entries=1 labels=1 agree=1 late=0",
	}
	if !slices.Equal(p, want) {
		t.Errorf("guarantee groups\n%s\nwant\n%s", strings.Join(p, "\n"), strings.Join(want, "\n"))
	}
	series := `systemone_guarantee_evidence{escalated_from="service-1.0.0",model="service-2.0.0",type="noul"}`
	if _, ok := s.gauge(t, series); !ok {
		t.Errorf("no gauge %s", series)
	}
	if _, ok := s.gauge(t, `systemone_guarantee_evidence{model="service-1.0.0",type="noul"}`); !ok {
		t.Error("no gauge of the first version's own group")
	}

	// A correction after the entry was taken: counted per group, the
	// second answer's for the escalated group; turning the second answer's
	// agreement into a disagreement reaches the escalated group's evidence
	// (the first version's answer to esc was routed human: not observed).
	s.put(t, id, map[string]any{"esc": false})
	want[0] = strings.Replace(want[0], "late=0", "late=1", 1)
	want[1] = strings.Replace(strings.Replace(want[1], "late=0", "late=1", 1), "agree=1", "agree=0", 1)
	if p := s.guaranteeGroups(t); !slices.Equal(p, want) {
		t.Errorf("after a late correction\n%s\nwant\n%s", strings.Join(p, "\n"), strings.Join(want, "\n"))
	}

	// A passed entry: each line of each question, agree null, pass true.
	resp = s.askIDs(t, "esc")
	passed := lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id"))
	if r, raw := do(t, mustRequest(t, http.MethodPut, s.url+"/review/items/"+passed+"/labels", `{"pass":true}`)); r.StatusCode != http.StatusNoContent {
		t.Fatalf("pass: %d %s", r.StatusCode, raw)
	}
	var got []string
	for _, l := range s.labels(t) {
		if l["entry"] == passed {
			got = append(got, fmt.Sprint(lineShape(l), " pass=", l["pass"]))
		}
	}
	if want := []string{
		"esc 1 service-1.0.0 0.5 0.25 <nil> <nil> human <nil> pass=true",
		"esc 2 service-2.0.0 0.75 0.875 <nil> <nil> auto service-1.0.0 pass=true",
	}; !slices.Equal(got, want) {
		t.Errorf("passed entry's lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// guaranteeGroups returns GET /guarantee's groups as "model type
// escalated=.. from=.. entries=.. labels=.. agree=.. late=..", in its order.
func (s *escalationStack) guaranteeGroups(t *testing.T) []string {
	t.Helper()
	resp, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/guarantee", ""))
	var p struct {
		Groups []struct {
			Model, Type            string
			EscalatedFrom          string `json:"escalated_from"`
			Escalated              bool
			Entries, Labels, Agree int
			Late                   int `json:"late_corrections"`
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &p) != nil {
		t.Fatalf("GET /guarantee: %d %s", resp.StatusCode, raw)
	}
	var out []string
	for _, g := range p.Groups {
		out = append(out, fmt.Sprintf("%s %s escalated=%v from=%s entries=%d labels=%d agree=%d late=%d",
			g.Model, g.Type, g.Escalated, g.EscalatedFrom, g.Entries, g.Labels, g.Agree, g.Late))
	}
	return out
}

// The escalated group's alarm end to end: second answers that people judge
// wrong raise the alarm of the escalated group alone (the first version's
// group, agreeing, stays quiet); every gateway then routes the escalated
// questions human with reason guarantee_alarm within 10 seconds of the
// label, the first version's confident answers of the same type still
// auto; DELETE with escalated_from resets it, and the second version
// answers again.
func TestEscalatedGroupAlarm(t *testing.T) {
	s := newEscalationStack(t)
	escalated := []string{"sure", "esc0", "esc1", "esc2", "esc3"}
	var labelled time.Time
	var groups []string
	for entries := 1; ; entries++ {
		if entries == 30 {
			t.Fatalf("no alarm after %d entries: %v", entries, groups)
		}
		resp := s.askIDs(t, escalated...)
		if resp.Header.Get("X-Route-Reason") != "escalated" {
			t.Fatalf("entry %d: reason %q, want escalated", entries, resp.Header.Get("X-Route-Reason"))
		}
		// The first version is right about sure, the second wrong about
		// each esc question.
		s.put(t, lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id")), map[string]any{"sure": true, "esc0": false, "esc1": false, "esc2": false, "esc3": false})
		labelled = time.Now()
		groups = s.guaranteeGroups(t)
		if len(groups) != 2 || !strings.Contains(groups[0], fmt.Sprintf("entries=%d labels=%d agree=%d", entries, entries, entries)) ||
			!strings.Contains(groups[1], fmt.Sprintf("escalated=true from=service-1.0.0 entries=%d labels=%d agree=0", entries, 4*entries)) {
			t.Fatalf("after %d entries: %v", entries, groups)
		}
		if s.alarmed(t, secondVersion, "service-1.0.0") {
			t.Logf("the escalated group's alarm at the %d-th entry", entries)
			break
		}
	}
	if s.alarmed(t, firstVersion, "") {
		t.Error("the first version's agreeing group is in alarm too")
	}
	series := `systemone_guarantee_alarm{escalated_from="service-1.0.0",model="service-2.0.0",type="noul"}`
	if v, ok := s.gauge(t, series); !ok || v != 1 {
		t.Errorf("%s = %v (%v), want 1", series, v, ok)
	}

	resp := s.waitEscalation(t, labelled.Add(10*time.Second), "guarantee_alarm")
	if got := resp.Header.Get("X-Route-Questions"); got != "sure=auto, esc0=human" || resp.Header.Get("X-Route-Escalated") != "" || resp.Header.Get("X-Route") != "human" {
		t.Errorf("alarmed: questions %q, escalated %q, route %q", got, resp.Header.Get("X-Route-Escalated"), resp.Header.Get("X-Route"))
	}
	t.Logf("guarantee_alarm %v after the label", time.Since(labelled).Round(time.Millisecond))
	// Its entry keeps the second answer, routed human, for the labels
	// that recalibrate the block.
	var item struct{ Questions []map[string]any }
	if r, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/items/"+lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id")), "")); r.StatusCode != 200 || json.Unmarshal(raw, &item) != nil {
		t.Fatalf("item: %d %s", r.StatusCode, raw)
	}
	if esc, _ := item.Questions[1]["escalated"].(map[string]any); esc == nil || esc["route"] != "human" || item.Questions[1]["reason"] != "low_confidence" {
		t.Errorf("alarmed entry's question %v: want its second answer, routed human, asked again for low_confidence", item.Questions[1])
	}

	for _, c := range []struct {
		path   string
		status int
	}{
		{"/review/guarantee/" + secondVersion + "/noul", 404}, // the second version's own group: never seen
		{"/review/guarantee/" + secondVersion + "/noul?escalated_from=service-0.9.0", 404},
		{"/review/guarantee/" + secondVersion + "/noul?escalated_from=" + firstVersion, 204},
	} {
		if r, raw := do(t, mustRequest(t, http.MethodDelete, s.url+c.path, "")); r.StatusCode != c.status {
			t.Errorf("DELETE %s: %d %s, want %d", c.path, r.StatusCode, raw, c.status)
		}
	}
	if s.alarmed(t, secondVersion, firstVersion) {
		t.Error("the escalated group is still in alarm after its reset")
	}
	s.waitEscalation(t, time.Now().Add(10*time.Second), "escalated")
}

// alarmed reports whether GET /guarantee shows model's noul group (the
// escalated one of first version from, when not "") in alarm.
func (s *escalationStack) alarmed(t *testing.T, model, from string) bool {
	t.Helper()
	resp, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/guarantee", ""))
	var p struct {
		Groups []struct {
			Model         string `json:"model"`
			EscalatedFrom string `json:"escalated_from"`
			Alarm         bool   `json:"alarm"`
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &p) != nil {
		t.Fatalf("GET /guarantee: %d %s", resp.StatusCode, raw)
	}
	for _, g := range p.Groups {
		if g.Model == model && g.EscalatedFrom == from {
			return g.Alarm
		}
	}
	return false
}

// waitEscalation asks sure and esc0 until X-Route-Reason is want, failing
// when deadline passes first.
func (s *escalationStack) waitEscalation(t *testing.T, deadline time.Time, want string) *http.Response {
	t.Helper()
	for {
		resp := s.askIDs(t, "sure", "esc0")
		if resp.Header.Get("X-Route-Reason") == want {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("X-Route-Reason %q, want %q in time", resp.Header.Get("X-Route-Reason"), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
