package redisstore

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// waitPending yields until n admissions wait in b: a condition, not a
// deadline (the test's own timeout bounds it).
func waitPending(b *nodeBatcher, n int) {
	for {
		b.mu.Lock()
		got := len(b.pending)
		b.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
}

// pretendBusy makes the node's batcher behave as if maxInflight pipelines
// were in flight, so that admissions queue until the test calls lead (which
// then frees one slot).
func pretendBusy(t *testing.T, s *testStore) *nodeBatcher {
	t.Helper()
	b := s.batcher(s.client.(*redis.Client))
	b.mu.Lock()
	b.inflight = maxInflight
	b.mu.Unlock()
	return b
}

// admitTogether admits each of orgs on a goroutine of its own while b's
// pipelines are busy, waits until every admission is queued, has them all
// led in one pipeline, and returns their outcomes and errors in orgs' order.
func admitTogether(s *testStore, b *nodeBatcher, orgs []string, c store.Check) ([]store.Outcome, []error) {
	got := make([]store.Outcome, len(orgs))
	errs := make([]error, len(orgs))
	var wg sync.WaitGroup
	for i, org := range orgs {
		wg.Go(func() { got[i], errs[i] = s.Admit(bg, org, c, 0, time.Time{}) })
	}
	waitPending(b, len(orgs))
	b.lead(nil)
	wg.Wait()
	return got, errs
}

// deref is *p, or 0 for nil.
func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// budgetSettlement is the settlement of a budgeted request that reserved
// release nano-yuan under minute slot of period "p", and cost charge.
func budgetSettlement(slot, charge, release int64) store.Settlement {
	end := time.Now().Add(time.Hour).UnixMicro()
	return store.Settlement{Req: defReq, Tok: defTok,
		Spend: &store.SpendSettle{Period: "p", End: end, Slot: slot, Charge: charge, Release: release}}
}

// TestRedisAdmissionsShareAScriptCall: admissions that arrive while the
// node's pipelines are in flight go together in the next one, as one
// call of one script that Redis runs once (INFO commandstats), each
// admission with its own outcome and its own answer; the settlements of
// budgeted requests that wait meanwhile ride the same call, and each
// returns only once Redis has answered it. A lone admission or a lone
// settlement goes at once.
func TestRedisAdmissionsShareAScriptCall(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.URL(), Options{})
	c := admission(store.RequestsPerMinute(1000), defTok, 1)
	mustAdmit(t, s, "warm", c) // connects, loads the script
	hook := &redistest.CountHook{}
	s.client.AddHook(hook)
	b := pretendBusy(t, s)
	direct := nodeClient(t, srv.Addr) // its commands are not the store's
	before := redistest.CommandCalls(t, srv.Addr)["evalsha"]

	// Half the admissions to one organization (each must see the debits
	// before its own), half to organizations of their own; and budgeted
	// requests' settlements, each releasing its reservation.
	const n, settles = 50, 4
	for i := range settles {
		org := "budgeted" + strconv.Itoa(i)
		if err := direct.HSet(bg, s.budgetKey(org, "p"), "r7", 1000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]store.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		org := "acme"
		if i%2 == 1 {
			org = "org" + strconv.Itoa(i)
		}
		wg.Go(func() { got[i], errs[i] = s.Admit(bg, org, c, 0, time.Time{}) })
	}
	settled := make(chan string, settles)
	for i := range settles {
		org := "budgeted" + strconv.Itoa(i)
		wg.Go(func() {
			s.Settle(org, budgetSettlement(7, 300, 1000), time.Time{})
			settled <- org
		})
	}
	waitPending(b, n+settles)
	if len(settled) != 0 {
		t.Fatal("a settlement returned before Redis answered it")
	}
	b.lead(nil)
	wg.Wait()
	if sent, scripts := hook.Sent.Load(), hook.Scripts.Load(); sent != 1 || scripts != 1 {
		t.Fatalf("%d pipelines with %d script calls for %d admissions and %d settlements, want 1 with 1", sent, scripts, n, settles)
	}
	if calls := redistest.CommandCalls(t, srv.Addr)["evalsha"] - before; calls != 1 {
		t.Fatalf("Redis ran %d EVALSHA for %d admissions and %d settlements, want 1", calls, n, settles)
	}
	var remaining []int64
	for i, o := range got {
		if !o.Allowed || errs[i] != nil {
			t.Fatalf("%+v %v, want admitted by Redis", o, errs[i])
		}
		if i%2 == 1 {
			if o.Req/store.Unit != 999 {
				t.Fatalf("an organization's first admission left %d, want 999", o.Req/store.Unit)
			}
			continue
		}
		remaining = append(remaining, o.Req/store.Unit)
	}
	slices.Sort(remaining)
	for i, r := range remaining {
		if r != int64(1000-n/2+i) {
			t.Fatalf("remaining %v: each admission must see its own answer", remaining)
		}
	}
	for i := range settles {
		v := redistest.HashInts(t, s.client, s.budgetKey("budgeted"+strconv.Itoa(i), "p"), "s", "r7")
		if v[0] == nil || *v[0] != 300 || v[1] != nil {
			t.Fatalf("budget after the settlement: spent %v, reserved %v; want 300 spent, nothing reserved", v[0], v[1])
		}
	}
	if b.inflight != maxInflight-1 || len(b.pending) != 0 {
		t.Fatalf("%d in flight, %d pending after the pipeline", b.inflight, len(b.pending))
	}
	// A lone admission, and a lone settlement, go at once to an idle node,
	// each in a pipeline of its own: no timer waits for company.
	b.mu.Lock()
	b.inflight = 0 // the pipelines pretendBusy made up will never end
	b.mu.Unlock()
	hook.Sent.Store(0)
	mustAdmit(t, s, "acme", c)
	if sent := hook.Sent.Load(); sent != 1 {
		t.Fatalf("a lone admission took %d round trips", sent)
	}
	hook.Sent.Store(0)
	direct.HSet(bg, s.budgetKey("lone", "p"), "r7", 1000)
	s.Settle("lone", budgetSettlement(7, 100, 1000), time.Time{})
	if sent := hook.Sent.Load(); sent != 1 {
		t.Fatalf("a lone settlement took %d round trips before it returned", sent)
	}
	if v := redistest.HashInts(t, s.client, s.budgetKey("lone", "p"), "s"); v[0] == nil || *v[0] != 100 {
		t.Fatalf("spent %v once the settlement returned, want 100", v[0])
	}
}

