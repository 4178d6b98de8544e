package limits

import (
	"context"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
)

// stores runs a test against the in-process store and against Redis, both on
// a clock the test moves (the Redis scripts get it instead of TIME).
func stores(t *testing.T, test func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock))) {
	t.Run("inprocess", func(t *testing.T) {
		test(t, func(cfg Config) (*Limiter, *testclock.Clock) {
			clk := newFakeClock()
			l, _ := newLimiter(t, cfg, clk, true)
			return l, clk
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		test(t, func(cfg Config) (*Limiter, *testclock.Clock) {
			cfg.OnStoreError = StoreErrorDeny // a Redis failure must show
			// These tests are about arithmetic, not timeouts: a loaded
			// machine running -race must not time a call out.
			cfg.StoreTimeout = caddy.Duration(5 * time.Second)
			clk := newFakeClock()
			l, _ := newLimiter(t, cfg, clk, true, onRedis(srv.URL()))
			return l, clk
		})
	})
}

var bg = context.Background()

func mustAllow(t *testing.T, d Decision) Decision {
	t.Helper()
	if !d.Allowed {
		t.Fatalf("refused: %+v", d)
	}
	return d
}

func mustRefuse(t *testing.T, d Decision, retryAfter time.Duration, msg string) {
	t.Helper()
	if d.Allowed || d.Unavailable || d.RetryAfter != retryAfter || d.Message != msg {
		t.Fatalf("got %+v\nwant refused, retry after %s, %q", d, retryAfter, msg)
	}
}

// settle applies a settlement and waits until the store has it.
func settle(l *Limiter, d Decision, actual int64) {
	l.Settle(d, actual)
	if l.shared != nil {
		drain(l)
	}
}

// pttl is key's time to live in srv, in milliseconds, as PTTL answers
// (-2 for no key, -1 for no expiry).
func pttl(t *testing.T, srv *redistest.Server, key string) int {
	t.Helper()
	reply, err := srv.Do("PTTL", key)
	ms, perr := strconv.Atoi(strings.TrimPrefix(reply, ":"))
	if err != nil || perr != nil {
		t.Fatalf("PTTL %s: %q %v", key, reply, err)
	}
	return ms
}

func hold(l *Limiter, org string, d time.Duration) {
	l.Hold(org, d)
	if l.shared != nil {
		drain(l)
	}
}

func TestRequestsBucket(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(Config{})
		for i := range 300 {
			d := mustAllow(t, l.Admit(bg, "acme", 10))
			if d.Requests != (Quota{300, int64(299 - i)}) {
				t.Fatalf("request %d: %+v", i+1, d.Requests)
			}
		}
		// 5 requests per second: the next one in 200ms, announced as 1s.
		mustRefuse(t, l.Admit(bg, "acme", 10), time.Second, "Rate limit exceeded: 300 requests per minute for organization acme")
		mustAllow(t, l.Admit(bg, "other", 10))
		clk.Advance(199 * time.Millisecond)
		mustRefuse(t, l.Admit(bg, "acme", 10), time.Second, "Rate limit exceeded: 300 requests per minute for organization acme")
		clk.Advance(time.Millisecond)
		mustAllow(t, l.Admit(bg, "acme", 10))
		mustRefuse(t, l.Admit(bg, "acme", 10), time.Second, "Rate limit exceeded: 300 requests per minute for organization acme")
		clk.Advance(time.Minute)
		if d := mustAllow(t, l.Admit(bg, "acme", 10)); d.Requests.Remaining != 299 {
			t.Fatalf("after a minute: %+v, want a full bucket", d.Requests)
		}
	})
}

