package breaker

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Client-chosen model names that the upstream answers 404, or that the
// gateway refuses after Allow (rate limit, guardrails, client gone), create
// no breaker: they cannot crowd out a real version, in this config or the
// next.
func TestJunkModelsTakeNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, Config{})
		for i := range MaxModels {
			if rej, ok := forward(s, fmt.Sprintf("junk-%d", i), 404); !ok {
				t.Fatalf("junk model rejected: %+v", rej)
			}
			refused, _ := s.Allow(fmt.Sprintf("refused-%d", i))
			refused.Cancel()
			gone, _ := s.Allow(fmt.Sprintf("gone-%d", i))
			gone.Done(499, nil)
		}
		if n := s.table.size(); n != 0 {
			t.Fatalf("%d breakers after 3000 junk requests that did not fail, want 0", n)
		}
		if got := s.State("junk-7"); got != "closed" {
			t.Errorf("state of a junk model = %q, want closed (admitted)", got)
		}

		trip(t, s, "service-1.0.1", DefaultFailures)
		wantRejection(t, s, "service-1.0.1", "open", DefaultOpenFor)
		if n := s.table.size(); n != 1 {
			t.Errorf("%d breakers, want 1", n)
		}

		// The reload with the same settings: the open breaker stays open
		// and nothing else came along.
		reloaded, _ := newSet(t, Config{})
		s.Close()
		wantRejection(t, reloaded, "service-1.0.1", "open", DefaultOpenFor)
		trip(t, reloaded, "service-1.0.2", DefaultFailures)
		if n := reloaded.table.size(); n != 2 {
			t.Errorf("%d breakers after the reload, want 2", n)
		}
	})
}

// A full table drops closed breakers, those with nothing to lose first, the
// least recently used next, and keeps the open ones.
func TestFullTableDropsClosedBreakersFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, logs := newSet(t, Config{Failures: 2, OpenFor: caddy.Duration(time.Hour)})
		tick := func() { time.Sleep(time.Millisecond) }

		trip(t, s, "open", 2) // the oldest of all
		tick()
		forward(s, "run", 529) // closed, one failure: the oldest in a run
		tick()
		for i := range MaxModels - 4 {
			forward(s, fmt.Sprintf("filler-%d", i), 502)
			tick()
		}
		forward(s, "recovered", 529) // the newest, but its run is over
		forward(s, "recovered", 200)
		tick()
		forward(s, "warm", 529) // in a run, and asked for again
		tick()
		if n := s.table.size(); n != MaxModels {
			t.Fatalf("%d breakers, want a full table of %d", n, MaxModels)
		}
		if warns := entries(logs, zapcore.WarnLevel); len(warns) != 1 {
			t.Fatalf("warn entries before the table filled = %v, want the one open", warns)
		}

		forward(s, "newcomer", 504)
		if n, want := s.table.size(), MaxModels-evictBatch+1; n != want {
			t.Errorf("%d breakers after the first eviction, want %d", n, want)
		}
		has := func(model string) bool { return s.table.lookup(model) != nil }
		if !has("open") || !has("warm") || !has("newcomer") || !has(fmt.Sprintf("filler-%d", MaxModels-5)) {
			t.Errorf("dropped open %v, warm %v, newcomer %v, newest filler %v; want all kept",
				!has("open"), !has("warm"), !has("newcomer"), !has(fmt.Sprintf("filler-%d", MaxModels-5)))
		}
		if has("recovered") || has("run") || has("filler-0") || has(fmt.Sprintf("filler-%d", evictBatch-3)) {
			t.Errorf("kept recovered %v, run %v, filler-0 %v, filler-%d %v; want the idle closed ones dropped",
				has("recovered"), has("run"), has("filler-0"), evictBatch-3, has(fmt.Sprintf("filler-%d", evictBatch-3)))
		}
		if !has(fmt.Sprintf("filler-%d", evictBatch-2)) {
			t.Errorf("dropped filler-%d: more than %d breakers", evictBatch-2, evictBatch)
		}
		if rej, ok := forward(s, "open", 200); ok || rej.State != "open" {
			t.Errorf("open breaker admitted after the eviction (%+v)", rej)
		}

		// Many new failing models: the table never grows past its bound,
		// the open breaker stays, and the warm model keeps its run.
		for i := range 3 * MaxModels {
			forward(s, fmt.Sprintf("junk-%d", i), 502)
			warm, _ := s.Allow("warm")
			warm.Cancel()
			tick()
			if n := s.table.size(); n > MaxModels {
				t.Fatalf("%d breakers, over the bound of %d", n, MaxModels)
			}
		}
		if rej, ok := forward(s, "open", 200); ok || rej.State != "open" {
			t.Errorf("open breaker admitted after %d new failing models (%+v)", 3*MaxModels, rej)
		}
		forward(s, "warm", 529)
		if got := s.State("warm"); got != "open" {
			t.Errorf("warm model's state %q after its second failure, want open", got)
		}
		if n := len(logs.FilterMessageSnippet("too many models").All()); n != 1 {
			t.Errorf("%d 'too many models' entries, want 1", n)
		}
	})
}

