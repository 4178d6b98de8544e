package route

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/record"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// queueRouter returns a Router with a queue on a fresh redis-server, its
// client, and its observed logs.
func queueRouter(t *testing.T, q Queue, opts ...any) (*Router, *redistest.Server, redis.UniversalClient, *observer.ObservedLogs) {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	r, logs := routerOn(t, client, q, opts...)
	return r, srv, client, logs
}

// routerOn returns a Router with a queue on client, and its observed logs.
// Each of opts is a change to the config (a func(*Config), such as
// withContent) or an Option of New.
func routerOn(t *testing.T, client redis.UniversalClient, q Queue, opts ...any) (*Router, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := testConfig()
	cfg.Queue = &q
	var options []Option
	for _, o := range opts {
		switch o := o.(type) {
		case func(*Config):
			o(&cfg)
		case Option:
			options = append(options, o)
		default:
			t.Fatalf("routerOn: option %T", o)
		}
	}
	r, err := New(cfg, client, "systemone:", zap.New(core), options...)
	if err != nil {
		t.Fatal(err)
	}
	r.queue.now = func() time.Time { return time.Date(2025, 3, 1, 12, 0, 0, 5e6, time.FixedZone("CST", 8*3600)) }
	t.Cleanup(r.Close)
	return r, logs
}

// withContent turns include_content on.
func withContent(c *Config) { c.IncludeContent = true }

var (
	secretRequest  = []byte(`{"state":"SECRET-STATE","questions":{"a,b":{"type":"choice","instructions":"SECRET-INSTRUCTIONS","criteria":{"good":null,"bad":null}}}}`)
	queueQuestions = []evaluation.Question{q("a,b", "choice"), q("中文", "noul")}
)

func humanDecision(r *Router) (Decision, []byte) {
	resp := body("service-1.0.0", choice("a,b", "0.3"), noul("中文", "0.9"))
	return decideBody(r, queueQuestions, resp, Signal{}), resp
}