func TestRetryAfterWaitsForBothBuckets(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, _ := mk(Config{RequestsPerMinute: i64(1), TokensPerSecond: i64(10), TokenBurst: i64(1000)})
		mustAllow(t, l.Admit(bg, "acme", 1000))
		// Requests: 60s; tokens: 100s for 1000 at 10/s. Both must pay.
		mustRefuse(t, l.Admit(bg, "acme", 1000), 100*time.Second, "Rate limit exceeded: 10 input tokens per second for organization acme")
		// 200 tokens take 20s, the request 60s.
		mustRefuse(t, l.Admit(bg, "acme", 200), 60*time.Second, "Rate limit exceeded: 1 requests per minute for organization acme")
	})
}

func TestLargeRequestIsCappedAtBurst(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(Config{}) // 1000 tokens/s, burst 64000
		d := mustAllow(t, l.Admit(bg, "acme", 200_000))
		if d.Charged != 64000 || d.Tokens != (Quota{64000, 0}) {
			t.Fatalf("charged %d, tokens %+v; want 64000 and an empty bucket", d.Charged, d.Tokens)
		}
		mustRefuse(t, l.Admit(bg, "acme", 1), time.Second, "Rate limit exceeded: 1000 input tokens per second for organization acme")
		mustRefuse(t, l.Admit(bg, "acme", 64000), 64*time.Second, "Rate limit exceeded: 1000 input tokens per second for organization acme")
		clk.Advance(64 * time.Second)
		if d := mustAllow(t, l.Admit(bg, "acme", 64000)); d.Charged != 64000 {
			t.Fatalf("charged %d", d.Charged)
		}
	})
}

func TestSettle(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, _ := mk(Config{RequestsPerMinute: i64(0)})
		tokens := func() int64 { t.Helper(); return mustAllow(t, l.Admit(bg, "acme", 0)).Tokens.Remaining }

		d := mustAllow(t, l.Admit(bg, "acme", 10_000))
		settle(l, d, 4_000) // over-estimated: 6000 back
		if got := tokens(); got != 60_000 {
			t.Fatalf("after a refund: %d tokens, want 60000", got)
		}
		d = mustAllow(t, l.Admit(bg, "acme", 10_000))
		settle(l, d, 25_000) // under-estimated: 15000 more
		if got := tokens(); got != 35_000 {
			t.Fatalf("after an extra charge: %d tokens, want 35000", got)
		}
		d = mustAllow(t, l.Admit(bg, "acme", 5_000))
		settle(l, d, 0) // upstream failed: all back
		if got := tokens(); got != 35_000 {
			t.Fatalf("after an upstream error: %d tokens, want 35000", got)
		}
		d = mustAllow(t, l.Admit(bg, "acme", 35_000))
		settle(l, d, 0)
		settle(l, d, 0) // a refund never lifts the bucket above capacity
		if got := tokens(); got != 64_000 {
			t.Fatalf("after refunds: %d tokens, want 64000 (capacity)", got)
		}
	})
}

func TestDebtIsFlooredAtOneBucket(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(Config{RequestsPerMinute: i64(0), TokensPerSecond: i64(100), TokenBurst: i64(1000)})
		d := mustAllow(t, l.Admit(bg, "acme", 1000))
		settle(l, d, 1_000_000_000)
		// At -1000 tokens, 1 token needs 1001 / 100 = 10.01s.
		mustRefuse(t, l.Admit(bg, "acme", 1), 11*time.Second, "Rate limit exceeded: 100 input tokens per second for organization acme")
		d = l.Admit(bg, "acme", 0)
		if d.Allowed || d.Tokens.Remaining != 0 {
			t.Fatalf("an org in debt was admitted or reported tokens: %+v", d)
		}
		clk.Advance(10010 * time.Millisecond)
		mustAllow(t, l.Admit(bg, "acme", 1))
	})
}

