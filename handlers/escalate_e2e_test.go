package handlers_test

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

const (
	firstVersion  = "service-1.0.0"
	secondVersion = "service-2.0.0"
	escalateCert  = "0123456789abcdef"
)

// escalatingUpstream answers noul questions with the probability the test
// gives per version and question id (0.5, unsure, when none), billing
// 100 input tokens for the first version and 40 for the second. A second
// version's call does what X-Test-Second says: "500" fails it, "529"
// overloads it, "slow" holds it until the gateway gives up.
func escalatingUpstream(t *testing.T, noul map[string]map[string]float64) *gatewaytest.Upstream {
	return gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model     string                     `json:"model"`
			Questions map[string]json.RawMessage `json:"questions"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		version, tokens := firstVersion, 100
		if req.Model == secondVersion {
			version, tokens = secondVersion, 40
			switch r.Header.Get("X-Test-Second") {
			case "500":
				http.Error(w, `{"detail":"boom"}`, http.StatusInternalServerError)
				return
			case "529":
				w.WriteHeader(529)
				_, _ = w.Write([]byte(`{"detail":"overloaded"}`))
				return
			case "slow":
				<-r.Context().Done()
				return
			}
		}
		answers := map[string]any{}
		for id := range req.Questions {
			p, ok := noul[version][id]
			if !ok {
				p = 0.5
			}
			answers[id] = map[string]any{"type": "noul", "noul": p}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-"+version)
		var out io.Writer = w
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		}
		_ = json.NewEncoder(out).Encode(map[string]any{
			"model": version, "answers": answers,
			"usage": map[string]any{"input_tokens": tokens, "output_tokens": tokens / 20},
		})
	}))
}

// escalatingGateway loads a gateway with escalateRoute(extra) in front of
// an escalatingUpstream where the first version is unsure of "unsure" and
// sure of "sure", the second sure of "unsure".
func escalatingGateway(t *testing.T, extra string) (*gatewaytest.Upstream, string, *gatewaytest.Gateway) {
	up := escalatingUpstream(t, map[string]map[string]float64{
		firstVersion:  {"unsure": 0.5, "sure": 0.99},
		secondVersion: {"unsure": 0.95},
	})
	sites, url := site(t, up.Addr(), escalateRoute(extra))
	return up, url, gatewaytest.Load(t, sites)
}

// postEscalated posts escalateBody("unsure") and fails unless it was
// escalated.
func postEscalated(t *testing.T, url string) {
	t.Helper()
	resp, raw := post(t, url, "k", escalateBody("unsure"))
	if resp.StatusCode != 200 || resp.Header.Get("X-Route-Escalated") == "" {
		t.Fatalf("%d escalated %q: %s", resp.StatusCode, resp.Header.Get("X-Route-Escalated"), raw)
	}
}

func escalateRoute(extra string) string {
	return fmt.Sprintf(`		route {
			pin %s {
				noul 0.8
			}
			escalate %s to %s {
				noul 0.6 cert %s
				timeout 300ms
			}
		}
%s`, firstVersion, firstVersion, secondVersion, escalateCert, extra)
}

// escalateBody asks noul questions with the given ids of the first version.
func escalateBody(ids ...string) string {
	args := []string{}
	for _, id := range ids {
		args = append(args, id, "noul")
	}
	return questionsBody(firstVersion, args...)
}

type answerBody struct {
	Model   string                     `json:"model"`
	Answers map[string]json.RawMessage `json:"answers"`
	Usage   map[string]int64           `json:"usage"`
}

func decodeAnswer(t *testing.T, raw []byte) answerBody {
	t.Helper()
	var b answerBody
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("body %s: %v", raw, err)
	}
	return b
}

func lastEntry(t *testing.T, g *gatewaytest.Gateway) map[string]any {
	t.Helper()
	entries := g.Entries()
	if len(entries) == 0 {
		t.Fatal("no log entry")
	}
	return entries[len(entries)-1]
}

// A question the first version is unsure of is asked again of the second,
// whose confident answer the client gets in its place: headers, body,
// usage, the log and the metric say so; the second call carried the
// client's key, the same state, that question only and the second model.
func TestEscalationAnswersFromTheSecondVersion(t *testing.T) {
	up := escalatingUpstream(t, map[string]map[string]float64{
		firstVersion:  {"sure": 0.99, "unsure": 0.5, "hard": 0.5},
		secondVersion: {"unsure": 0.95, "hard": 0.6},
	})
	sites, url := site(t, up.Addr(), escalateRoute(""))
	metricsPort := gatewaytest.FreePort(t)
	g := gatewaytest.Load(t, sites+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsPort))
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	series := func(outcome string) string {
		return fmt.Sprintf(`systemone_escalations_total{from=%q,outcome=%q,to=%q}`, firstVersion, outcome, secondVersion)
	}

	resp, raw := post(t, url, "client-key", escalateBody("sure", "unsure"))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	for name, want := range map[string]string{
		"X-Route":             "auto",
		"X-Route-Reason":      "escalated",
		"X-Route-Questions":   "sure=auto, unsure=auto",
		"X-Route-Escalated":   "unsure=" + secondVersion,
		"X-Route-Certificate": "unsure=" + escalateCert,
		"X-Route-Model":       firstVersion,
		"X-Route-Confidence":  "0.90",
		"Content-Length":      fmt.Sprint(len(raw)),
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	b := decodeAnswer(t, raw)
	if b.Model != firstVersion || string(b.Answers["unsure"]) != `{"noul":0.95,"type":"noul"}` || string(b.Answers["sure"]) != `{"noul":0.99,"type":"noul"}` {
		t.Errorf("body %s: want the first version's model and sure, the second's unsure", raw)
	}
	if b.Usage["input_tokens"] != 140 || b.Usage["output_tokens"] != 7 {
		t.Errorf("usage %v, want the sum of both calls' (140, 7)", b.Usage)
	}

	second := up.Last()
	var asked struct {
		Model     string                     `json:"model"`
		State     string                     `json:"state"`
		Questions map[string]json.RawMessage `json:"questions"`
	}
	if err := json.Unmarshal(second.Body, &asked); err != nil {
		t.Fatal(err)
	}
	if asked.Model != secondVersion || asked.State != "The parcel arrived two days late." || len(asked.Questions) != 1 || asked.Questions["unsure"] == nil {
		t.Errorf("second call's body %s: want the second model, the same state and only the unsure question", second.Body)
	}
	if got := second.Header.Get("Authorization"); got != "Bearer client-key" {
		t.Errorf("second call's Authorization %q, want the client's", got)
	}
	if up.Calls() != 2 {
		t.Errorf("%d upstream calls, want 2", up.Calls())
	}
	e := lastEntry(t, g)
	if e["escalation"] != "auto" || e["route"] != "auto" || e["route_reason"] != "escalated" {
		t.Errorf("log entry: escalation %v route %v reason %v", e["escalation"], e["route"], e["route_reason"])
	}
	if got := metricValue(t, metricsURL, series("auto")); got != "1" {
		t.Errorf("%s = %s, want 1", series("auto"), got)
	}

	// One question the second version is still unsure of stays human,
	// with its first reason; the one it is sure of is answered by it.
	resp, raw = post(t, url, "client-key", escalateBody("unsure", "hard"))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	for name, want := range map[string]string{
		"X-Route":             "human",
		"X-Route-Reason":      "low_confidence",
		"X-Route-Questions":   "hard=human, unsure=auto", // the request's order: questionsBody sorts ids
		"X-Route-Escalated":   "unsure=" + secondVersion,
		"X-Route-Certificate": "unsure=" + escalateCert,
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("partly: %s = %q, want %q", name, got, want)
		}
	}
	b = decodeAnswer(t, raw)
	if string(b.Answers["hard"]) != `{"noul":0.5,"type":"noul"}` || string(b.Answers["unsure"]) != `{"noul":0.95,"type":"noul"}` {
		t.Errorf("partly: body %s", raw)
	}
	if e := lastEntry(t, g); e["escalation"] != "human" {
		t.Errorf("partly: escalation %v, want human", e["escalation"])
	}
	if got := metricValue(t, metricsURL, series("human")); got != "1" {
		t.Errorf("%s = %s, want 1", series("human"), got)
	}

	// A client that asks the second version itself is routed as today:
	// unpinned, not escalated.
	calls := up.Calls()
	resp, raw = post(t, url, "client-key", questionsBody(secondVersion, "unsure", "noul"))
	if resp.StatusCode != 200 || resp.Header.Get("X-Route-Reason") != "unpinned_version" || resp.Header.Get("X-Route-Escalated") != "" || up.Calls() != calls+1 {
		t.Errorf("asked of the second version: %d reason %q escalated %q, %d calls: %s", resp.StatusCode,
			resp.Header.Get("X-Route-Reason"), resp.Header.Get("X-Route-Escalated"), up.Calls()-calls, raw)
	}
	if e := lastEntry(t, g); e["escalation"] != "" {
		t.Errorf("not escalated: escalation %v, want empty", e["escalation"])
	}
}

// When the second call fails, times out, is refused by the org's limits or
// meets an open breaker, the client gets the first answer, routed as
// without escalation, and the log says why.
func TestEscalationFailuresAnswerTheFirst(t *testing.T) {
	up := escalatingUpstream(t, map[string]map[string]float64{
		firstVersion:  {"unsure": 0.5},
		secondVersion: {"unsure": 0.95},
	})
	for _, tc := range []struct {
		name, block, second string
		outcome             string
		calls               int64 // upstream calls for the request
	}{
		{"second call fails", "", "500", "failed", 2},
		{"second call times out", "", "slow", "timeout", 2},
		{"second call overloaded", "\t\tbreaker {\n\t\t\tfailures 1\n\t\t\topen_for 1m\n\t\t}\n", "529", "failed", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sites, url := site(t, up.Addr(), escalateRoute(tc.block))
			g := gatewaytest.Load(t, sites)
			calls := up.Calls()
			resp, raw := post(t, url, "k", escalateBody("unsure"), "X-Test-Second", tc.second)
			assertFirstAnswer(t, resp, raw)
			if e := lastEntry(t, g); e["escalation"] != tc.outcome {
				t.Errorf("escalation %v, want %s", e["escalation"], tc.outcome)
			}
			if got := up.Calls() - calls; got != tc.calls {
				t.Errorf("%d upstream calls, want %d", got, tc.calls)
			}
			if tc.second != "529" {
				return
			}
			// The second version's breaker opened on its 529: the next
			// escalation does not reach it, the first version still
			// answers.
			calls = up.Calls()
			resp, raw = post(t, url, "k", escalateBody("unsure"))
			assertFirstAnswer(t, resp, raw)
			if e := lastEntry(t, g); e["escalation"] != "breaker_open" {
				t.Errorf("escalation %v, want breaker_open", e["escalation"])
			}
			if got := up.Calls() - calls; got != 1 {
				t.Errorf("%d upstream calls with the breaker open, want 1", got)
			}
		})
	}
}

// The second call is a request of the org: it counts in its buckets, and
// when they refuse it the client gets the first answer.
func TestEscalationPassesTheOrgsLimits(t *testing.T) {
	up, url, g := escalatingGateway(t, "\t\tlimits {\n\t\t\trequests_per_minute 3\n\t\t\ttokens_per_second 0\n\t\t}\n")
	postEscalated(t, url)
	// Two requests of three counted; the third, the next request's first
	// call, is the last: its second call is refused.
	resp, raw := post(t, url, "k", escalateBody("unsure"))
	assertFirstAnswer(t, resp, raw)
	if got := resp.Header.Get("X-RateLimit-Remaining-Requests"); got != "0" {
		t.Errorf("X-RateLimit-Remaining-Requests %q after three requests counted, want 0", got)
	}
	if e := lastEntry(t, g); e["escalation"] != "refused" {
		t.Errorf("escalation %v, want refused", e["escalation"])
	}
	if up.Calls() != 3 {
		t.Errorf("%d upstream calls, want 3 (the refused second call never went)", up.Calls())
	}
}

// assertFirstAnswer checks a response is the first version's answer to
// escalateBody("unsure"), routed as without escalation.
func assertFirstAnswer(t *testing.T, resp *http.Response, raw []byte) {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	if got := resp.Header.Get("X-Route") + " " + resp.Header.Get("X-Route-Reason") + " " + resp.Header.Get("X-Route-Questions"); got != "human low_confidence unsure=human" {
		t.Errorf("route %q, want the first answer's", got)
	}
	if got := resp.Header.Get("X-Route-Escalated"); got != "" {
		t.Errorf("X-Route-Escalated %q, want none", got)
	}
	b := decodeAnswer(t, raw)
	if b.Model != firstVersion || !strings.Contains(string(b.Answers["unsure"]), `"noul":0.5`) || b.Usage["input_tokens"] != 100 {
		t.Errorf("body %s: want the first version's answer as it came", raw)
	}
}

// A compressed first answer is escalated all the same: the client gets
// the gateway's body, uncompressed, with its own length.
func TestEscalationOfACompressedAnswer(t *testing.T) {
	_, url, _ := escalatingGateway(t, "")
	resp, raw := post(t, url, "k", escalateBody("unsure"), "Accept-Encoding", "gzip")
	if resp.StatusCode != 200 || resp.Header.Get("X-Route-Escalated") != "unsure="+secondVersion {
		t.Fatalf("%d escalated %q: %s", resp.StatusCode, resp.Header.Get("X-Route-Escalated"), raw)
	}
	if ce, cl := resp.Header.Get("Content-Encoding"), resp.Header.Get("Content-Length"); ce != "" || cl != fmt.Sprint(len(raw)) {
		t.Errorf("Content-Encoding %q Content-Length %q for %d bytes", ce, cl, len(raw))
	}
	if b := decodeAnswer(t, raw); string(b.Answers["unsure"]) != `{"noul":0.95,"type":"noul"}` || b.Usage["input_tokens"] != 140 {
		t.Errorf("body %s", raw)
	}
	// Not escalated, a compressed answer passes as it came.
	resp, _ = post(t, url, "k", escalateBody("sure"), "Accept-Encoding", "gzip")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("not escalated: %d Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
}

// An answer from the cache is escalated as a fresh one: the cache keeps
// the first version's answer, and the second version's, stored when it
// was asked, answers the second call.
func TestEscalationOfACacheHit(t *testing.T) {
	up := escalatingUpstream(t, map[string]map[string]float64{
		firstVersion:  {"unsure": 0.5},
		secondVersion: {"unsure": 0.95},
	})
	sites, url := site(t, up.Addr(), "\t\tcache\n"+escalateRoute(""))
	g := gatewaytest.Load(t, sites)
	body := escalateBody("unsure")

	first, firstBody := post(t, url, "k", body)
	if first.StatusCode != 200 || first.Header.Get("X-Cache") != "miss" || first.Header.Get("X-Route-Escalated") == "" {
		t.Fatalf("first: %d X-Cache %q escalated %q: %s", first.StatusCode, first.Header.Get("X-Cache"), first.Header.Get("X-Route-Escalated"), firstBody)
	}
	calls := up.Calls()
	hit, hitBody := post(t, url, "k", body)
	if hit.StatusCode != 200 || hit.Header.Get("X-Cache") != "hit" {
		t.Fatalf("second: %d X-Cache %q: %s", hit.StatusCode, hit.Header.Get("X-Cache"), hitBody)
	}
	if got := up.Calls() - calls; got != 0 {
		t.Errorf("%d upstream calls for the hit, want none: both answers are stored", got)
	}
	for _, name := range []string{"X-Route", "X-Route-Reason", "X-Route-Questions", "X-Route-Escalated", "X-Route-Certificate", "Content-Length"} {
		if hit.Header.Get(name) != first.Header.Get(name) {
			t.Errorf("hit %s = %q, the fresh answer had %q", name, hit.Header.Get(name), first.Header.Get(name))
		}
	}
	if string(hitBody) != string(firstBody) {
		t.Errorf("hit body %s\nfresh body %s", hitBody, firstBody)
	}
	if e := lastEntry(t, g); e["escalation"] != "auto" || e["cache"] != "hit" {
		t.Errorf("hit: escalation %v cache %v", e["escalation"], e["cache"])
	}
}

// The second call's tokens are the org's: its budget is charged both
// calls, and the log entry reports both.
func TestEscalationIsChargedToTheOrg(t *testing.T) {
	// 1000 yuan per million tokens: 0.1 yuan for the first call's 100,
	// 0.04 for the second's 40.
	_, url, g := escalatingGateway(t, "\t\tlimits {\n\t\t\tbudget 1 per day\n\t\t\tprice 1000\n\t\t}\n")
	postEscalated(t, url)
	if e := lastEntry(t, g); e["tokens_input"] != 140.0 || e["cost_yuan"] != 0.14 {
		t.Errorf("log: tokens_input %v cost_yuan %v, want both calls' 140 and 0.14", e["tokens_input"], e["cost_yuan"])
	}
	// The next, not escalated, request sees both calls spent.
	resp, raw := post(t, url, "k", escalateBody("sure"))
	if resp.StatusCode != 200 || resp.Header.Get("X-Route-Escalated") != "" {
		t.Fatalf("%d escalated %q: %s", resp.StatusCode, resp.Header.Get("X-Route-Escalated"), raw)
	}
	if got := resp.Header.Get("X-Budget-Remaining"); got != "0.76" {
		t.Errorf("X-Budget-Remaining %q, want 0.76 (1 less 0.14 and this request's 0.1)", got)
	}
}
