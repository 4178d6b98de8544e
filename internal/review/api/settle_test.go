package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/testclock"
)

// The handler's monitor with settle 10m on a clock the test moves: an
// entry is observed only once settled, with its corrected labels; an
// older entry labelled later within settle is still taken first; an
// entry that repeats another's request id adds nothing.
func TestSettleCorrectionsOrderDuplicates(t *testing.T) {
	s, client := testStore(t)
	ctx := context.Background()
	clock := testclock.New(time.Unix(1700000000, 0))
	settle := durationOf(10 * time.Minute)
	h := monitorHandler(&Handler{store: s, logger: zap.NewNop(), Monitor: &Monitor{Target: 0.9, Settle: settle}, CorrectWithin: durationOf(0)}, clock.Now)
	add := func(requestID string) string {
		id, err := client.XAdd(ctx, &redis.XAddArgs{Stream: s.stream, Values: []string{"request_id", requestID, "model", "m", "audit", "1",
			"questions", `[{"id":"a","type":"noul","route":"auto","confidence":0.9,"answer":0.9},{"id":"b","type":"noul","route":"auto","confidence":0.9,"answer":0.9}]`}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	put := func(id, body string) {
		t.Helper()
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, httptest.NewRequest(http.MethodPut, "/items/"+id+"/labels", strings.NewReader(body)), nil); err != nil || w.Code != 204 {
			t.Fatalf("PUT %s: %d %v %s", id, w.Code, err, w.Body)
		}
	}
	state := func() monitor.State {
		t.Helper()
		states, err := s.monitor.Groups(ctx, h.monitor.params)
		if err != nil {
			t.Fatal(err)
		}
		return states[monitor.Group{Model: "m", Type: "noul"}]
	}
	older, newer, copyOfNewer := add("r1"), add("r2"), add("r2")
	// The newer entry first, both questions disagreeing at first, one
	// corrected 5 minutes later.
	put(newer, `{"labels":{"a":false,"b":false}}`)
	clock.Advance(5 * time.Minute)
	put(newer, `{"labels":{"a":true}}`)
	// The older entry labelled 9 minutes after the newer one: agreeing.
	clock.Advance(4 * time.Minute)
	put(older, `{"labels":{"a":true,"b":true}}`)
	h.takeSettled(ctx)
	if st := state(); st.Entries != 0 {
		t.Fatalf("observed before settling: %+v", st)
	}
	// 10 minutes after the newer entry's first label it is due, but the
	// older one is still settling: nothing yet.
	clock.Advance(time.Minute)
	h.takeSettled(ctx)
	if st := state(); st.Entries != 0 {
		t.Fatalf("the newer entry was taken before the older one: %+v", st)
	}
	// Both settled: the older first (agree 2/2), then the newer with its
	// correction (1/2).
	clock.Advance(9 * time.Minute)
	h.takeSettled(ctx)
	want := monitor.Fresh(0.9)
	want, _ = monitor.Update(h.monitor.params, want, 2, 2)
	want, _ = monitor.Update(h.monitor.params, want, 1, 2)
	if st := state(); st != want {
		t.Fatalf("after both settled: %+v, want %+v", st, want)
	}
	// A label after the observation changes nothing; a copy of an
	// answer already counted adds nothing.
	put(newer, `{"labels":{"b":true}}`)
	put(copyOfNewer, `{"labels":{"a":false,"b":false}}`)
	clock.Advance(time.Hour)
	h.takeSettled(ctx)
	if st := state(); st != want {
		t.Fatalf("a late label or a duplicate changed the group: %+v, want %+v", st, want)
	}
}

// With `by org`, each org's entries feed its own group, GET /guarantee
// lists them with their org, and DELETE ?org= resets one org's group.
func TestMonitorByOrg(t *testing.T) {
	s, client := testStore(t)
	ctx := context.Background()
	h := monitorHandler(&Handler{store: s, logger: zap.NewNop(), Monitor: &Monitor{Target: 0.9, ByOrg: true, Settle: durationOf(0)}, CorrectWithin: durationOf(0)}, time.Now)
	serve := serveWith(t, h)
	for i, org := range []string{"acme", "acme", "tiny:co"} {
		id, err := client.XAdd(ctx, &redis.XAddArgs{Stream: s.stream, Values: []string{"request_id", "r" + string(rune('0'+i)), "model", "m", "org", org, "audit", "1",
			"questions", `[{"id":"a","type":"noul","route":"auto","confidence":0.9,"answer":0.9}]`}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if w := serve(http.MethodPut, "/items/"+id+"/labels", `{"labels":{"a":false}}`); w.Code != 204 {
			t.Fatalf("PUT: %d %s", w.Code, w.Body)
		}
	}
	body := serve(http.MethodGet, "/guarantee", "").Body.String()
	if !strings.Contains(body, `"org":"acme","alpha":0.025,"entries":2`) || !strings.Contains(body, `"org":"tiny:co","alpha":0.025,"entries":1`) {
		t.Fatalf("GET /guarantee: %s", body)
	}
	if w := serve(http.MethodDelete, "/guarantee/m/noul?org=tiny%3Aco", ""); w.Code != 204 {
		t.Fatalf("DELETE ?org=: %d %s", w.Code, w.Body)
	}
	if w := serve(http.MethodDelete, "/guarantee/m/noul?org=nobody", ""); w.Code != 404 {
		t.Fatalf("DELETE of an org never seen: %d", w.Code)
	}
	body = serve(http.MethodGet, "/guarantee", "").Body.String()
	if !strings.Contains(body, `"org":"acme","alpha":0.025,"entries":2`) || !strings.Contains(body, `"org":"tiny:co","alpha":0.0125,"entries":0`) {
		t.Fatalf("after the org's reset: %s", body)
	}
	members, _ := client.HKeys(ctx, monitor.StateKey("systemone:", "review:human")).Result()
	if len(members) != 2 {
		t.Errorf("state members %q", members)
	}
}

// monitorHandler gives h, a handler of a test store, its labels counter
// and a running monitor of its Monitor's settings (not started: the test
// takes), on the clock now, with a collector of its own (the process's
// gauges would carry an org label on every series once any group is by
// org).
func monitorHandler(h *Handler, now func() time.Time) *Handler {
	h.labels = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"model", "type", "agree"})
	params := h.Monitor.params()
	params.MaxQuestions = h.maxQuestions()
	h.monitor = &guaranteeMonitor{params: params, byOrg: h.Monitor.ByOrg, settle: h.Monitor.settle(), now: now, metrics: newGuaranteeMetrics()}
	return h
}

// serveWith serves one request with h and returns its answer.
func serveWith(t *testing.T, h *Handler) func(method, path, body string) *httptest.ResponseRecorder {
	return func(method, path, body string) *httptest.ResponseRecorder {
		t.Helper()
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)), nil); err != nil {
			t.Fatal(err)
		}
		return w
	}
}
