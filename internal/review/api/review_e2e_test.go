package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/simulator"
)

const stream = "review:human"

// stack is a gateway (systemone with a review queue, in front of the
// simulator) and the review handler under /review/, on one Redis.
type stack struct {
	url     string // the site: /v1/systemone and /review/
	metrics string // Caddy's metrics endpoint
	redis   *redistest.Server
	rdb     *redis.Client
}

type stackOptions struct {
	maxLen         int
	includeContent bool
	// maxContent is the route's max_content, empty for the default.
	maxContent string
	// basicAuth, when set, protects /review/* with Caddy's basic_auth:
	// a user and its bcrypt hash.
	basicAuth [2]string
	redisArgs []string
	// monitor, when set, is the review handler's monitor line's arguments.
	monitor string
	// review is more lines of the review handler (correct_within,
	// max_questions).
	review string
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	rs := redistest.Start(t, o.redisArgs...)
	zero := int64(0)
	h, err := simulator.New(simulator.Handler{RequestsPerMinute: &zero, TokensPerSecond: &zero})
	if err != nil {
		t.Fatal(err)
	}
	sim := gatewaytest.NewUpstream(t, h)
	if o.maxLen == 0 {
		o.maxLen = 1000
	}
	queue := fmt.Sprintf("queue %s maxlen %d", stream, o.maxLen)
	if o.includeContent {
		queue += "\n\t\t\t\tinclude_content"
	}
	if o.maxContent != "" {
		queue += "\n\t\t\t\tmax_content " + o.maxContent
	}
	auth := ""
	if o.basicAuth[0] != "" {
		auth = fmt.Sprintf("basic_auth {\n\t\t\t%s %s\n\t\t}", o.basicAuth[0], o.basicAuth[1])
	}
	monitor := ""
	if o.monitor != "" {
		monitor = "monitor " + o.monitor
	}
	port, metricsPort := gatewaytest.FreePort(t), gatewaytest.FreePort(t)
	sites := fmt.Sprintf(`:%[1]d {
	handle_path /review/* {
		%[7]s
		systemone_review {
			redis %[2]s
			stream %[3]s
			%[8]s
			%[9]s
		}
	}
	handle_path /mounted* {
		systemone_review {
			redis %[2]s
			stream %[3]s
		}
	}
	handle {
		systemone {
			redis %[2]s
			limits {
				store_timeout 2s
			}
			route {
				pin service-1.0.0 {
					noul 0.8
					choice 0.6
					score 0.5
				}
				%[4]s
			}
		}
		reverse_proxy %[5]s
	}
}
:%[6]d {
	metrics
}
`, port, rs.URL(), stream, queue, sim.Addr(), metricsPort, auth, monitor, o.review)
	gatewaytest.Load(t, sites)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return &stack{
		url:     fmt.Sprintf("http://127.0.0.1:%d", port),
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		redis:   rs, rdb: rdb,
	}
}

// evalBody asks a noul question n, a choice question c (yes, no, maybe)
// and a score question s (4 tiers) about state.
func evalBody(state string) string {
	return `{"state":` + strconv.Quote(state) + `,"questions":{` +
		`"n":{"type":"noul","instructions":"Was it late?"},` +
		`"c":{"type":"choice","instructions":"Who is at fault?","criteria":{"yes":null,"no":null,"maybe":"unsure"}},` +
		`"s":{"type":"score","instructions":"How bad?","criteria":["fine","meh","bad","awful"]}}}`
}

// evaluate sends an evaluation through the gateway, routed human (every
// confidence low), waits until its entry is in the stream, and returns
// the entry id and the answer body.
func (s *stack) evaluate(t *testing.T, state string) (string, []byte) {
	t.Helper()
	requestID, body := s.post(t, state)
	// The queue writes in the background: poll until the entry lands.
	return lastEntry(t, s.rdb, requestID), body
}