// An open breaker goes only when every breaker is open or half-open, one at
// a time, the least recently asked for first: a new failing model always
// gets a breaker.
func TestTableOfOpenBreakersDropsTheIdlestOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(time.Hour)})
		for i := range MaxModels {
			forward(s, fmt.Sprintf("open-%d", i), 502)
			time.Sleep(time.Millisecond)
		}
		wantRejection(t, s, "open-0", "open", time.Hour-time.Duration(MaxModels)*time.Millisecond)
		trip(t, s, "newcomer", 1)
		if n := s.table.size(); n != MaxModels {
			t.Errorf("%d breakers, want %d", n, MaxModels)
		}
		if s.table.lookup("open-0") == nil || s.table.lookup("open-1") != nil {
			t.Errorf("open-0 (asked for again) dropped %v, open-1 (idlest) kept %v; want neither",
				s.table.lookup("open-0") == nil, s.table.lookup("open-1") != nil)
		}
		if rej, ok := forward(s, "open-1", 200); !ok {
			t.Errorf("dropped model still rejected: %+v", rej)
		}
	})
}

// A ticket handed out while its model had no breaker counts its failure in
// the breaker's first closed period only, as gobreaker counts a result only
// in the generation that admitted it.
func TestTicketFromBeforeTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, logs := newSet(t, Config{Failures: 2, OpenFor: caddy.Duration(10 * time.Second)})

		early, _ := s.Allow("m")
		forward(s, "m", 529)
		early.Done(529, nil) // the second failure of the run
		wantRejection(t, s, "m", "open", 10*time.Second)

		late, _ := s.Allow("n")
		trip(t, s, "n", 2)
		late.Done(502, nil) // open already: adds nothing
		time.Sleep(10*time.Second + time.Millisecond)
		forward(s, "n", 200)
		older, _ := s.Allow("x")
		trip(t, s, "x", 2)
		time.Sleep(10*time.Second + time.Millisecond)
		forward(s, "x", 200) // x closed again, a new period
		older.Done(502, nil) // admitted before x's outage: not counted
		forward(s, "x", 529)
		if got := s.State("x"); got != "closed" {
			t.Errorf("x state %q: a failure admitted before its outage counted after it", got)
		}
		if got := s.State("n"); got != "closed" {
			t.Errorf("n state %q, want closed", got)
		}

		// Many tickets fail at once: one breaker, opened once.
		var tickets []*Ticket
		for range 64 {
			ticket, _ := s.Allow("y")
			tickets = append(tickets, ticket)
		}
		var wg sync.WaitGroup
		for _, ticket := range tickets {
			wg.Go(func() { ticket.Done(503, nil) })
		}
		wg.Wait()
		if got := s.State("y"); got != "open" {
			t.Errorf("y state %q after 64 failures, want open", got)
		}
		if n := len(logs.Filter(func(e observer.LoggedEntry) bool {
			return e.Message == "circuit breaker opened" && e.ContextMap()["model"] == "y"
		}).All()); n != 1 {
			t.Errorf("%d open entries for y, want 1", n)
		}
	})
}

