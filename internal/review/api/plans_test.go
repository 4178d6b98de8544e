package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/review/record"
	"github.com/systemone/systemone-gateway/internal/testclock"
)

// PUT /plans stores a group's one look with the handler's own time,
// once, and only while the group's model and type has no label; GET
// /plans lists them; a bad body is the 422 list.
func TestPlans(t *testing.T) {
	s, client := testStore(t)
	clock := testclock.New(time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))
	h := &Handler{store: s, logger: zap.NewNop(), now: clock.Now}
	h.labels = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"model", "type", "agree"})
	serve := serveWith(t, h)
	list := func() []record.Plan {
		t.Helper()
		w := serve(http.MethodGet, "/plans", "")
		var doc record.Plans
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &doc) != nil || doc.Plans == nil {
			t.Fatalf("GET /plans: %d %s", w.Code, w.Body)
		}
		return doc.Plans
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("no plans yet: %+v", got)
	}
	w := serve(http.MethodPut, "/plans", `{"model":"m","type":"noul","entries":300}`)
	var stored record.Plan
	if w.Code != 201 || json.Unmarshal(w.Body.Bytes(), &stored) != nil || stored.Created != "2026-11-26T09:00:00Z" || stored.Entries != 300 {
		t.Fatalf("PUT /plans: %d %s", w.Code, w.Body)
	}
	clock.Advance(time.Minute)
	if w := serve(http.MethodPut, "/plans", `{"model":"m","type":"noul","entries":50}`); w.Code != 409 || !json.Valid(w.Body.Bytes()) || w.Body.String() != "{\"detail\":\"plan_exists\"}\n" {
		t.Fatalf("a second plan of the group: %d %s", w.Code, w.Body)
	}
	if w := serve(http.MethodPut, "/plans", `{"model":"m","type":"noul","question":"late","entries":50}`); w.Code != 201 {
		t.Fatalf("a question group's plan: %d %s", w.Code, w.Body)
	}
	if got := list(); len(got) != 2 || got[0] != stored || got[1].Question != "late" {
		t.Fatalf("GET /plans: %+v", got)
	}

	// Once an audited label of (m, choice) is stored, no plan of it.
	id, err := client.XAdd(context.Background(), &redis.XAddArgs{Stream: s.stream, Values: []string{"request_id", "r1", "model", "m", "audit", "1",
		"questions", `[{"id":"c","type":"choice","route":"auto","confidence":0.9,"answer":"yes"}]`}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if w := serve(http.MethodPut, "/items/"+id+"/labels", `{"labels":{"c":"yes"}}`); w.Code != 204 {
		t.Fatalf("label: %d %s", w.Code, w.Body)
	}
	if w := serve(http.MethodPut, "/plans", `{"model":"m","type":"choice","org":"acme","entries":50}`); w.Code != 409 || w.Body.String() != "{\"detail\":\"labelling_began\"}\n" {
		t.Fatalf("a plan after the first label: %d %s", w.Code, w.Body)
	}

	for body, want := range map[string]string{
		`{"type":"noul","entries":3}`:               "missing",
		`{"model":"","type":"noul","entries":3}`:    "string_too_short",
		`{"model":"m","type":"bogus","entries":3}`:  "literal_error",
		`{"model":"m","type":"noul","entries":0}`:   "greater_than_equal",
		`{"model":"m","type":"noul","entries":1.5}`: "int_type",
		`{"model":"m","type":"noul","entries":"9"}`: "int_type",
		`{"model":"m","type":"noul"}`:               "missing",
		`[1]`:                                       "model_attributes_type",
		`{"model":`:                                 "model_attributes_type",
	} {
		w := serve(http.MethodPut, "/plans", body)
		var doc struct {
			Detail []struct{ Type string } `json:"detail"`
		}
		if w.Code != 422 || json.Unmarshal(w.Body.Bytes(), &doc) != nil || len(doc.Detail) != 1 || doc.Detail[0].Type != want {
			t.Errorf("PUT /plans %s: %d %s, want 422 %s", body, w.Code, w.Body, want)
		}
	}
	if w := serve(http.MethodPost, "/plans", `{}`); w.Code != 405 || w.Header().Get("Allow") != "GET, HEAD, PUT" {
		t.Errorf("POST /plans: %d %v", w.Code, w.Header())
	}
	if got := list(); len(got) != 2 {
		t.Errorf("refused plans were stored: %+v", got)
	}
}