// TestRedisSettlementRidesTheNextPipeline: a budgeted request's settlement
// opens no pipeline of its own while the node has one in flight; it goes
// with the next admission's, and returns once Redis has answered it.
func TestRedisSettlementRidesTheNextPipeline(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.URL(), Options{})
	c := admission(store.RequestsPerMinute(1000), defTok, 1)
	mustAdmit(t, s, "warm", c)
	hook := &redistest.CountHook{}
	s.client.AddHook(hook)
	b := s.batcher(s.client.(*redis.Client))
	b.mu.Lock()
	b.inflight = 1 // a pipeline in flight, as far as the batcher knows
	b.mu.Unlock()
	nodeClient(t, srv.Addr).HSet(bg, s.budgetKey("budgeted", "p"), "r7", 1000)

	settled := make(chan struct{})
	go func() {
		s.Settle("budgeted", budgetSettlement(7, 300, 1000), time.Time{})
		close(settled)
	}()
	wait.Until(t, "the settlement queued or sent", func() bool {
		select {
		case <-settled:
			return true
		default:
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.pending) == 1
	})
	if sent := hook.Sent.Load(); sent != 0 {
		t.Fatalf("the settlement opened %d pipelines beside the one in flight", sent)
	}
	mustAdmit(t, s, "acme", c) // leads the next pipeline, settlement and all
	<-settled
	if sent, scripts := hook.Sent.Load(), hook.Scripts.Load(); sent != 1 || scripts != 1 {
		t.Fatalf("%d pipelines with %d script calls for an admission and a settlement, want 1 with 1", sent, scripts)
	}
	v := redistest.HashInts(t, s.client, s.budgetKey("budgeted", "p"), "s", "r7")
	if v[0] == nil || *v[0] != 300 || v[1] != nil {
		t.Fatalf("budget after the settlement: spent %v, reserved %v; want 300 spent, nothing reserved", v[0], v[1])
	}
}

// TestRedisItemFailsAlone: an admission that fails inside a shared script
// call (its bucket key holds a string: WRONGTYPE) fails alone, with the
// script's error; the others in the call are admitted, each once.
func TestRedisItemFailsAlone(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.URL(), Options{})
	c := admission(store.RequestsPerMinute(1000), defTok, 1)
	mustAdmit(t, s, "warm", c)
	bad := s.bucketKey("bad")
	if err := s.client.Set(bg, bad, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	b := pretendBusy(t, s)
	orgs := []string{"a", "b", "bad", "c", "d"}
	got, errs := admitTogether(s, b, orgs, c)
	for i, org := range orgs {
		if org == "bad" {
			if class, _ := classify(errs[i]); errs[i] == nil || class != "script" || !strings.Contains(errs[i].Error(), "WRONGTYPE") {
				t.Fatalf("the bad item: %v, want its WRONGTYPE script error", errs[i])
			}
			continue
		}
		if errs[i] != nil || !got[i].Allowed || got[i].Req/store.Unit != 999 {
			t.Fatalf("%s: %+v %v, want admitted once beside the failed item", org, got[i], errs[i])
		}
	}
}

