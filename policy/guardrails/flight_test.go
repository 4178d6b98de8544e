package guardrails

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/internal/wait"
)

// waiters is the number of checks waiting for the call under key, besides
// its leader; -1 when no call is under way.
func (c *Checker) waiters(key string) int {
	c.flights.mu.Lock()
	defer c.flights.mu.Unlock()
	f, ok := c.flights.calls[key]
	if !ok {
		return -1
	}
	return f.waiters
}

// keyOf is the flight key of a check of state.
func keyOf(t *testing.T, c *Checker, state string) string {
	msgs, err := Messages([]byte(state))
	if err != nil {
		t.Fatal(err)
	}
	return cacheKey(c.cfg.Model, msgs)
}

// TestIdenticalChecksShareOneCall: five identical checks at once make one
// call to the service and all get its verdict.
func TestIdenticalChecksShareOneCall(t *testing.T) {
	release := make(chan struct{})
	svc := newService(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		answer(passAnswer)(w, r)
	})
	c := newChecker(t, Config{URL: svc.URL})
	const n, state = 5, `"the same text"`
	verdicts := make([]Verdict, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { verdicts[i] = c.Check(context.Background(), []byte(state)) })
	}
	key := keyOf(t, c, state)
	wait.Until(t, "four checks waiting for the first one's call", func() bool { return c.waiters(key) == n-1 })
	close(release)
	wg.Wait()
	for i, v := range verdicts {
		if v.Action != ActionPass || v.Err != nil {
			t.Errorf("check %d: %+v", i, v)
		}
	}
	if calls := svc.calls.Load(); calls != 1 {
		t.Fatalf("%d calls to the service for %d identical checks", calls, n)
	}
}

// TestLeaderLeavingKeepsTheCall: the caller of the check that leads a call
// goes away while another identical check waits: the call goes on (the
// leader's check returns when it ends), the waiting check gets the
// service's verdict, the leader its own caller's going away. Alone, a
// leader's caller going away ends the call at once (TestCallerGoesAway).
func TestLeaderLeavingKeepsTheCall(t *testing.T) {
	release := make(chan struct{})
	svc := newService(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		answer(passAnswer)(w, r)
	})
	c := newChecker(t, Config{URL: svc.URL, Timeout: caddy.Duration(time.Minute)})
	const state = `"shared"`
	key := keyOf(t, c, state)
	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan Verdict)
	go func() { leader <- c.Check(ctx, []byte(state)) }()
	wait.Until(t, "the leader's call", func() bool { return svc.calls.Load() == 1 })
	follower := make(chan Verdict)
	go func() { follower <- c.Check(context.Background(), []byte(state)) }()
	wait.Until(t, "the second check waiting", func() bool { return c.waiters(key) == 1 })
	cancel()
	time.Sleep(10 * time.Millisecond) // the call would end now, were it cancelled
	close(release)
	if v := <-leader; !v.Unavailable || !errors.Is(v.Err, context.Canceled) {
		t.Errorf("leader: %+v, want its caller gone", v)
	}
	if v := <-follower; v.Action != ActionPass || v.Err != nil {
		t.Errorf("follower: %+v, want the service's pass", v)
	}
	if calls := svc.calls.Load(); calls != 1 {
		t.Fatalf("%d calls", calls)
	}
}

// TestCheckStartsNoGoroutine: once the transport holds a kept-alive
// connection to the service, checks one after another start no goroutine
// (the runtime's count of goroutines created stays where it was): the
// call runs on the checking goroutine, over the shared connection. The
// service here is one goroutine serving one connection, so that its own
// goroutines do not count.
func TestCheckStartsNoGoroutine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go serveOneConnection(ln, passAnswer)
	c := newChecker(t, Config{URL: "http://" + ln.Addr().String()})
	check := func(i int) {
		if v := c.Check(context.Background(), []byte(strconv.Quote("text "+strconv.Itoa(i)))); v.Action != ActionPass {
			t.Fatalf("check %d: %+v", i, v)
		}
	}
	check(-1) // dials the connection: the transport's read and write loops
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	const n = 50
	for i := range n {
		check(i)
	}
	metrics.Read(sample)
	if created := sample[0].Value.Uint64() - before; created > 2 {
		t.Fatalf("%d goroutines created for %d checks over a kept-alive connection, want none of their own", created, n)
	}
}
