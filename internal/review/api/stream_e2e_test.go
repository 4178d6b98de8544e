package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Labels outlive the stream's trimming: the trimmed entry answers 404,
// its labels still export.
func TestReviewTrimming(t *testing.T) {
	// One entry per stream node makes the gateway's MAXLEN ~ trim exactly.
	s := newStack(t, stackOptions{maxLen: 2, redisArgs: []string{"--stream-node-max-entries", "1"}})
	first, _ := s.evaluate(t, "first")
	if resp, body := s.call(t, http.MethodPut, "/review/items/"+first+"/labels", `{"labels":{"n":true,"s":0},"reviewer":"ann"}`); resp.StatusCode != 204 {
		t.Fatalf("PUT: %d %s", resp.StatusCode, body)
	}
	var rest []string
	for i := range 3 {
		id, _ := s.evaluate(t, fmt.Sprintf("later %d", i))
		rest = append(rest, id)
	}
	if n, _ := s.rdb.XLen(context.Background(), stream).Result(); n != 2 {
		t.Fatalf("stream length %d, want 2 after trimming", n)
	}
	resp, body := s.call(t, http.MethodGet, "/review/items/"+first, "")
	wantDetail(t, resp, body, 404, "not_found")
	resp, body = s.call(t, http.MethodPut, "/review/items/"+first+"/labels", `{"labels":{"n":false}}`)
	wantDetail(t, resp, body, 404, "not_found")
	var p page
	s.get(t, "/review/items", &p)
	if !slices.Equal(ids(p), rest[1:]) {
		t.Errorf("items %v, want %v", ids(p), rest[1:])
	}
	lines := s.labelLines(t)
	if len(lines) != 2 || lineOf(lines, first, "n")["label"] != true || lineOf(lines, first, "s")["label"] != float64(0) {
		t.Errorf("labels of the trimmed entry: %v", lines)
	}
}

// With include_content, items carry the bodies as JSON values, and the
// stored request's options and tiers bound the labels.
func TestReviewContent(t *testing.T) {
	s := newStack(t, stackOptions{includeContent: true})
	id, answer := s.evaluate(t, "<b>bold</b> & late")
	var it item
	s.get(t, "/review/items/"+id, &it)
	var req map[string]any
	if err := json.Unmarshal(it.Request, &req); err != nil || req["state"] != "<b>bold</b> & late" {
		t.Errorf("request %s: %v", it.Request, err)
	}
	var stored, direct any
	if json.Unmarshal(it.Response, &stored) != nil || json.Unmarshal(answer, &direct) != nil || fmt.Sprint(stored) != fmt.Sprint(direct) {
		t.Errorf("response %s, want %s", it.Response, answer)
	}
	path := "/review/items/" + id + "/labels"
	resp, body := s.call(t, http.MethodPut, path, `{"labels":{"c":"nope","s":4}}`)
	if types, _ := detailTypes(t, resp, body); !slices.Equal(types, []string{"literal_error", "less_than_equal"}) {
		t.Errorf("types %v", types)
	}
	if !strings.Contains(string(body), `"Input should be 'yes', 'no' or 'maybe'"`) || !strings.Contains(string(body), `"le":3`) {
		t.Errorf("422 body %s", body)
	}
	if resp, body := s.call(t, http.MethodPut, path, `{"labels":{"c":"no","s":3},"reviewer":null}`); resp.StatusCode != 204 {
		t.Errorf("valid labels: %d %s", resp.StatusCode, body)
	}
	if c := lineOf(s.labelLines(t), id, "c"); c["label"] != "no" || c["reviewer"] != "" {
		t.Errorf("line %v", c)
	}
}

// Audited entries (written here as the gateway writes them with `audit`)
// show audit true, and so do their label lines; an entry of an older
// gateway, without audit or answers, still reads.
func TestReviewAuditAndOldEntries(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	add := func(values ...string) string {
		id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	audited := add("request_id", "r1", "org", "o", "model", "service-1.0.0", "route", "auto", "reason", "confident", "audit", "1",
		"questions", `[{"id":"q","type":"score","route":"auto","confidence":0.9,"answer":2.4}]`, "ts", "2026-01-01T00:00:00Z")
	old := add("request_id", "r2", "org", "o", "model", "service-0.9.0", "route", "human", "reason", "low_confidence",
		"questions", `[{"id":"q","type":"noul","route":"human","confidence":0.1}]`, "ts", "2026-01-01T00:00:01Z")
	var p page
	s.get(t, "/review/items", &p)
	if len(p.Items) != 2 || !p.Items[0].Audit || p.Items[1].Audit || p.Items[1].Questions[0]["answer"] != nil {
		t.Fatalf("items %+v", p.Items)
	}
	if _, ok := p.Items[1].Questions[0]["answer"]; !ok {
		t.Error("an old entry's question lacks answer: null")
	}
	for _, put := range []struct{ id, body string }{{audited, `{"labels":{"q":2}}`}, {old, `{"labels":{"q":true}}`}} {
		if resp, body := s.call(t, http.MethodPut, "/review/items/"+put.id+"/labels", put.body); resp.StatusCode != 204 {
			t.Fatalf("PUT %s: %d %s", put.id, resp.StatusCode, body)
		}
	}
	lines := s.labelLines(t)
	if a := lineOf(lines, audited, "q"); a["audit"] != true || a["agree"] != true || a["route"] != "auto" || a["confidence"] != 0.9 {
		t.Errorf("audited line %v", a)
	}
	// No answer: the label cannot agree with it.
	if o := lineOf(lines, old, "q"); o["audit"] != false || o["answer"] != nil || o["agree"] != false {
		t.Errorf("old entry's line %v", o)
	}
}

// Without Redis the API answers 503 store_unavailable, and recovers.
func TestReviewRedisDown(t *testing.T) {
	s := newStack(t, stackOptions{})
	id, _ := s.evaluate(t, "x")
	s.redis.Stop()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/review/items", ""},
		{http.MethodGet, "/review/items/" + id, ""},
		{http.MethodPut, "/review/items/" + id + "/labels", `{"labels":{"n":true}}`},
		{http.MethodGet, "/review/labels", ""},
	} {
		resp, body := s.call(t, c.method, c.path, c.body)
		wantDetail(t, resp, body, 503, "store_unavailable")
		if resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s %s: no retry-after", c.method, c.path)
		}
	}
	s.redis.Restart()
	var p page
	s.get(t, "/review/items", &p) // the stream is gone with the restart (no persistence): empty
	if len(p.Items) != 0 || p.Next != "" {
		t.Errorf("after restart: %+v", p)
	}
}

// The page is served at the mount's root, with its assets and a strict
// content security policy; a mount reached without its slash redirects.
func TestReviewPageServed(t *testing.T) {
	s := newStack(t, stackOptions{})
	resp, body := s.call(t, http.MethodGet, "/review/", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") || !bytes.Contains(body, []byte(`src="review.js"`)) {
		t.Errorf("page: %d %v", resp.StatusCode, resp.Header)
	}
	for asset, typ := range map[string]string{"/review/review.js": "text/javascript", "/review/guarantee.js": "text/javascript", "/review/review.css": "text/css"} {
		resp, body := s.call(t, http.MethodGet, asset, "")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), typ) || len(body) == 0 {
			t.Errorf("%s: %d %s", asset, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	resp, _ = s.call(t, http.MethodGet, "/mounted", "")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/mounted/" {
		t.Errorf("/mounted: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = s.call(t, http.MethodGet, "/mounted/", "")
	if resp.StatusCode != 200 {
		t.Errorf("/mounted/: %d", resp.StatusCode)
	}
}