// lastEntry waits for the last entry of the stream to be that of the
// request, and returns its id.
func lastEntry(t *testing.T, rdb *redis.Client, requestID string) string {
	t.Helper()
	var id string
	wait.Within(t, wait.Bound, "the stream entry of "+requestID, func() error {
		msgs, err := rdb.XRevRangeN(context.Background(), stream, "+", "-", 1).Result()
		if err != nil || len(msgs) != 1 || msgs[0].Values["request_id"] != requestID {
			return fmt.Errorf("last entry %v %v", msgs, err)
		}
		id = msgs[0].ID
		return nil
	})
	return id
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func (s *stack) call(t *testing.T, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

// get decodes a 200 JSON answer into v.
func (s *stack) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, body := s.call(t, http.MethodGet, path, "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s: %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

type item struct {
	ID        string           `json:"id"`
	RequestID string           `json:"request_id"`
	Org       string           `json:"org"`
	Model     string           `json:"model"`
	Route     string           `json:"route"`
	Reason    string           `json:"reason"`
	Audit     bool             `json:"audit"`
	TS        string           `json:"ts"`
	Questions []map[string]any `json:"questions"`
	Request   json.RawMessage  `json:"request"`
	Response  json.RawMessage  `json:"response"`
	Labels    map[string]any   `json:"labels"`
}

type page struct {
	Items []item `json:"items"`
	Next  string `json:"next"`
}

func ids(p page) []string {
	out := make([]string, len(p.Items))
	for i, it := range p.Items {
		out[i] = it.ID
	}
	return out
}

// labelLines returns GET /review/labels, one decoded object per line.
func (s *stack) labelLines(t *testing.T) []map[string]any {
	t.Helper()
	resp, body := s.call(t, http.MethodGet, "/review/labels", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("labels: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("label line %q: %v", sc.Bytes(), err)
		}
		out = append(out, m)
	}
	return out
}

// lineOf returns the label line of entry and question.
func lineOf(lines []map[string]any, entry, question string) map[string]any {
	for _, l := range lines {
		if l["entry"] == entry && l["question"] == question {
			return l
		}
	}
	return nil
}

// labelsMetric sums systemone_review_labels_total over the series whose
// labels include match.
func (s *stack) labelsMetric(t *testing.T, match string) float64 {
	t.Helper()
	return s.metricSum(t, "systemone_review_labels_total", match)
}

// metricSum adds the values of the series of metric name whose labels hold
// match, as the gateway's metrics endpoint serves them now; 0 when none.
func (s *stack) metricSum(t *testing.T, name, match string) float64 {
	t.Helper()
	resp, err := http.Get(s.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q", line)
		}
		sum += v
	}
	return sum
}

// detailTypes returns the types of a 422 list and its locations.
func detailTypes(t *testing.T, resp *http.Response, body []byte) ([]string, [][]any) {
	t.Helper()
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422: %s", resp.StatusCode, body)
	}
	var d struct {
		Detail []struct {
			Type  string          `json:"type"`
			Loc   []any           `json:"loc"`
			Msg   string          `json:"msg"`
			Input json.RawMessage `json:"input"`
		} `json:"detail"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("422 body %s: %v", body, err)
	}
	var types []string
	var locs [][]any
	for _, e := range d.Detail {
		if e.Msg == "" || e.Input == nil {
			t.Errorf("error without msg or input: %s", body)
		}
		types = append(types, e.Type)
		locs = append(locs, e.Loc)
	}
	return types, locs
}

func wantDetail(t *testing.T, resp *http.Response, body []byte, status int, detail string) {
	t.Helper()
	if resp.StatusCode != status || string(body) != `{"detail":"`+detail+`"}`+"\n" {
		t.Errorf("%d %s, want %d %s", resp.StatusCode, body, status, detail)
	}
}

func TestReviewAPI(t *testing.T) {
	s := newStack(t, stackOptions{})
	var entries []string
	var answers []map[string]map[string]any
	for i := range 3 {
		id, body := s.evaluate(t, fmt.Sprintf("secret state %d", i))
		entries = append(entries, id)
		var a struct {
			Answers map[string]map[string]any `json:"answers"`
		}
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, a.Answers)
	}

	// The listing: oldest first, every field, answers as the model gave them.
	var all page
	s.get(t, "/review/items", &all)
	if !slices.Equal(ids(all), entries) || all.Next != "" {
		t.Fatalf("items %v next %q, want %v and no next", ids(all), all.Next, entries)
	}
	first := all.Items[0]
	if first.Model != "service-1.0.0" || first.Route != "human" || first.Reason != "low_confidence" || first.Audit ||
		!strings.HasPrefix(first.Org, "key-") || first.RequestID == "" || first.TS == "" || first.Labels != nil ||
		first.Request != nil || first.Response != nil || len(first.Questions) != 3 {
		t.Errorf("item %+v", first)
	}
	for _, q := range first.Questions {
		id := q["id"].(string)
		want := answers[0][id][map[string]string{"n": "noul", "c": "choice", "s": "score"}[id]]
		if q["answer"] != want || q["confidence"] == nil || q["route"] != "human" {
			t.Errorf("question %v: answer %v, want %v", q, q["answer"], want)
		}
	}

	// Paging.
	var p page
	s.get(t, "/review/items?limit=2", &p)
	if !slices.Equal(ids(p), entries[:2]) || p.Next != entries[1] {
		t.Errorf("limit 2: %v next %q", ids(p), p.Next)
	}
	s.get(t, "/review/items?limit=2&after="+p.Next, &p)
	if !slices.Equal(ids(p), entries[2:]) || p.Next != "" {
		t.Errorf("second page: %v next %q", ids(p), p.Next)
	}
	s.get(t, "/review/items?limit=3", &p)
	if len(p.Items) != 3 || p.Next != "" {
		t.Errorf("a page that ends at the end: %v next %q", ids(p), p.Next)
	}
	s.get(t, "/review/items?limit=100000", &p)
	if len(p.Items) != 3 {
		t.Errorf("a limit over the maximum: %v", ids(p))
	}
	for query, want := range map[string]string{"limit=0": "greater_than_equal", "limit=x": "int_parsing", "after=x": "value_error", "unlabeled=maybe": "bool_parsing"} {
		resp, body := s.call(t, http.MethodGet, "/review/items?"+query, "")
		if types, locs := detailTypes(t, resp, body); len(types) != 1 || types[0] != want || locs[0][0] != "query" {
			t.Errorf("%s: %v %v, want %s", query, types, locs, want)
		}
	}

	// One item.
	var one item
	s.get(t, "/review/items/"+entries[1], &one)
	if one.ID != entries[1] || one.RequestID != all.Items[1].RequestID || len(one.Questions) != 3 {
		t.Errorf("item %+v", one)
	}
	for _, path := range []string{"/review/items/1-1", "/review/items/nope", "/review/items/" + entries[0] + "/x", "/review/items/", "/review/nope"} {
		resp, body := s.call(t, http.MethodGet, path, "")
		wantDetail(t, resp, body, 404, "not_found")
	}

	// Labels: 204, then shown on the item, and the item is no longer unlabelled.
	before := s.labelsMetric(t, `model="service-1.0.0"`)
	labelsPath := "/review/items/" + entries[0] + "/labels"
	resp, body := s.call(t, http.MethodPut, labelsPath, `{"labels":{"n":true,"c":"maybe","s":2},"reviewer":"ann"}`)
	if resp.StatusCode != 204 || len(body) != 0 {
		t.Fatalf("PUT labels: %d %s", resp.StatusCode, body)
	}
	s.get(t, "/review/items/"+entries[0], &one)
	if fmt.Sprint(one.Labels) != "map[c:maybe n:true s:2]" {
		t.Errorf("labels on the item: %v", one.Labels)
	}
	s.get(t, "/review/items?unlabeled=1", &p)
	if !slices.Equal(ids(p), entries[1:]) || p.Next != "" {
		t.Errorf("unlabeled: %v next %q", ids(p), p.Next)
	}
	s.get(t, "/review/items?unlabeled=1&limit=1", &p)
	if !slices.Equal(ids(p), entries[1:2]) || p.Next != entries[1] {
		t.Errorf("unlabeled, limit 1: %v next %q", ids(p), p.Next)
	}
	s.get(t, "/review/items?unlabeled=1&limit=1&after="+p.Next, &p)
	if !slices.Equal(ids(p), entries[2:]) || p.Next != "" {
		t.Errorf("unlabeled, second page: %v next %q", ids(p), p.Next)
	}

	// The export: a line per labelled question, exactly the contract's fields.
	lines := s.labelLines(t)
	if len(lines) != 3 {
		t.Fatalf("%d label lines, want 3: %v", len(lines), lines)
	}
	fields := []string{"entry", "request_id", "org", "model", "type", "question", "confidence", "answer", "label", "agree", "audit", "route", "reviewer", "ts", "stage"}
	for _, l := range lines {
		var keys []string
		for k := range l {
			keys = append(keys, k)
		}
		if slices.Sort(keys); !slices.Equal(keys, slices.Sorted(slices.Values(fields))) {
			t.Errorf("line fields %v, want %v", keys, fields)
		}
		if l["entry"] != entries[0] || l["request_id"] != first.RequestID || l["org"] != first.Org || l["model"] != "service-1.0.0" ||
			l["audit"] != false || l["route"] != "human" || l["reviewer"] != "ann" || l["stage"] != float64(1) {
			t.Errorf("line %v", l)
		}
		if ts, err := time.Parse(time.RFC3339, l["ts"].(string)); err != nil || time.Since(ts) > time.Minute || !strings.HasSuffix(l["ts"].(string), "Z") {
			t.Errorf("ts %v: %v", l["ts"], err)
		}
	}
	n, c, sc := lineOf(lines, entries[0], "n"), lineOf(lines, entries[0], "c"), lineOf(lines, entries[0], "s")
	if n == nil || c == nil || sc == nil {
		t.Fatalf("lines %v", lines)
	}
	if n["type"] != "noul" || n["label"] != true || n["agree"] != (n["answer"].(float64) >= 0.5) || n["answer"] != answers[0]["n"]["noul"] {
		t.Errorf("noul line %v", n)
	}
	if c["type"] != "choice" || c["label"] != "maybe" || c["agree"] != (c["answer"] == "maybe") {
		t.Errorf("choice line %v", c)
	}
	if diff := sc["answer"].(float64) - 2; sc["type"] != "score" || sc["label"] != float64(2) || sc["agree"] != (diff <= 0.5 && diff >= -0.5) {
		t.Errorf("score line %v", sc)
	}

	// A later PUT replaces the questions it names, and only those.
	if resp, body := s.call(t, http.MethodPut, labelsPath, `{"labels":{"n":false},"reviewer":"bob"}`); resp.StatusCode != 204 {
		t.Fatalf("replace: %d %s", resp.StatusCode, body)
	}
	lines = s.labelLines(t)
	if n := lineOf(lines, entries[0], "n"); len(lines) != 3 || n["label"] != false || n["reviewer"] != "bob" || n["agree"] != (n["answer"].(float64) < 0.5) {
		t.Errorf("after replace: %v", lines)
	}
	if c := lineOf(lines, entries[0], "c"); c["label"] != "maybe" || c["reviewer"] != "ann" {
		t.Errorf("a question the PUT did not name changed: %v", c)
	}
	// Each label stored counts, a replaced one again.
	if after := s.labelsMetric(t, `model="service-1.0.0"`); after-before != 4 {
		t.Errorf("systemone_review_labels_total grew by %v, want 4", after-before)
	}
	if s.labelsMetric(t, `agree=`) == 0 || s.labelsMetric(t, `type="score"`) == 0 {
		t.Error("metric series lack the agree or type label")
	}

	// 422s: every bad label is listed, and nothing of the PUT is stored.
	for _, tc := range []struct {
		body  string
		types []string
		locs  string
	}{
		{`{"labels":{"zzz":true}}`, []string{"extra_forbidden"}, `[[body labels zzz]]`},
		{`{"labels":{"n":"yes","c":1,"s":1.5}}`, []string{"bool_type", "string_type", "int_from_float"}, `[[body labels n] [body labels c] [body labels s]]`},
		{`{"labels":{"s":-1,"n":true}}`, []string{"greater_than_equal"}, `[[body labels s]]`},
		{`{"labels":{"n":true,"x":1}}`, []string{"extra_forbidden"}, `[[body labels x]]`},
		{`not json`, []string{"json_invalid"}, `[[body 2]]`},
		{``, []string{"json_invalid"}, `[[body 0]]`},
		{`{}`, []string{"missing"}, `[[body labels]]`},
		{`[]`, []string{"model_attributes_type"}, `[[body]]`},
		{`{"labels":[]}`, []string{"dict_type"}, `[[body labels]]`},
		{`{"labels":{},"reviewer":7}`, []string{"string_type"}, `[[body reviewer]]`},
	} {
		resp, body := s.call(t, http.MethodPut, labelsPath, tc.body)
		types, locs := detailTypes(t, resp, body)
		if !slices.Equal(types, tc.types) || fmt.Sprint(locs) != tc.locs {
			t.Errorf("%s: %v %v, want %v %s", tc.body, types, locs, tc.types, tc.locs)
		}
	}
	if n := lineOf(s.labelLines(t), entries[0], "n"); n["label"] != false {
		t.Errorf("a rejected PUT stored a label: %v", n)
	}
	if after := s.labelsMetric(t, `model="service-1.0.0"`); after-before != 4 {
		t.Errorf("rejected PUTs counted: metric grew by %v", after-before)
	}

	// 404 for an entry not in the stream (a valid body: the entry decides).
	resp, body = s.call(t, http.MethodPut, "/review/items/1-1/labels", `{"labels":{"n":true}}`)
	wantDetail(t, resp, body, 404, "not_found")
	resp, body = s.call(t, http.MethodPut, "/review/items/nope/labels", `{"labels":{}}`)
	wantDetail(t, resp, body, 404, "not_found")
	// 413 for a body over 1 MiB.
	resp, body = s.call(t, http.MethodPut, labelsPath, `{"labels":{},"reviewer":"`+strings.Repeat("x", 2<<20)+`"}`)
	wantDetail(t, resp, body, 413, "request_too_large")

	// Wrong methods.
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodPost, "/review/items", "GET, HEAD"},
		{http.MethodGet, labelsPath, "PUT"},
		{http.MethodDelete, "/review/items/" + entries[0], "GET, HEAD"},
		{http.MethodPut, "/review/labels", "GET, HEAD"},
		{http.MethodPost, "/review/", "GET, HEAD"},
	} {
		resp, body := s.call(t, tc.method, tc.path, "")
		wantDetail(t, resp, body, 405, "method_not_allowed")
		if resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, resp.Header.Get("Allow"), tc.allow)
		}
	}
}
