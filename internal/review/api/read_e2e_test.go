package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

// addEntry writes a review entry straight to the stream, as the gateway's
// queue writes one.
func (s *stack) addEntry(t *testing.T, audit bool, values ...string) string {
	t.Helper()
	a := "0"
	if audit {
		a = "1"
	}
	values = append([]string{"request_id", "r", "org", "o", "model", "service-1.0.0", "route", "human", "reason", "low_confidence", "audit", a,
		"questions", `[{"id":"q","type":"noul","route":"human","confidence":0.4,"answer":0.3}]`, "ts", "2026-01-01T00:00:00Z"}, values...)
	id, err := s.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: values}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// audit=1 keeps the entries drawn by the audit, alone or with unlabeled=1,
// after and limit; a limit beyond any integer reads as the maximum.
func TestReviewAuditFilter(t *testing.T) {
	s := newStack(t, stackOptions{})
	var audited, other []string
	for i := range 6 {
		id := s.addEntry(t, i%2 == 1)
		if i%2 == 1 {
			audited = append(audited, id)
		} else {
			other = append(other, id)
		}
	}
	var p page
	s.get(t, "/review/items?audit=1", &p)
	if !slices.Equal(ids(p), audited) || p.Next != "" {
		t.Fatalf("audit=1: %v next %q, want %v", ids(p), p.Next, audited)
	}
	for _, it := range p.Items {
		if !it.Audit {
			t.Errorf("item %s in audit=1 without audit", it.ID)
		}
	}
	s.get(t, "/review/items?audit=1&limit=1", &p)
	if !slices.Equal(ids(p), audited[:1]) || p.Next != audited[0] {
		t.Errorf("audit=1&limit=1: %v next %q", ids(p), p.Next)
	}
	s.get(t, "/review/items?audit=1&limit=1&after="+p.Next, &p)
	if !slices.Equal(ids(p), audited[1:2]) || p.Next != audited[1] {
		t.Errorf("audit=1 second page: %v next %q", ids(p), p.Next)
	}
	if resp, body := s.call(t, http.MethodPut, "/review/items/"+audited[0]+"/labels", `{"labels":{"q":true},"reviewer":"ann"}`); resp.StatusCode != 204 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("PUT: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	s.get(t, "/review/items?audit=1&unlabeled=1", &p)
	if !slices.Equal(ids(p), audited[1:]) {
		t.Errorf("audit=1&unlabeled=1: %v, want %v", ids(p), audited[1:])
	}
	s.get(t, "/review/items?unlabeled=1&audit=0", &p)
	if want := append(slices.Clone(other), audited[1:]...); len(p.Items) != 5 || !slices.Contains(ids(p), other[0]) || slices.Contains(ids(p), audited[0]) {
		t.Errorf("unlabeled=1&audit=0: %v, want %v", ids(p), slices.Sorted(slices.Values(want)))
	}
	s.get(t, "/review/items?limit=99999999999999999999", &p)
	if len(p.Items) != 6 {
		t.Errorf("a limit beyond any integer: %d items", len(p.Items))
	}
	for query, want := range map[string]string{"audit=2": "bool_parsing", "limit=-99999999999999999999": "greater_than_equal", "limit=1e3": "int_parsing"} {
		resp, body := s.call(t, http.MethodGet, "/review/items?"+query, "")
		if types, locs := detailTypes(t, resp, body); len(types) != 1 || types[0] != want || locs[0][0] != "query" {
			t.Errorf("%s: %v %v, want %s", query, types, locs, want)
		}
	}
}

// With include_content the bodies live in the content stream: the review
// entry holds none, the listing and /items/<id> still show them, and an
// older entry with its bodies inline reads as before. A body beyond
// max_content is not stored, and the item says so.
func TestReviewContentApart(t *testing.T) {
	s := newStack(t, stackOptions{includeContent: true, maxContent: "2KiB"})
	ctx := context.Background()
	id, _ := s.evaluate(t, "small state")
	raw, err := s.rdb.XRange(ctx, stream, id, id).Result()
	if err != nil || len(raw) != 1 {
		t.Fatal(raw, err)
	}
	if _, inline := raw[0].Values["request"]; inline || raw[0].Values["content"] == nil {
		t.Fatalf("entry fields %v: the bodies must be apart", raw[0].Values)
	}
	content, _ := s.rdb.XRange(ctx, record.ContentStream(stream), "-", "+").Result()
	if len(content) != 1 || content[0].ID != raw[0].Values["content"] {
		t.Fatalf("content stream %v", content)
	}
	var one item
	s.get(t, "/review/items/"+id, &one)
	var req map[string]any
	if json.Unmarshal(one.Request, &req) != nil || req["state"] != "small state" || one.Response == nil {
		t.Errorf("item content: %s / %s", one.Request, one.Response)
	}
	var p page
	s.get(t, "/review/items?unlabeled=1&limit=1", &p)
	if len(p.Items) != 1 || p.Items[0].Request == nil || p.Items[0].Response == nil {
		t.Errorf("listed item without its content: %+v", p.Items)
	}
	// The stored request bounds the labels.
	resp, body := s.call(t, http.MethodPut, "/review/items/"+id+"/labels", `{"labels":{"c":"nope"}}`)
	if types, _ := detailTypes(t, resp, body); !slices.Equal(types, []string{"literal_error"}) {
		t.Errorf("choice label checked against the stored options: %v", types)
	}

	big, _ := s.evaluate(t, strings.Repeat("padding ", 400))
	var large struct {
		item
		TooLarge []string `json:"content_too_large"`
	}
	s.get(t, "/review/items/"+big, &large)
	if large.Request != nil || large.Response == nil || !slices.Equal(large.TooLarge, []string{"request"}) {
		t.Errorf("a request over max_content: request %s, content_too_large %v", large.Request, large.TooLarge)
	}
}