func TestOrgOverrides(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, _ := mk(Config{
			RequestsPerMinute: i64(100),
			Orgs: map[string]Override{
				"small": {RequestsPerMinute: i64(2)},
				"big":   {TokenBurst: i64(200_000), TokensPerSecond: i64(5000)},
			},
		})
		mustAllow(t, l.Admit(bg, "small", 1))
		d := mustAllow(t, l.Admit(bg, "small", 1))
		if d.Requests != (Quota{2, 0}) || d.Tokens != (Quota{64000, 63998}) {
			t.Fatalf("small: %+v %+v", d.Requests, d.Tokens)
		}
		mustRefuse(t, l.Admit(bg, "small", 1), 30*time.Second, "Rate limit exceeded: 2 requests per minute for organization small")
		d = mustAllow(t, l.Admit(bg, "big", 150_000))
		if d.Charged != 150_000 || d.Requests != (Quota{100, 99}) {
			t.Fatalf("big: charged %d, %+v", d.Charged, d.Requests)
		}
		mustRefuse(t, l.Admit(bg, "big", 60_000), 2*time.Second, "Rate limit exceeded: 5000 input tokens per second for organization big")
		if d := mustAllow(t, l.Admit(bg, "anyone", 1)); d.Requests.Limit != 100 {
			t.Fatalf("default org: %+v", d.Requests)
		}
	})
}

func TestBucketOff(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, _ := mk(Config{RequestsPerMinute: i64(0), Orgs: map[string]Override{"notokens": {RequestsPerMinute: i64(5), TokensPerSecond: i64(0)}}})
		for range 1000 {
			d := mustAllow(t, l.Admit(bg, "acme", 1))
			if d.Requests != (Quota{}) {
				t.Fatalf("requests bucket off but reported: %+v", d.Requests)
			}
		}
		d := mustAllow(t, l.Admit(bg, "notokens", 1e12))
		if d.Charged != 0 || d.Tokens != (Quota{}) {
			t.Fatalf("token bucket off but charged %d, %+v", d.Charged, d.Tokens)
		}
		settle(l, d, 1e12)
		mustAllow(t, l.Admit(bg, "notokens", 1e12))
	})
}

func TestHold(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(Config{})
		hold(l, "acme", 7*time.Second)
		mustRefuse(t, l.Admit(bg, "acme", 1), 7*time.Second, "Rate limit exceeded: the upstream limited organization acme; retry after 7s")
		mustAllow(t, l.AdmitRequest(bg, "acme")) // GET /v1/models is not held
		mustAllow(t, l.Admit(bg, "other", 1))
		hold(l, "acme", 2*time.Second) // a shorter hold does not shorten it
		clk.Advance(6500 * time.Millisecond)
		mustRefuse(t, l.Admit(bg, "acme", 1), time.Second, "Rate limit exceeded: the upstream limited organization acme; retry after 1s")
		clk.Advance(500 * time.Millisecond)
		mustAllow(t, l.Admit(bg, "acme", 1))

		hold(l, "acme", 0) // no retry-after: one second
		mustRefuse(t, l.Admit(bg, "acme", 1), time.Second, "Rate limit exceeded: the upstream limited organization acme; retry after 1s")
		clk.Advance(time.Second)
		mustAllow(t, l.Admit(bg, "acme", 1))

		hold(l, "acme", 1000*time.Hour) // capped at an hour
		mustRefuse(t, l.Admit(bg, "acme", 1), time.Hour, "Rate limit exceeded: the upstream limited organization acme; retry after 3600s")
	})
}

func TestAdmitRequestUsesRequestsOnly(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(Config{RequestsPerMinute: i64(3), TokensPerSecond: i64(1), TokenBurst: i64(10)})
		mustAllow(t, l.Admit(bg, "acme", 10))
		// Refused on its tokens, the request still counts one request.
		refused := l.Admit(bg, "acme", 1)
		mustRefuse(t, refused, time.Second, "Rate limit exceeded: 1 input tokens per second for organization acme")
		if d := refused; d.Requests != (Quota{3, 1}) {
			t.Fatalf("token refusal: %+v, want one request counted", d.Requests)
		}
		d := mustAllow(t, l.AdmitRequest(bg, "acme"))
		// The token bucket is reported (for the headers), not charged.
		if d.Requests != (Quota{3, 0}) || d.Tokens != (Quota{10, 0}) || d.Charged != 0 {
			t.Fatalf("AdmitRequest: %+v", d)
		}
		mustRefuse(t, l.AdmitRequest(bg, "acme"), 20*time.Second, "Rate limit exceeded: 3 requests per minute for organization acme")
		// Requests-only admissions must not stall the token bucket's refill.
		clk.Advance(20 * time.Second)
		mustAllow(t, l.AdmitRequest(bg, "acme"))
		clk.Advance(20 * time.Second)
		if d := mustAllow(t, l.Admit(bg, "acme", 0)); d.Tokens.Remaining != 10 {
			t.Fatalf("tokens after 20s: %+v, want a full bucket", d.Tokens)
		}
	})
}

