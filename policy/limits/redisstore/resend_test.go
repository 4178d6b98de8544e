package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// resendStore is a store in a Redis behind a fault proxy, timing out
// after 100ms and probing a lost Redis every 10 to 50ms, on a clock pinned
// at now (no refill between a charge and its check), and a client of
// that Redis's own, past the proxy.
func resendStore(t *testing.T, now time.Time, o Options) (*testStore, *faultproxy.Proxy, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	o.Timeout, o.ProbeMin, o.ProbeMax = 100*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond
	o.Clock = func() time.Time { return now }
	return newStore(t, "redis://"+proxy.Addr(), o), proxy, srv
}

// slowTok is a token bucket that refills a token a second: a bucket
// charged a few tokens keeps its key for as many seconds.
var slowTok = store.TokensPerSecond(1, 1_000_000)

// TestRedisSettlementWhoseAnswerIsLostRunsOnce: a settlement whose
// answer is lost is sent again until Redis answers, and runs once. One
// that ran and whose answer was held up past store_timeout (sent at once,
// or queued), and one that Redis never received (a black hole), are each
// in Redis's budget and token bucket exactly once when Redis is back:
// the budget's spent total is the sum of the charges, and nothing is
// counted unanswered or dropped. A hold whose answer was lost is sent
// again too. Each settlement leaves its id in Redis for settledFor.
func TestRedisSettlementWhoseAnswerIsLostRunsOnce(t *testing.T) {
	now := time.Now()
	s, proxy, srv := resendStore(t, now, Options{})
	direct := nodeClient(t, srv.Addr)
	end := now.Add(time.Hour).UnixMicro()
	budget := s.budgetKey("acme", "p")
	// settle charges charge nano-yuan and 100 tokens; with a reservation
	// to release it is sent at once (settleNow), without one it is queued.
	settle := func(charge, release int64) {
		s.Settle("acme", store.Settlement{Req: defReq, Tok: slowTok, Delta: 100,
			Spend: &store.SpendSettle{Period: "p", End: end, Charge: charge, Release: release}}, now)
	}
	// pooled keeps a connection in the client's pool: a new one, dialled
	// through the fault, could not run the settlement it is for.
	pooled := func() {
		t.Helper()
		if err := s.client.Ping(bg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	spent := func() int64 { return deref(redistest.HashInts(t, direct, budget, "s")[0]) }
	ran := func(want int64) {
		t.Helper()
		wait.Until(t, "spent "+strconv.FormatInt(want, 10)+" in Redis", func() bool { return spent() == want })
	}

	settle(1, 1)
	ran(1)

	// Redis runs it; its answer is held up past store_timeout.
	pooled()
	proxy.Latency(0, time.Minute)
	settle(10, 1)
	ran(11)
	proxy.Pass()
	s.drain(t)
	// A queued settlement and a hold, in one flush, their answers held
	// up too (or the call not even written: go-redis may time out a
	// connection's write behind an answer held up).
	pooled()
	proxy.Latency(0, time.Minute)
	s.mu.Lock()
	s.settles["acme"] = pendingSettle{req: defReq, tok: slowTok, delta: 100,
		spend: []store.SpendSettle{{Period: "p", End: end, Charge: 100}}}
	s.holds["acme"] = time.Hour
	s.mu.Unlock()
	s.wake()
	wait.Until(t, "Redis counted lost", func() bool { return !s.Up() })
	proxy.Pass()
	s.drain(t)
	if !direct.HExists(bg, s.bucketKey("acme"), "h").Val() {
		t.Error("no hold in Redis")
	}

	// Redis never sees this one.
	pooled()
	before := spent()
	proxy.BlackHole()
	settle(1000, 1)
	if got := spent(); got != before {
		t.Fatalf("spent %d in Redis through the black hole, was %d", got, before)
	}
	proxy.Pass()
	s.drain(t)
	if got := spent(); got != 1111 {
		t.Errorf("spent %d in Redis, want 1111: each settlement once", got)
	}
	if got := redistest.HashInts(t, direct, s.bucketKey("acme"), "t")[0]; got == nil || *got != slowTok.Capacity-4*100*store.Unit {
		t.Errorf("token bucket %d units short of full, want 4 charges of 100 tokens", slowTok.Capacity-deref(got))
	}
	if st := s.Stats(); st.SettlementsUnanswered != 0 || st.SettlementsDropped != 0 {
		t.Errorf("%+v: want nothing unanswered or dropped", st)
	}
	ids, err := direct.Keys(bg, "t:{acme}:s:*").Result()
	if err != nil || len(ids) != 4 {
		t.Fatalf("settlement ids %v %v, want one for each of 4 settlements", ids, err)
	}
	for _, id := range ids {
		if ttl := direct.PTTL(bg, id).Val(); ttl <= settledFor-time.Minute || ttl > settledFor {
			t.Errorf("%s kept %s more, want at most %s", id, ttl, settledFor)
		}
	}
}

// TestRedisResendGivenUpAfterRetryFor: a settlement whose answer never
// comes is sent again for RetryFor, then given up: counted unanswered and
// logged (while Redis is still lost), and never sent once Redis is back.
func TestRedisResendGivenUpAfterRetryFor(t *testing.T) {
	now := time.Now()
	s, proxy, srv := resendStore(t, now, Options{RetryFor: 300 * time.Millisecond})
	direct := nodeClient(t, srv.Addr)
	proxy.BlackHole()
	s.Settle("acme", budgetSettlement(0, 5, 1), now)
	wait.Until(t, "the settlement given up", func() bool {
		st := s.Stats()
		return st.SettlementsUnanswered == 1 && st.Pending == 0
	})
	if s.Up() {
		t.Fatal("Redis counted up through the black hole")
	}
	if n := s.logs.FilterMessage("redis settlements lost; not sent again").Len(); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
	proxy.Pass()
	wait.Until(t, "Redis back", s.Up)
	s.flush()
	if n := direct.Exists(bg, s.budgetKey("acme", "p")).Val(); n != 0 {
		t.Error("the settlement given up was sent after all")
	}
}

// TestRedisGiveBackInDoubtKeepsItsFlush: a lease's rest given back by a
// settlement whose answer was lost (Redis may have run it, or never seen
// it) counts its flush not done (its organization stays on exact
// admission) until the settlement sent again is answered; the rest goes
// back once.
func TestRedisGiveBackInDoubtKeepsItsFlush(t *testing.T) {
	now := time.Now()
	s, proxy, srv := resendStore(t, now, Options{})
	direct := nodeClient(t, srv.Addr)
	c := admission(store.RequestsPerMinute(1000), slowTok, 100) // 1,000 tokens short: a key kept 1,000s
	for range 10 {
		mustAdmit(t, s, "acme", c)
	}
	bucket := s.bucketKey("acme")
	if err := s.client.Ping(bg).Err(); err != nil { // a connection in the pool, dialled before the fault
		t.Fatal(err)
	}
	proxy.Latency(0, time.Minute)
	epoch := s.giveBack("acme", store.RequestsPerMinute(1000), slowTok, 5*store.Unit, 0)
	wait.Until(t, "the settlement kept to send again", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.resends) == 1
	})
	if got := s.flushed.Load(); got >= epoch {
		t.Fatalf("flush %d counted done with its give-back unanswered", got)
	}
	proxy.Pass()
	s.drain(t)
	if got := s.flushed.Load(); got < epoch {
		t.Errorf("flushed %d once the give-back was answered, want at least %d", got, epoch)
	}
	if got := deref(redistest.HashInts(t, direct, bucket, "r")[0]); got != 995*store.Unit {
		t.Errorf("%d requests in the bucket, want 995: the rest given back once", got/store.Unit)
	}
}
