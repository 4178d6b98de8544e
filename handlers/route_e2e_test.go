package handlers_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/record"
	"github.com/systemone/systemone-gateway/internal/wait"
)

const pinnedRoutes = `		route {
			pin service-1.0.0 {
				noul 0.8
				choice 0.6
				score 0.5
				question strict 0.95
			}
		}
`

// questionsBody asks the given questions (id -> type) about one state.
func questionsBody(model string, questions ...string) string {
	qs := map[string]any{}
	for i := 0; i+1 < len(questions); i += 2 {
		q := map[string]any{"type": questions[i+1], "instructions": "judge it"}
		switch questions[i+1] {
		case "choice":
			q["criteria"] = map[string]any{"yes": nil, "no": nil, "maybe": "unsure"}
		case "score":
			q["criteria"] = []string{"bad", "ok", "good", "great"}
		}
		qs[questions[i]] = q
	}
	body := map[string]any{"state": "The parcel arrived two days late.", "questions": qs}
	if model != "" {
		body["model"] = model
	}
	b, _ := json.Marshal(body)
	return string(b)
}

func TestRouteDecisions(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), pinnedRoutes)
	g := gatewaytest.Load(t, sites)

	for _, tc := range []struct {
		name        string
		body        string
		confidences string // X-Simulator-Confidence
		version     string // X-Simulator-Version
		route       string
		reason      string
		confidence  string
		questions   string
	}{
		{"confident noul near 1", questionsBody("", "a", "noul"), `{"a":0.98}`, "", "auto", "confident", "0.96", "a=auto"},
		{"confident noul near 0", questionsBody("", "a", "noul"), `{"a":0.02}`, "", "auto", "confident", "0.96", "a=auto"},
		{"noul at 0.5 is unsure", questionsBody("", "a", "noul"), `{"a":0.5}`, "", "human", "low_confidence", "0.00", "a=human"},
		{"noul exactly at the threshold", questionsBody("", "a", "noul"), `{"a":0.9}`, "", "auto", "confident", "0.80", "a=auto"},
		{"score exactly at the threshold", questionsBody("", "s", "score"), `{"s":0.5}`, "", "auto", "confident", "0.50", "s=auto"},
		{"choice just under", questionsBody("", "c", "choice"), `{"c":0.55}`, "", "human", "low_confidence", "0.55", "c=human"},
		{"mixed types", questionsBody("", "a", "noul", "c", "choice", "s", "score"), `{"a":0.95,"c":0.9,"s":0.4}`, "", "human", "low_confidence", "0.40", "a=auto, c=auto, s=human"},
		{"per-question override", questionsBody("", "strict", "noul", "a", "noul"), `{"strict":0.95,"a":0.95}`, "", "human", "low_confidence", "0.90", "strict=human, a=auto"},
		{"pinned version named directly", questionsBody("service-1.0.0", "a", "noul"), `{"a":1}`, "", "auto", "confident", "1.00", "a=auto"},
		{"alias moved to an unpinned version", questionsBody("service-latest", "a", "noul"), `{"a":1}`, "service-2.0.0", "human", "unpinned_version", "1.00", "a=human"},
		{"odd ids are percent-encoded", questionsBody("", "a,b", "noul", "x=y", "noul", "has space", "noul", "中文", "noul", "~ok-._", "noul"),
			`{"a,b":1,"x=y":1,"has space":1,"中文":1,"~ok-._":1}`, "", "auto", "confident", "1.00",
			"a%2Cb=auto, x%3Dy=auto, has%20space=auto, %E4%B8%AD%E6%96%87=auto, ~ok-._=auto"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := []string{"X-Simulator-Confidence", tc.confidences}
			if tc.version != "" {
				headers = append(headers, "X-Simulator-Version", tc.version)
			}
			resp, body := post(t, url, "k", tc.body, headers...)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			got := []string{resp.Header.Get("X-Route"), resp.Header.Get("X-Route-Reason"), resp.Header.Get("X-Route-Confidence")}
			if got[0] != tc.route || got[1] != tc.reason || got[2] != tc.confidence {
				t.Errorf("route %v, want [%s %s %s]: %s", got, tc.route, tc.reason, tc.confidence, body)
			}
			if q := resp.Header.Get("X-Route-Questions"); !sameSet(q, tc.questions) {
				t.Errorf("questions %q, want %q", q, tc.questions)
			}
			wantModel := "service-1.0.0"
			if tc.version != "" {
				wantModel = tc.version
			}
			if m := resp.Header.Get("X-Route-Model"); m != wantModel {
				t.Errorf("model %q, want %q", m, wantModel)
			}
		})
	}
	var logged bool
	for _, e := range g.Entries() {
		if e["route"] == "human" && e["route_reason"] == "unpinned_version" && e["model"] == "service-2.0.0" && e["min_confidence"] == float64(1) {
			logged = true
		}
	}
	if !logged {
		t.Error("route fields missing from the log")
	}
}