// TestRedisBatchWhoseAnswerIsLostNeverDebitsTwice: a script call whose
// answer is lost after Redis ran it (the connection reset mid-reply)
// fails each of its settlements and admissions, none of them proven
// unsent: the settlements are sent again with their ids, which Redis
// has, so none is counted unanswered; the admissions are answered with
// the error. Every bucket shows each debit exactly once, however many
// flushes follow.
func TestRedisBatchWhoseAnswerIsLostNeverDebitsTwice(t *testing.T) {
	srv, proxy, client := proxied(t)
	pinned := time.Now() // no refill between the debits and their check
	s := New(client, "t:", Options{Timeout: time.Minute, Clock: func() time.Time { return pinned }})
	t.Cleanup(func() { _ = s.Close() })
	ts := &testStore{Store: s, client: client, prefix: "t:"}
	c := admission(store.RequestsPerMinute(1000), defTok, 1)
	mustAdmit(t, ts, "warm", c)
	direct := nodeClient(t, srv.Addr)
	const n = 20

	// Settlements of token corrections, queued and flushed as one call.
	s.mu.Lock()
	for i := range n {
		s.settles["org"+strconv.Itoa(i)] = pendingSettle{req: defReq, tok: defTok, delta: 5}
	}
	s.mu.Unlock()
	proxy.Latency(0, time.Minute) // Redis runs the call; its answer waits
	flushed := make(chan struct{})
	go func() { s.flush(); close(flushed) }()
	last := s.bucketKey("org" + strconv.Itoa(n-1))
	wait.Until(t, "the settlements run", func() bool { return direct.Exists(bg, last).Val() == 1 })
	proxy.Reset()
	<-flushed
	proxy.Pass()
	s.flush() // nothing may be left to send
	ts.drain(t)
	// Each organization's 5 tokens charged once (read before the keys
	// expire: a bucket this close to full lives a second).
	for i := range n {
		bucket := s.bucketKey("org" + strconv.Itoa(i))
		if v := redistest.HashInts(t, direct, bucket, "t"); v[0] == nil || *v[0] != defTok.Capacity-5*store.Unit {
			t.Fatalf("org%d's token bucket is not one charge of 5 below full (%d units short)", i, defTok.Capacity-deref(v[0]))
		}
	}

	if st := s.Stats(); st.SettlementsUnanswered != 0 {
		t.Fatalf("%d settlements counted unanswered, want none", st.SettlementsUnanswered)
	}
	// Admissions of concurrent requests, one call, on a connection made
	// before the answers are held up.
	if err := client.Ping(bg).Err(); err != nil {
		t.Fatal(err)
	}
	b := pretendBusy(t, ts)
	bucket := s.bucketKey("acme")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = s.Admit(bg, "acme", c, 0, time.Time{}) })
	}
	waitPending(b, n)
	proxy.Latency(0, time.Minute)
	go b.lead(nil)
	wait.Until(t, "the admissions run", func() bool {
		v, _ := direct.HGet(bg, bucket, "r").Int64()
		return v == (1000-n)*store.Unit
	})
	proxy.Reset()
	wg.Wait()
	for _, err := range errs {
		if err == nil || notSent(err) {
			t.Fatalf("admission error %v, want one that says it may have run", err)
		}
	}
	proxy.Pass()
	wait.Until(t, "redis back", s.Up)

	// acme's n admissions debited once.
	if o := mustAdmit(t, ts, "acme", c); o.Req/store.Unit != 1000-n-1 {
		t.Fatalf("acme has %d requests left after %d admissions and this one, want %d", o.Req/store.Unit, n, 1000-n-1)
	}
}

// TestRedisAdmissionGoneBeforeItsPipelineNeverRuns: an admission whose
// store_timeout ends while it waits for a pipeline is taken off the queue.
func TestRedisAdmissionGoneBeforeItsPipelineNeverRuns(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.URL(), Options{})
	c := admission(store.RequestsPerMinute(1000), defTok, 1)
	mustAdmit(t, s, "warm", c)
	b := pretendBusy(t, s)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error)
	go func() {
		_, err := s.Admit(ctx, "acme", c, 0, time.Time{})
		done <- err
	}()
	waitPending(b, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want the caller's cancellation", err)
	}
	waitPending(b, 0)
	b.lead(nil) // nothing to send: frees a slot
	if o := mustAdmit(t, s, "acme", c); o.Req/store.Unit != 999 {
		t.Fatalf("remaining %d, want 999: the abandoned admission ran", o.Req/store.Unit)
	}
}