func readStream(t *testing.T, client redis.UniversalClient, stream string) []redis.XMessage {
	t.Helper()
	msgs, err := client.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestEnqueue(t *testing.T) {
	r, _, client, logs := queueRouter(t, Queue{Stream: "review"})
	d, resp := humanDecision(r)
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-1", Org: "acme", Request: secretRequest, Response: resp})

	// An auto decision is not queued.
	auto := decideBody(r, queueQuestions, body("service-1.0.0", choice("a,b", "0.9"), noul("中文", "0.9")), Signal{})
	if auto.Route != RouteAuto {
		t.Fatalf("setup: %s/%s", auto.Route, auto.Reason)
	}
	r.Enqueue(context.Background(), auto, Meta{RequestID: "req-2", Org: "acme"})

	// The request's context ending does not cancel the write.
	ctx, cancel := context.WithCancel(context.Background())
	unread := r.Decide(queueQuestions, nil, Signal{})
	r.Enqueue(ctx, unread, Meta{RequestID: "req-3", Org: "beta"})
	cancel()
	r.Close()

	msgs := readStream(t, client, "review")
	if len(msgs) != 2 {
		t.Fatalf("%d entries, want 2: %v", len(msgs), msgs)
	}
	// Writes run concurrently: entries may land in any order.
	slices.SortFunc(msgs, func(a, b redis.XMessage) int {
		return strings.Compare(a.Values["request_id"].(string), b.Values["request_id"].(string))
	})
	want := []map[string]any{
		{
			"request_id": "req-1", "org": "acme", "model": "service-1.0.0", "route": "human", "reason": "low_confidence", "audit": "0",
			"questions": `[{"id":"a,b","type":"choice","route":"human","confidence":0.3,"answer":"good","reason":"low_confidence"},{"id":"中文","type":"noul","route":"auto","confidence":0.8,"answer":0.9,"reason":"confident"}]`,
			"ts":        "2025-03-01T04:00:00.005Z",
		},
		{
			"request_id": "req-3", "org": "beta", "model": "", "route": "human", "reason": "unreadable_response", "audit": "0",
			"questions": `[{"id":"a,b","type":"choice","route":"human","confidence":null,"answer":null,"reason":"unreadable_response"},{"id":"中文","type":"noul","route":"human","confidence":null,"answer":null,"reason":"unreadable_response"}]`,
			"ts":        "2025-03-01T04:00:00.005Z",
		},
	}
	for i, m := range msgs {
		if len(m.Values) != len(want[i]) {
			t.Errorf("entry %d: fields %v, want %v", i, m.Values, want[i])
		}
		for k, v := range want[i] {
			if m.Values[k] != v {
				t.Errorf("entry %d: %s = %q, want %q", i, k, m.Values[k], v)
			}
		}
		var qs []map[string]any
		if err := json.Unmarshal([]byte(m.Values["questions"].(string)), &qs); err != nil || len(qs) != 2 {
			t.Errorf("entry %d: questions not a JSON array of 2: %v", i, err)
		}
	}
	if s := r.QueueStats(); s != (QueueStats{Enqueued: 2}) {
		t.Errorf("stats %+v, want 2 enqueued", s)
	}
	if n := logs.Len(); n != 0 {
		t.Errorf("%d log entries for successful writes: %v", n, logs.All())
	}
}

func TestEnqueueIncludeContent(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	cfg := testConfig()
	cfg.Queue = &Queue{Stream: "review"}
	cfg.IncludeContent = true
	r, err := New(cfg, client, "systemone:", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, resp := humanDecision(r)
	req := append([]byte(nil), secretRequest...)
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-1", Org: "acme", Request: req, Response: resp})
	// The caller may reuse its buffers as soon as Enqueue returns.
	clear(req)
	clear(resp)
	r.Close()

	msgs := readStream(t, client, "review")
	if len(msgs) != 1 {
		t.Fatalf("%d entries, want 1", len(msgs))
	}
	// The entry holds no body: it names its content entry.
	v := msgs[0].Values
	if _, inline := v["request"]; inline || v["content"] == nil || v["content_too_large"] != nil {
		t.Fatalf("entry %v: want the bodies apart, named by content", v)
	}
	content := readStream(t, client, record.ContentStream("review"))
	if len(content) != 1 || content[0].ID != v["content"] {
		t.Fatalf("content stream %v, want one entry %v", content, v["content"])
	}
	c := content[0].Values
	if c["request"] != string(secretRequest) {
		t.Errorf("request %q, want the request body", c["request"])
	}
	if wantResp := string(body("service-1.0.0", choice("a,b", "0.3"), noul("中文", "0.9"))); c["response"] != wantResp {
		t.Errorf("response %q, want %q", c["response"], wantResp)
	}
}

// max_content bounds an entry's content, request and response together:
// the request when it fits, then the response when it fits in the rest; a
// body that does not fit is left out and named in content_too_large.
func TestEnqueueMaxContent(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	cfg := testConfig()
	cfg.Queue = &Queue{Stream: "review"}
	cfg.IncludeContent = true
	cfg.MaxContent = 2048
	r, err := New(cfg, client, "systemone:", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, resp := humanDecision(r)
	big := []byte(`{"state":"` + strings.Repeat(" ", 3000) + `"}`)
	fits := []byte(strings.Repeat("x", 2048-len(resp)))
	for i, request := range [][]byte{secretRequest, big, fits, append(fits, 'x')} {
		r.Enqueue(context.Background(), d, Meta{RequestID: strconv.Itoa(i), Request: request, Response: resp})
	}
	r.Close()
	entries := readStream(t, client, "review")
	content := map[string]map[string]any{}
	for _, m := range readStream(t, client, record.ContentStream("review")) {
		content[m.ID] = m.Values
	}
	if len(entries) != 4 {
		t.Fatalf("%d entries", len(entries))
	}
	// Written in the background, in any order: found by request id.
	byID := map[any]map[string]any{}
	for _, e := range entries {
		byID[e.Values["request_id"]] = e.Values
	}
	for i, want := range []struct {
		tooLarge any
		stored   []string
	}{{nil, []string{"request", "response"}}, {"request", []string{"response"}}, {nil, []string{"request", "response"}}, {"response", []string{"request"}}} {
		v := byID[strconv.Itoa(i)]
		if v["content_too_large"] != want.tooLarge {
			t.Errorf("entry %v: content_too_large %v, want %v", v["request_id"], v["content_too_large"], want.tooLarge)
		}
		c := content[v["content"].(string)]
		var got []string
		for k := range c {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, want.stored) {
			t.Errorf("entry %v: stored %v, want %v", v["request_id"], got, want.stored)
		}
	}
	// Nothing fits: no content entry at all.
	r2, _ := routerOn(t, client, Queue{Stream: "alone"}, withContent)
	r2.queue.maxContent = minMaxContent
	huge := []byte(strings.Repeat("y", 2*minMaxContent))
	r2.Enqueue(context.Background(), d, Meta{RequestID: "huge", Request: huge, Response: huge})
	r2.Close()
	if e := readStream(t, client, "alone"); len(e) != 1 || e[0].Values["content"] != nil || e[0].Values["content_too_large"] != "request,response" {
		t.Errorf("entry with nothing stored: %v", e)
	}
	if n, _ := client.XLen(context.Background(), record.ContentStream("alone")).Result(); n != 0 {
		t.Errorf("%d content entries for an entry that stores none", n)
	}
}

func TestEnqueueTrimsApproximately(t *testing.T) {
	const n = 1000
	// Room for all: this test is about trimming.
	r, _, client, _ := queueRouter(t, Queue{Stream: "review", MaxLen: 10}, WithQueueCapacity(n))
	d, _ := humanDecision(r)
	for i := range n {
		r.Enqueue(context.Background(), d, Meta{RequestID: strconv.Itoa(i)})
	}
	r.Close()
	if s := r.QueueStats(); s != (QueueStats{Enqueued: n}) {
		t.Fatalf("stats %+v, want %d enqueued", s, n)
	}
	length, err := client.XLen(context.Background(), "review").Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole macro nodes (100 entries by default): the stream
	// stays near maxlen, far below what was written.
	if length < 10 || length > 200 {
		t.Errorf("stream length %d after %d writes with maxlen ~10", length, n)
	}
}

func TestEnqueueRedisDown(t *testing.T) {
	r, srv, client, logs := queueRouter(t, Queue{Stream: "review"})
	d, resp := humanDecision(r)
	srv.Stop()
	start := time.Now()
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-lost", Org: "acme", Request: secretRequest, Response: resp})
	if elapsed := time.Since(start); elapsed > 100*time.Millisecond {
		t.Errorf("Enqueue took %v with Redis down: it must not wait for the write", elapsed)
	}
	r.Close()

	if s := r.QueueStats(); s != (QueueStats{Failed: 1}) {
		t.Errorf("stats %+v, want 1 failed", s)
	}
	entries := logs.FilterMessage("review queue write failed, entry lost").AllUntimed()
	if len(entries) != 1 || entries[0].Level != zapcore.WarnLevel {
		t.Fatalf("logs %v, want one warning", logs.AllUntimed())
	}
	f := entries[0].ContextMap()
	if f["request_id"] != "req-lost" || f["org"] != "acme" || f["stream"] != "review" || f["error"] == nil {
		t.Errorf("warning fields %v", f)
	}
	assertNoContent(t, logs)

	// Back up: the same client writes again.
	srv.Restart()
	r, _ = routerOn(t, client, Queue{Stream: "review"})
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-2"})
	r.Close()
	if msgs := readStream(t, client, "review"); len(msgs) != 1 || msgs[0].Values["request_id"] != "req-2" {
		t.Errorf("after restart: %v", msgs)
	}
}

func TestEnqueueSaturatedDropsWithoutBlocking(t *testing.T) {
	// Room for one entry waiting while the writer holds another.
	r, srv, client, logs := queueRouter(t, Queue{Stream: "review"}, withContent, WithQueueCapacity(1))
	r.queue.timeout = 5 * time.Second // the paused write must outlast the test's steps
	d, resp := humanDecision(r)

	// Writes block while clients are paused: the writer holds req-1,
	// req-2 waits, req-3 finds no room.
	if reply, err := srv.Do("CLIENT", "PAUSE", "10000", "WRITE"); err != nil || reply != "+OK" {
		t.Fatalf("CLIENT PAUSE: %q %v", reply, err)
	}
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-1", Org: "acme", Request: secretRequest, Response: resp})
	for len(r.queue.waiting) != 0 { // the writer took req-1 and is blocked writing it
		runtime.Gosched()
	}
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-2", Org: "acme", Request: secretRequest, Response: resp})
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-3", Org: "acme", Request: secretRequest, Response: resp})
	if s := r.QueueStats(); s.Dropped != 1 {
		t.Fatalf("stats %+v, want the third entry dropped at once", s)
	}
	if reply, err := srv.Do("CLIENT", "UNPAUSE"); err != nil || reply != "+OK" {
		t.Fatalf("CLIENT UNPAUSE: %q %v", reply, err)
	}
	r.Close()

	if s := r.QueueStats(); s != (QueueStats{Enqueued: 2, Dropped: 1}) {
		t.Errorf("stats %+v, want 2 enqueued, 1 dropped", s)
	}
	if msgs := readStream(t, client, "review"); len(msgs) != 2 || msgs[0].Values["request_id"] != "req-1" || msgs[1].Values["request_id"] != "req-2" {
		t.Errorf("stream %v, want req-1 then req-2", msgs)
	}
	entries := logs.FilterMessage("review queue saturated, entry dropped").AllUntimed()
	if len(entries) != 1 || entries[0].ContextMap()["request_id"] != "req-3" {
		t.Errorf("logs %v, want one warning naming req-3", logs.AllUntimed())
	}
	assertNoContent(t, logs)

	// Closed: a later entry (a request that reached the config after its
	// release) is still written.
	r.Enqueue(context.Background(), d, Meta{RequestID: "req-4"})
	wait.Until(t, "the third entry enqueued", func() bool { return r.QueueStats().Enqueued == 3 })
	if msgs := readStream(t, client, "review"); len(msgs) != 3 || msgs[2].Values["request_id"] != "req-4" {
		t.Errorf("after Close: stream %v, stats %+v, want req-4 written", msgs, r.QueueStats())
	}
}

// TestEnqueueInRoutedOrder: entries, with their content, reach the stream
// in the order Enqueue was called, however the writer batches them.
func TestEnqueueInRoutedOrder(t *testing.T) {
	r, _, client, _ := queueRouter(t, Queue{Stream: "review"}, withContent, WithQueueCapacity(500))
	d, resp := humanDecision(r)
	const n = 500
	for i := range n {
		r.Enqueue(context.Background(), d, Meta{RequestID: strconv.Itoa(i), Request: []byte(`{"n":` + strconv.Itoa(i) + `}`), Response: resp})
	}
	r.Close()
	msgs := readStream(t, client, "review")
	content := readStream(t, client, record.ContentStream("review"))
	if len(msgs) != n || len(content) != n {
		t.Fatalf("%d entries, %d content entries, want %d", len(msgs), len(content), n)
	}
	for i, m := range msgs {
		e := record.ParseEntry(m.ID, m.Values)
		if e.RequestID != strconv.Itoa(i) || e.Content != content[i].ID || content[i].Values["request"] != `{"n":`+strconv.Itoa(i)+`}` {
			t.Fatalf("entry %d: %+v with content %v", i, e, content[i])
		}
	}
}

func TestEnqueueWithoutQueue(t *testing.T) {
	r := newRouter(t, testConfig())
	d, _ := humanDecision(r)
	r.Enqueue(context.Background(), d, Meta{RequestID: "x"}) // must not panic
	r.Close()
	if s := r.QueueStats(); s != (QueueStats{}) {
		t.Errorf("stats %+v without a queue", s)
	}
}

func TestQueueDefaults(t *testing.T) {
	r, _, _, _ := queueRouter(t, Queue{Stream: "review"})
	if r.queue.maxLen != DefaultMaxLen || r.queue.includeContent || r.audit != 0 {
		t.Errorf("maxlen %d, include_content %v, audit %v; want %d, false, 0", r.queue.maxLen, r.queue.includeContent, r.audit, DefaultMaxLen)
	}
}

// answerDecision routes one question of each type, every one confident
// enough for auto.
func answerDecision(r *Router) Decision {
	return decideBody(r, mixed, body("service-1.0.0", noul("yes", "0.95"), choice("pick", "0.8"), score("rate", "0.61")), Signal{})
}

func TestEnqueueAnswers(t *testing.T) {
	r, _, client, _ := queueRouter(t, Queue{Stream: "review"})
	r.audit = 1
	r.Enqueue(context.Background(), answerDecision(r), Meta{RequestID: "req-1"})
	// An answer of the right type without its answer field: confidence
	// read, answer null.
	partial := decideBody(r, mixed, []byte(`{"model":"service-1.0.0","answers":{`+
		`"yes":{"type":"noul","noul":0.5},"pick":{"type":"choice","confidence":0.9},"rate":{"type":"score","confidence":0.9}}}`), Signal{})
	r.Enqueue(context.Background(), partial, Meta{RequestID: "req-2"})
	r.Close()
	msgs := readStream(t, client, "review")
	slices.SortFunc(msgs, func(a, b redis.XMessage) int {
		return strings.Compare(a.Values["request_id"].(string), b.Values["request_id"].(string))
	})
	want := []string{
		`[{"id":"yes","type":"noul","route":"auto","confidence":0.9,"answer":0.95,"reason":"confident"},` +
			`{"id":"pick","type":"choice","route":"auto","confidence":0.8,"answer":"good","reason":"confident"},` +
			`{"id":"rate","type":"score","route":"auto","confidence":0.61,"answer":1.81,"reason":"confident"}]`,
		`[{"id":"yes","type":"noul","route":"human","confidence":0,"answer":0.5,"reason":"low_confidence"},` +
			`{"id":"pick","type":"choice","route":"auto","confidence":0.9,"answer":null,"reason":"confident"},` +
			`{"id":"rate","type":"score","route":"auto","confidence":0.9,"answer":null,"reason":"confident"}]`,
	}
	if len(msgs) != 2 {
		t.Fatalf("%d entries, want 2", len(msgs))
	}
	for i, m := range msgs {
		if m.Values["questions"] != want[i] || m.Values["audit"] != "1" {
			t.Errorf("entry %d: audit %v questions\n%s\nwant\n%s", i, m.Values["audit"], m.Values["questions"], want[i])
		}
	}
}

// With audit, every routed 200 may be drawn: a drawn human entry is
// written once, with audit 1; an undrawn auto one not at all.
func TestEnqueueAudit(t *testing.T) {
	r, _, client, _ := queueRouter(t, Queue{Stream: "review"})
	r.audit = 1
	human, _ := humanDecision(r)
	auto := answerDecision(r)
	r.Enqueue(context.Background(), human, Meta{RequestID: "human-audited"})
	r.Enqueue(context.Background(), auto, Meta{RequestID: "auto-audited"})
	r.audit = 0
	r.Enqueue(context.Background(), human, Meta{RequestID: "human"})
	r.Enqueue(context.Background(), auto, Meta{RequestID: "auto"})
	r.Close()

	got := map[string]string{}
	for _, m := range readStream(t, client, "review") {
		id := m.Values["request_id"].(string)
		if _, dup := got[id]; dup {
			t.Errorf("%s written twice", id)
		}
		got[id] = m.Values["route"].(string) + " audit=" + m.Values["audit"].(string)
	}
	want := map[string]string{"human-audited": "human audit=1", "auto-audited": "auto audit=1", "human": "human audit=0"}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: %q, want %q", id, got[id], w)
		}
	}
	if s := r.QueueStats(); s != (QueueStats{Enqueued: 3, Audited: 2}) {
		t.Errorf("stats %+v", s)
	}
}

// The draw is uniform: about the audit share of calls is drawn.
func TestAuditDrawUniform(t *testing.T) {
	r := newRouter(t, testConfig())
	r.audit = 0.2
	r.rng = rand.New(rand.NewPCG(1, 2))
	const n = 20000
	drawn := 0
	for range n {
		if ok, p := r.drawAudit(Decision{}); ok {
			drawn++
		} else if p != 0.2 {
			t.Fatalf("probability %v, want 0.2", p)
		}
	}
	// n Bernoulli(0.2) draws: standard deviation about 57; 5 sigma.
	if share := float64(drawn) / n; share < 0.186 || share > 0.214 {
		t.Errorf("%.4f drawn, want about 0.2", share)
	}
	for _, audit := range []float64{0, 1} {
		r.audit = audit
		for range 1000 {
			if ok, _ := r.drawAudit(Decision{}); ok != (audit == 1) {
				t.Fatalf("audit %v: drew %v", audit, !(audit == 1))
			}
		}
	}
}

// The draw is independent of route and confidence: two Routers seeded
// alike, one handed only human decisions and one only auto ones, audit the
// same calls.
func TestAuditDrawIndependentOfRoute(t *testing.T) {
	audited := func(d func(r *Router) Decision) []string {
		r, _, client, _ := queueRouter(t, Queue{Stream: "review"}, WithQueueCapacity(200)) // room for all: none dropped
		r.audit = 0.3
		r.rng = rand.New(rand.NewPCG(7, 7))
		for i := range 200 {
			r.Enqueue(context.Background(), d(r), Meta{RequestID: fmt.Sprintf("%03d", i)})
		}
		r.Close()
		var ids []string
		for _, m := range readStream(t, client, "review") {
			if m.Values["audit"] == "1" {
				ids = append(ids, m.Values["request_id"].(string))
			}
		}
		slices.Sort(ids)
		return ids
	}
	human := audited(func(r *Router) Decision { d, _ := humanDecision(r); return d })
	auto := audited(answerDecision)
	if !slices.Equal(human, auto) || len(human) < 30 || len(human) > 90 {
		t.Errorf("audited calls differ by route or are implausibly many or few:\nhuman %v\nauto  %v", human, auto)
	}
}

func TestAuditConfig(t *testing.T) {
	q := &Queue{Stream: "s"}
	for _, tc := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{Queue: q, Audit: 0.05}, ""},
		{Config{Queue: q, Audit: 1}, ""},
		{Config{Queue: q, IncludeContent: true}, ""},
		{Config{Queue: q, Audit: -0.1}, "audit -0.1 is outside 0..1"},
		{Config{Queue: q, Audit: 1.5}, "audit 1.5 is outside 0..1"},
		{Config{Queue: q, Audit: math.NaN()}, "audit NaN is outside 0..1"},
		{Config{Audit: 0.1}, "audit needs a queue"},
		{Config{IncludeContent: true}, "include_content needs a queue"},
		{Config{Queue: q, IncludeContent: true, MaxContent: 1024}, ""},
		{Config{Queue: q, IncludeContent: true, MaxContent: 1023}, "max_content 1023 bytes: must be at least 1KiB"},
		{Config{Queue: q, MaxContent: 4096}, "max_content needs include_content"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// assertNoContent fails when a log entry holds request or response content.
func assertNoContent(t *testing.T, logs *observer.ObservedLogs) {
	t.Helper()
	for _, e := range logs.AllUntimed() {
		for k, v := range e.ContextMap() {
			s, _ := json.Marshal(v)
			for _, secret := range []string{"SECRET", "probabilities", "good"} {
				if strings.Contains(string(s), secret) {
					t.Errorf("log %q field %s holds content: %s", e.Message, k, s)
				}
			}
		}
	}
}