// sameSet compares X-Route-Questions lists. The request's question order is
// the JSON object's order, and questionsBody builds it from a Go map, which
// encoding/json writes sorted: compare as sets, and the order separately.
func sameSet(got, want string) bool {
	g, w := strings.Split(got, ", "), strings.Split(want, ", ")
	if len(g) != len(w) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range g {
		seen[x] = true
	}
	for _, x := range w {
		if !seen[x] {
			return false
		}
	}
	return true
}

func TestRouteQuestionOrder(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), pinnedRoutes)
	gatewaytest.Load(t, sites)
	body := `{"state":"s","questions":{"z":{"type":"noul","instructions":"x"},"a":{"type":"noul","instructions":"x"},"m":{"type":"noul","instructions":"x"}}}`
	resp, _ := post(t, url, "k", body, "X-Simulator-Confidence", `{"z":1,"a":0.5,"m":1}`)
	if q := resp.Header.Get("X-Route-Questions"); q != "z=auto, a=human, m=auto" {
		t.Errorf("questions %q, want the request's order", q)
	}
}

// A pin with no threshold for a type routes that type's questions to a
// human; an unreadable answer passes through untouched, routed to a human;
// non-200 answers carry no route headers.
func TestRouteFallbacks(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), "\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\tnoul 0.5\n\t\t\t}\n\t\t}\n")
	gatewaytest.Load(t, sites)
	resp, _ := post(t, url, "k", questionsBody("", "a", "noul", "s", "score"), "X-Simulator-Confidence", `{"a":1,"s":1}`)
	if resp.Header.Get("X-Route") != "human" || resp.Header.Get("X-Route-Reason") != "no_threshold" || !sameSet(resp.Header.Get("X-Route-Questions"), "a=auto, s=human") {
		t.Errorf("no threshold: %v", resp.Header)
	}
	for _, tc := range []struct{ name, body string }{
		{"model not found", questionsBody("nope", "a", "noul")},
		{"invalid", `{"state":"s"}`},
	} {
		resp, _ := post(t, url, "k", tc.body)
		if resp.StatusCode == 200 || resp.Header.Get("X-Route") != "" || resp.Header.Get("X-Route-Reason") != "" {
			t.Errorf("%s: %d with route headers %v", tc.name, resp.StatusCode, resp.Header)
		}
	}

	for name, answer := range map[string]string{
		"not json":          "<html>oops</html>",
		"answer missing":    `{"model":"service-1.0.0","answers":{},"usage":{"input_tokens":3}}`,
		"out of range":      `{"model":"service-1.0.0","answers":{"a":{"type":"noul","noul":1.5}},"usage":{"input_tokens":3}}`,
		"type mismatch":     `{"model":"service-1.0.0","answers":{"a":{"type":"choice","confidence":0.9}},"usage":{"input_tokens":3}}`,
		"forged route head": `{"model":"service-1.0.0","answers":{"a":{"type":"noul","noul":0.5}},"usage":{"input_tokens":3}}`,
	} {
		up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Route", "auto")
			w.Header().Set("X-Route-Reason", "confident")
			_, _ = w.Write([]byte(answer))
		}))
		sites, url := site(t, up.Addr(), "\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\tnoul 0.5\n\t\t\t}\n\t\t}\n")
		gatewaytest.Load(t, sites)
		resp, body := post(t, url, "k", questionsBody("", "a", "noul"))
		if string(body) != answer {
			t.Errorf("%s: body changed: %s", name, body)
		}
		wantReason := "unreadable_response"
		if name == "forged route head" {
			wantReason = "low_confidence"
		}
		if resp.Header.Get("X-Route") != "human" || resp.Header.Get("X-Route-Reason") != wantReason || len(resp.Header.Values("X-Route")) != 1 {
			t.Errorf("%s: %v, want human %s", name, resp.Header, wantReason)
		}
	}
}