// TestRedisManyOrgsSettleBehindASlowRedis: tens of thousands of
// organizations, each far above its estimate or far below it, behind a
// Redis 2ms away, with a queue small enough to push back: every bucket
// ends exactly where usage says, nothing dropped or lost. (A slow refill
// keeps every key alive until it is read.)
func TestRedisManyOrgsSettleBehindASlowRedis(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	proxy.Latency(time.Millisecond, time.Millisecond)
	now := time.Now()
	const burst = 100_000
	req, tok := store.RequestsPerMinute(100), store.TokensPerSecond(1, burst)
	s := newStore(t, "redis://"+proxy.Addr(), Options{Clock: func() time.Time { return now }, MaxPending: 1000})

	const orgs, workers, estimate = 30_000, 64, 500
	usage := func(i int) int64 {
		if i%3 == 0 {
			// A refund, which leaves 100 tokens to refill: the key lives
			// 100s, through a slow run under the race detector.
			return 100
		}
		return estimate + int64(i%4000) // far above the estimate
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < orgs; i += workers {
				org := "org" + strconv.Itoa(i)
				o, err := s.Admit(bg, org, admission(req, tok, estimate), 0, now)
				if !o.Allowed || err != nil {
					t.Errorf("%s: %+v %v", org, o, err)
					return
				}
				s.Settle(org, store.Settlement{Req: req, Tok: tok, Delta: usage(i) - estimate}, now)
			}
		})
	}
	wg.Wait()
	s.drain(t)
	if st := s.Stats(); st.SettlementsUnanswered != 0 || st.SettlementsDropped != 0 {
		t.Fatalf("%d settlements lost, %d dropped", st.SettlementsUnanswered, st.SettlementsDropped)
	}

	direct := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = direct.Close() })
	for start := 0; start < orgs; start += 1000 {
		pipe := direct.Pipeline()
		var cmds []*redis.StringCmd
		for i := start; i < min(start+1000, orgs); i++ {
			cmds = append(cmds, pipe.HGet(bg, "t:{org"+strconv.Itoa(i)+"}:b", "t"))
		}
		if _, err := pipe.Exec(bg); err != nil {
			t.Fatal(err)
		}
		for j, cmd := range cmds {
			i := start + j
			want := (burst - usage(i)) * store.Unit
			if got, err := cmd.Int64(); err != nil || got != want {
				t.Fatalf("org%d: tokens %d (%v), want %d", i, got, err, want)
			}
		}
	}
}

// TestRedisSettlementsDroppedOnlyWhileLost: with Redis lost and the queue
// full, new organizations are dropped, counted and logged once; those
// queued still add up.
func TestRedisSettlementsDroppedOnlyWhileLost(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.URL(), Options{MaxPending: 10})
	s.markLost() // no probe runs: nothing flushes
	for i := range 15 {
		s.enqueue("org"+strconv.Itoa(i), defReq, defTok, -10, nil)
	}
	s.enqueue("org1", defReq, defTok, 30, nil)
	s.mu.Lock()
	n, org1 := len(s.settles), s.settles["org1"].delta
	s.mu.Unlock()
	if n != 10 || org1 != 20 || s.dropped.Load() != 5 {
		t.Fatalf("%d queued, org1 %d, %d dropped", n, org1, s.dropped.Load())
	}
	if w := s.logs.FilterMessage("redis lost and its settlement queue full; dropping settlements").Len(); w != 1 {
		t.Fatalf("%d warnings, want one per episode", w)
	}
}