func TestConcurrentAdmissionsAreExact(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, _ := mk(Config{TokenBurst: i64(100_000)})
		var admitted, tokens atomic.Int64
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for range 20 {
					if d := l.Admit(bg, "acme", int64(100+g)); d.Allowed {
						admitted.Add(1)
						tokens.Add(d.Charged)
					} else if d.Unavailable {
						t.Errorf("store failed: %+v", d)
					}
				}
			})
		}
		wg.Wait()
		d := l.Admit(bg, "acme", 0)
		if admitted.Load() != 300 || d.Allowed {
			t.Fatalf("admitted %d of 640, then %+v; want exactly 300", admitted.Load(), d)
		}
		if got := 100_000 - d.Tokens.Remaining; got != tokens.Load() {
			t.Fatalf("token bucket down by %d, admissions charged %d", got, tokens.Load())
		}
	})
}

func TestSettleIgnoresWhatChargedNothing(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, _ := mk(Config{RequestsPerMinute: i64(1)})
		mustAllow(t, l.Admit(bg, "acme", 100))
		refused := l.Admit(bg, "acme", 100)
		settle(l, refused, 0)
		settle(l, Decision{}, 0)
		l.Settle(Decision{Allowed: true}, 500) // no store: nothing to do
		if d := l.Admit(bg, "acme", 0); d.Tokens.Remaining != 63_900 {
			t.Fatalf("tokens %+v, want 63900", d.Tokens)
		}
	})
}

func TestSetHeaders(t *testing.T) {
	for _, tc := range []struct {
		d    Decision
		want http.Header
	}{
		{Decision{Requests: Quota{300, 12}, Tokens: Quota{64000, 0}}, http.Header{
			"X-Ratelimit-Limit-Requests": {"300"}, "X-Ratelimit-Remaining-Requests": {"12"},
			"X-Ratelimit-Limit-Tokens": {"64000"}, "X-Ratelimit-Remaining-Tokens": {"0"},
		}},
		{Decision{Requests: Quota{300, -1}}, http.Header{"X-Ratelimit-Limit-Requests": {"300"}}},
		{Decision{}, http.Header{}},
	} {
		h := http.Header{}
		tc.d.SetHeaders(h)
		if !reflect.DeepEqual(h, tc.want) {
			t.Errorf("%+v: headers %v, want %v", tc.d, h, tc.want)
		}
	}
}

func TestInProcessStateSurvivesReload(t *testing.T) {
	clk := newFakeClock()
	old, _ := newLimiter(t, Config{RequestsPerMinute: i64(60)}, clk, false, prefixed("reload:"))
	for range 60 {
		mustAllow(t, old.Admit(bg, "acme", 1))
	}
	// The new config is provisioned before the old one is cleaned up.
	next, _ := newLimiter(t, Config{RequestsPerMinute: i64(120)}, clk, false, prefixed("reload:"))
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	// Same empty bucket, new limits: 120 per minute refill 2 per second.
	mustRefuse(t, next.Admit(bg, "acme", 1), time.Second, "Rate limit exceeded: 120 requests per minute for organization acme")
	clk.Advance(500 * time.Millisecond)
	if d := mustAllow(t, next.Admit(bg, "acme", 1)); d.Requests != (Quota{120, 0}) {
		t.Fatalf("%+v", d.Requests)
	}
	other, _ := newLimiter(t, Config{}, clk, false, prefixed("elsewhere:"))
	mustAllow(t, other.Admit(bg, "acme", 1))
}

