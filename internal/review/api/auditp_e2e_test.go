package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/simulator"
)

// The probability an entry was drawn with reaches every /labels line of
// it as audit_p (with the active audit, audit_floor and audit_from too),
// and its Item in GET /items and GET /items/<id>, through the real
// gateway, the review API and Redis.
func TestLabelsCarryAuditProbability(t *testing.T) {
	rs := redistest.Start(t)
	zero := int64(0)
	h, err := simulator.New(simulator.Handler{RequestsPerMinute: &zero, TokensPerSecond: &zero})
	if err != nil {
		t.Fatal(err)
	}
	sim := gatewaytest.NewUpstream(t, h)
	port := gatewaytest.FreePort(t)
	gatewaytest.Load(t, fmt.Sprintf(`:%[1]d {
	handle_path /review/* {
		systemone_review {
			redis %[2]s
			stream %[3]s
		}
	}
	handle {
		systemone {
			redis %[2]s
			route {
				pin service-1.0.0 {
					noul 0.8
				}
				queue %[3]s
				audit active 1 floor 0.25 from 0.5
			}
		}
		reverse_proxy %[4]s
	}
}`, port, rs.URL(), stream, sim.Addr()))
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	s := &stack{url: fmt.Sprintf("http://127.0.0.1:%d", port), redis: rs, rdb: rdb}

	// Every confidence below from 0.5: drawn, or not, with the floor.
	active, _ := s.evaluate(t, "late delivery")
	add := func(values ...string) string {
		id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	entry := func(extra ...string) string {
		return add(append([]string{"request_id", "r", "org", "o", "model", "service-1.0.0", "route", "human", "reason", "low_confidence", "audit", "1",
			"questions", `[{"id":"q","type":"noul","route":"human","confidence":0.1,"answer":0.4}]`, "ts", "2026-01-01T00:00:00Z"}, extra...)...)
	}
	uniform := entry("audit_p", "0.05")
	old := entry()
	garbled := entry("audit_p", "often", "audit_floor", "2")
	for _, id := range []string{active, uniform, old, garbled} {
		q, body := "q", `{"labels":{"q":false}}`
		if id == active {
			q, body = "n", `{"labels":{"n":false}}`
		}
		if resp, b := s.call(t, http.MethodPut, "/review/items/"+id+"/labels", body); resp.StatusCode != 204 {
			t.Fatalf("PUT %s %s: %d %s", id, q, resp.StatusCode, b)
		}
	}
	lines := s.labelLines(t)
	for _, tc := range []struct {
		id, question string
		want         map[string]any // nil: the field is absent
	}{
		{active, "n", map[string]any{"audit_p": 0.25, "audit_floor": 0.25, "audit_from": 0.5}},
		{uniform, "q", map[string]any{"audit_p": 0.05, "audit_floor": nil, "audit_from": nil}},
		{old, "q", map[string]any{"audit_p": nil, "audit_floor": nil, "audit_from": nil}},
		{garbled, "q", map[string]any{"audit_p": nil, "audit_floor": nil}},
	} {
		l := lineOf(lines, tc.id, tc.question)
		if l == nil {
			t.Fatalf("no line for %s %s in %v", tc.id, tc.question, lines)
		}
		checkDraw(t, "/labels line of "+tc.id, l, tc.want)
		var item map[string]any
		s.get(t, "/review/items/"+tc.id, &item)
		checkDraw(t, "GET /items/"+tc.id, item, tc.want)
		var page struct{ Items []map[string]any }
		s.get(t, "/review/items?limit=500", &page)
		found := false
		for _, it := range page.Items {
			if it["id"] == tc.id {
				found = true
				checkDraw(t, "GET /items: "+tc.id, it, tc.want)
			}
		}
		if !found {
			t.Errorf("GET /items leaves out %s", tc.id)
		}
	}
}

// checkDraw compares the audit fields of a /labels line or an Item with
// want (nil: the field is absent).
func checkDraw(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; v == nil && ok || v != nil && g != v {
			t.Errorf("%s: %s = %v (present %v), want %v", what, k, g, ok, v)
		}
	}
}