// TestRedisConcurrentLeadersAnswerEveryAdmission: with several pipelines in
// flight, a leader finishing its pipeline must not take the admission that
// has just taken a free slot (it would return before its answer is in), nor
// hand it a second lead. Every admission comes back with its own answer,
// and the counts add up. The token bucket counts them: its slow refill
// keeps the key alive (Redis expires it by its own clock, not the pinned
// one) until the last admission reads it.
func TestRedisConcurrentLeadersAnswerEveryAdmission(t *testing.T) {
	srv := redistest.Start(t)
	const workers, each = 48, 150
	now := time.Now()
	s := newStore(t, srv.URL(), Options{Clock: func() time.Time { return now }})
	c := admission(store.Spec{}, store.TokensPerSecond(1, workers*each), 1)
	mustAdmit(t, s, "warm", c)
	seen := make([]bool, workers*each)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				o, err := s.Admit(bg, "acme", c, 0, now)
				if !o.Allowed || err != nil {
					t.Errorf("%+v %v, want admitted with Redis's answer", o, err)
					return
				}
				left := o.Tok / store.Unit
				mu.Lock()
				dup := seen[left]
				seen[left] = true
				mu.Unlock()
				if dup {
					t.Errorf("remaining %d answered twice", left)
					return
				}
			}
		})
	}
	wg.Wait()
	b := s.batcher(s.client.(*redis.Client))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight != 0 || len(b.pending) != 0 {
		t.Fatalf("%d in flight, %d pending once every admission is answered", b.inflight, len(b.pending))
	}
}

// TestRedisCallTakenOffTheQueueIsNotSent: a call whose time runs out while
// it waits for a pipeline never runs, and its error says so, so that a
// lease's give-back riding on it is queued again rather than counted lost.
func TestRedisCallTakenOffTheQueueIsNotSent(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.URL(), Options{})
	mustAdmit(t, s, "warm", admission(defReq, defTok, 1))
	b := pretendBusy(t, s)
	ctx, cancel := context.WithCancel(bg)
	got := make(chan error)
	go func() {
		_, err := b.do(ctx, &scriptCall{node: s.client.(*redis.Client), kind: kindHold, keys: []string{"k"}, args: []any{"", 1}}, slow)
		got <- err
	}()
	waitPending(b, 1)
	cancel()
	if err := <-got; !notSent(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v: want one that says not sent, and why", err)
	}
}

// TestRedisSettlementWaitingForRoomDropsOnceLost: a settlement waiting for
// room in a full queue, while a flush is stuck on a Redis that stopped
// answering, is dropped (and counted) as soon as Redis counts as lost,
// rather than holding its request for the whole outage.
func TestRedisSettlementWaitingForRoomDropsOnceLost(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	s := newStore(t, "redis://"+proxy.Addr(), Options{MaxPending: 2})
	mustAdmit(t, s, "warm", admission(defReq, defTok, 1)) // the script is loaded, the connection up
	proxy.BlackHole()
	s.enqueue("org0", defReq, defTok, -10, nil) // its flush is stuck for store_timeout
	wait.Until(t, "the flush to take org0", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.taken == 1 && len(s.settles) == 0
	})
	s.enqueue("org1", defReq, defTok, -10, nil)
	s.enqueue("org2", defReq, defTok, -10, nil) // the queue is full
	done := make(chan struct{})
	go func() {
		s.enqueue("org3", defReq, defTok, -10, nil)
		close(done)
	}()
	wait.Until(t, "the full queue to ask for a flush", func() bool {
		select {
		case <-done:
			t.Fatal("the settlement did not wait for room while Redis counted as up")
		default:
		}
		return len(s.urgent) == 1 || s.taken > 1 // it asked for a flush
	})
	node := &s.batcher(s.client.(*redis.Client)).health
	for range lostAfter {
		s.observe(bg, node, "k", context.DeadlineExceeded)
	}
	select {
	case <-done:
	case <-time.After(slow / 2):
		t.Fatal("the settlement still waits for room with Redis lost")
	}
	if n := s.dropped.Load(); n != 1 {
		t.Fatalf("%d dropped, want 1", n)
	}
}

// noNodes is a Redis client for which no node can be found for a key.
type noNodes struct{ redis.Scripter }

// TestRedisCallWithoutANodeIsNotSent: a call for which no node could be
// found (a cluster whose slot map cannot be loaded) wrote nothing, and its
// error says so, so that a lease's give-back riding on it is queued again
// rather than counted lost.
func TestRedisCallWithoutANodeIsNotSent(t *testing.T) {
	s := &Store{client: noNodes{}, timeout: slow}
	_, err := s.run(bg, kindHold, []string{"k"}, "", 1)
	if err == nil || !notSent(err) {
		t.Fatalf("error %v: want one that says not sent", err)
	}
}

// mustAdmit admits c for org at the server's time, and fails the test
// unless Redis admitted it.
func mustAdmit(t *testing.T, s *testStore, org string, c store.Check) store.Outcome {
	t.Helper()
	o, err := s.Admit(bg, org, c, 0, time.Time{})
	if err != nil || !o.Allowed {
		t.Fatalf("%s: %+v %v, want admitted", org, o, err)
	}
	return o
}