// An org refused by its requests bucket is known to be over its limit until
// the bucket refills one request: KnownOver answers without a store, with
// the retry-after left, and never for a refusal by another bucket or a hold.
func TestKnownOver(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(Config{RequestsPerMinute: i64(2), TokensPerSecond: i64(1), TokenBurst: i64(10)})
		if _, over := l.KnownOver("acme"); over {
			t.Fatal("an org never refused is known over")
		}
		mustAllow(t, l.AdmitRequest(bg, "acme"))
		mustAllow(t, l.Admit(bg, "acme", 10))
		// Tokens refuse first: not a requests refusal, nothing is known.
		l2, _ := mk(Config{RequestsPerMinute: i64(5), TokensPerSecond: i64(1), TokenBurst: i64(10)})
		mustAllow(t, l2.Admit(bg, "beta", 10))
		mustRefuse(t, l2.Admit(bg, "beta", 10), 10*time.Second, "Rate limit exceeded: 1 input tokens per second for organization beta")
		if _, over := l2.KnownOver("beta"); over {
			t.Fatal("a token refusal made the org known over its requests limit")
		}

		mustRefuse(t, l.AdmitRequest(bg, "acme"), 30*time.Second, "Rate limit exceeded: 2 requests per minute for organization acme")
		var counted *redistest.CountHook
		if l.shared != nil {
			counted = &redistest.CountHook{}
			universal(l).AddHook(counted)
		}
		d, over := l.KnownOver("acme")
		if !over || d.Allowed || d.Bucket != BucketRequests || d.RetryAfter != 30*time.Second ||
			d.Message != "Rate limit exceeded: 2 requests per minute for organization acme" || d.Requests != (Quota{2, 0}) {
			t.Fatalf("KnownOver: %v %+v", over, d)
		}
		clk.Advance(29 * time.Second)
		if d, over := l.KnownOver("acme"); !over || d.RetryAfter != time.Second {
			t.Fatalf("a second before the refill: %v %+v", over, d)
		}
		if _, over := l.KnownOver("other"); over {
			t.Fatal("another org is known over")
		}
		if counted != nil && counted.Sent.Load() != 0 {
			t.Fatalf("KnownOver sent %d commands to Redis", counted.Sent.Load())
		}
		clk.Advance(time.Second)
		if _, over := l.KnownOver("acme"); over {
			t.Fatal("still known over once the bucket refilled a request")
		}
		mustAllow(t, l.AdmitRequest(bg, "acme"))
	})
}

// The table of orgs known over their limit is bounded: org ids come from
// clients. Past the bound, expired entries are swept; if none expired, a
// newcomer is not remembered.
func TestKnownOverIsBounded(t *testing.T) {
	o := newOverLimit(2)
	now := time.Unix(1000, 0)
	o.note("a", now, now.Add(time.Second), Decision{Bucket: BucketRequests})
	o.note("b", now, now.Add(time.Minute), Decision{Bucket: BucketRequests})
	o.note("c", now, now.Add(time.Minute), Decision{Bucket: BucketRequests})
	if _, over := o.lookup("c", now); over || len(o.orgs) != 2 {
		t.Fatalf("a full table took a newcomer: %d entries", len(o.orgs))
	}
	later := now.Add(2 * time.Second)
	o.note("c", later, later.Add(time.Minute), Decision{Bucket: BucketRequests})
	_, aOver := o.lookup("a", later)
	_, cOver := o.lookup("c", later)
	if aOver || !cOver || len(o.orgs) != 2 {
		t.Fatalf("the expired entry was not swept for the newcomer: a %v c %v, %d entries", aOver, cOver, len(o.orgs))
	}
}