// Two Sets with the same settings (a reload that leaves the breaker block as
// it was) share breakers; different settings do not, and once no Set has the
// settings, the next one starts afresh.
func TestReloadSharesStateOnlyWithSameSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Failures: 2, OpenFor: caddy.Duration(time.Minute)}
		a, _ := newSet(t, cfg)
		b, _ := newSet(t, cfg)
		other, _ := newSet(t, Config{Failures: 2, OpenFor: caddy.Duration(2 * time.Minute)})
		if a.table != b.table || a.table == other.table {
			t.Fatalf("tables: same settings shared %v, different settings shared %v; want true, false",
				a.table == b.table, a.table == other.table)
		}

		// One run of failures, counted across both configs.
		forward(a, "m", 529)
		forward(b, "m", 529)
		wantRejection(t, a, "m", "open", time.Minute)
		wantRejection(t, b, "m", "open", time.Minute)
		if rej, ok := forward(other, "m", 200); !ok || other.State("m") != "closed" {
			t.Errorf("other settings: %+v, state %q; want admitted, closed", rej, other.State("m"))
		}
		trip(t, other, "n", 2)
		if rej, ok := forward(a, "n", 200); !ok {
			t.Errorf("n opened under other settings rejected here: %+v", rej)
		}

		// A ticket of a closed config still counts in the shared table.
		inFlight, _ := a.Allow("p")
		forward(b, "p", 529)
		a.Close()
		inFlight.Done(529, nil)
		wantRejection(t, b, "p", "open", time.Minute)
		wantRejection(t, b, "m", "open", time.Minute)

		b.Close()
		fresh, _ := newSet(t, cfg)
		if fresh.table == a.table || fresh.table.size() != 0 {
			t.Fatalf("a Set after every Set with its settings closed got the old table (%d breakers)", fresh.table.size())
		}
		if rej, ok := forward(fresh, "m", 200); !ok {
			t.Errorf("fresh table rejected: %+v", rej)
		}
		// A late ticket of the dropped table creates nothing.
		if inFlight.table.size() != 0 {
			t.Errorf("dropped table holds %d breakers", inFlight.table.size())
		}
	})
}

// gauge scrapes systemone_breaker_state and returns the series for the
// models named with prefix.
func gauge(t *testing.T, reg *prometheus.Registry, prefix string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	got := make(map[string]float64)
	for _, f := range families {
		if f.GetName() != "systemone_breaker_state" {
			continue
		}
		for _, m := range f.GetMetric() {
			if model := m.GetLabel()[0].GetValue(); strings.HasPrefix(model, prefix) {
				got[model] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

func TestStateMetric(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(StateCollector())
		if err := reg.Register(StateCollector()); err == nil {
			t.Errorf("registering twice: no error, want AlreadyRegisteredError")
		}

		s, _ := newSet(t, Config{Failures: 2, OpenFor: caddy.Duration(time.Minute)})
		for i := range 100 {
			forward(s, fmt.Sprintf("metric-junk-%d", i), 404)
		}
		trip(t, s, "metric-half", 2)
		time.Sleep(time.Minute + time.Millisecond)
		trip(t, s, "metric-open", 2)
		forward(s, "metric-closed", 529)
		want := map[string]float64{"metric-half": 1, "metric-open": 2, "metric-closed": 0}
		if got := gauge(t, reg, "metric-"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("series %v, want %v", got, want)
		}

		// During a reload that changes the settings, the newer table
		// reports a model both hold, once.
		changed, _ := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(time.Minute)})
		trip(t, changed, "metric-closed", 1)
		want["metric-closed"] = 2
		if got := gauge(t, reg, "metric-"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("series during the reload %v, want %v", got, want)
		}
		s.Close()
		want = map[string]float64{"metric-closed": 2}
		if got := gauge(t, reg, "metric-"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("series after the old config closed %v, want %v", got, want)
		}

		// A dropped model's series goes with it.
		for i := range MaxModels {
			forward(changed, fmt.Sprintf("metric-other-%d", i), 502)
		}
		got := gauge(t, reg, "metric-")
		if _, ok := got["metric-closed"]; ok || len(got) > MaxModels {
			t.Errorf("%d series, metric-closed %v; want at most %d, the idlest open one dropped", len(got), got["metric-closed"], MaxModels)
		}
		changed.Close()
		if got := gauge(t, reg, "metric-"); len(got) != 0 {
			t.Errorf("%d series after every Set closed, want 0", len(got))
		}
	})
}