// A gzip answer is routed from its decoded text and reaches the client
// byte for byte.
func TestRouteGzip(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), pinnedRoutes)
	gatewaytest.Load(t, sites)
	many := []string{}
	for _, id := range strings.Split("a b c d e f g h i j k l", " ") {
		many = append(many, id, "choice")
	}
	body := questionsBody("", many...)
	direct, directBody := post(t, sim.URL, "k", body, "Accept-Encoding", "gzip")
	resp, gwBody := post(t, url, "k", body, "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" || direct.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("not gzip: %q", resp.Header.Get("Content-Encoding"))
	}
	if !bytes.Equal(gwBody, directBody) {
		t.Error("the gzip body changed on its way through the gateway")
	}
	zr, err := gzip.NewReader(bytes.NewReader(gwBody))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(zr); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Route-Reason") == "unreadable_response" || resp.Header.Get("X-Route-Confidence") == "" {
		t.Errorf("a gzip answer was not read: %v", resp.Header)
	}
}

// Human-routed answers are appended to a Redis stream without content.
func TestRouteQueue(t *testing.T) {
	sim := unlimitedSimulator(t)
	rs := redistest.Start(t)
	block := "\t\tredis " + rs.URL() + "\n\t\tlimits {\n\t\t\tstore_timeout 2s\n\t\t}\n" +
		"\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\tnoul 0.8\n\t\t\t}\n\t\t\tqueue review:human maxlen 1000\n\t\t}\n"
	sites, url := site(t, sim.Addr(), block)
	gatewaytest.Load(t, sites)

	resp, _ := post(t, url, "k", stateBody("secret customer text"), "X-Simulator-Confidence", `{"q":0.5}`)
	if resp.Header.Get("X-Route") != "human" {
		t.Fatalf("route %q", resp.Header.Get("X-Route"))
	}
	post(t, url, "k", stateBody("confident"), "X-Simulator-Confidence", `{"q":1}`)

	client := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer client.Close()
	// The enqueue is asynchronous: poll until the entry lands.
	var entries []redis.XMessage
	wait.Until(t, "the stream entry", func() bool {
		entries, _ = client.XRange(context.Background(), "review:human", "-", "+").Result()
		return len(entries) > 0
	})
	if len(entries) != 1 {
		t.Fatalf("%d stream entries, want the one human-routed answer", len(entries))
	}
	v := entries[0].Values
	if v["request_id"] != resp.Header.Get("X-Request-Id") || v["model"] != "service-1.0.0" || v["reason"] != "low_confidence" ||
		!strings.HasPrefix(v["org"].(string), "key-") || !strings.Contains(v["questions"].(string), `"id":"q"`) {
		t.Errorf("entry %v", v)
	}
	for k, val := range v {
		if strings.Contains(val.(string), "secret customer") {
			t.Errorf("field %s holds request content", k)
		}
	}
}

// With include_content, a queue entry names its content entry, which
// carries both bodies (route.ContentStream).
func TestRouteQueueIncludeContent(t *testing.T) {
	sim := unlimitedSimulator(t)
	rs := redistest.Start(t)
	block := "\t\tredis " + rs.URL() + "\n\t\tlimits {\n\t\t\tstore_timeout 2s\n\t\t}\n" +
		"\t\troute {\n\t\t\tqueue review:human\n\t\t\tinclude_content\n\t\t}\n"
	sites, url := site(t, sim.Addr(), block)
	gatewaytest.Load(t, sites)
	body := stateBody("customer text for review")
	_, answer := post(t, url, "k", body)

	client := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer client.Close()
	var entries []redis.XMessage
	wait.Until(t, "the stream entry", func() bool {
		entries, _ = client.XRange(context.Background(), "review:human", "-", "+").Result()
		return len(entries) > 0
	})
	if len(entries) != 1 || entries[0].Values["content"] == nil || entries[0].Values["reason"] != "unpinned_version" {
		t.Fatalf("entries %v", entries)
	}
	id := entries[0].Values["content"].(string)
	content, err := client.XRange(context.Background(), record.ContentStream("review:human"), id, id).Result()
	if err != nil || len(content) != 1 || content[0].Values["request"] != body || content[0].Values["response"] != string(answer) {
		t.Errorf("content %v %v", content, err)
	}
}
