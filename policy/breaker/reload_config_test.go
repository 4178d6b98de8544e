package breaker

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestReloadKeepsOpenBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Failures: 2, OpenFor: caddy.Duration(30 * time.Second)}
		core1, logs1 := observer.New(zapcore.DebugLevel)
		old, err := New(cfg, zap.New(core1))
		if err != nil {
			t.Fatal(err)
		}
		trip(t, old, "m", 2)
		time.Sleep(10 * time.Second)

		// The reload: a new Set from the same settings while the old one lives.
		reloaded, logs2 := newSet(t, cfg)
		wantRejection(t, reloaded, "m", "open", 20*time.Second)
		if got := reloaded.State("m"); got != "open" {
			t.Errorf("reloaded state %q, want open", got)
		}

		// A changed setting is a fresh breaker.
		changed, _ := newSet(t, Config{Failures: 3, OpenFor: cfg.OpenFor})
		if rej, ok := forward(changed, "m", 200); !ok {
			t.Errorf("a Set with changed settings rejected: %+v", rej)
		}
		if got := changed.State("m"); got != "closed" {
			t.Errorf("changed-settings state %q, want closed", got)
		}

		old.Close()
		old.Close() // must not release the shared breaker twice
		wantRejection(t, reloaded, "m", "open", 20*time.Second)
		again, _ := newSet(t, cfg)
		wantRejection(t, again, "m", "open", 20*time.Second)
		again.Close()

		// Recovery is logged by the config that is still loaded.
		time.Sleep(20*time.Second + time.Millisecond)
		if rej, ok := forward(reloaded, "m", 200); !ok {
			t.Fatalf("probe rejected after open_for: %+v", rej)
		}
		if got := reloaded.State("m"); got != "closed" {
			t.Fatalf("state %q after the probe, want closed", got)
		}
		if n := len(entries(logs2, zapcore.InfoLevel)); n != 1 {
			t.Errorf("new config logged %d info entries, want 1 (closed)", n)
		}
		if n := len(entries(logs1, zapcore.InfoLevel)); n != 0 {
			t.Errorf("closed config logged %d info entries, want 0", n)
		}

		// Once no Set uses a breaker, the next config gets a fresh one.
		trip(t, reloaded, "m", 2)
		reloaded.Close()
		fresh, _ := newSet(t, cfg)
		if rej, ok := forward(fresh, "m", 200); !ok {
			t.Errorf("breaker outlived every Set that used it: %+v", rej)
		}
	})
}

func TestStateChangesLogToNewestLiveConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Failures: 1, OpenFor: caddy.Duration(time.Second)}
		old, oldLogs := newSet(t, cfg)
		forward(old, "m", 200)
		current, currentLogs := newSet(t, cfg)
		forward(current, "m", 200)

		// During the reload both are live; the old config's request trips it.
		forward(old, "m", 529)
		if got := current.State("m"); got != "open" {
			t.Fatalf("shared breaker state %q in the new config, want open", got)
		}
		if oldLogs.Len() != 0 || len(entries(currentLogs, zapcore.WarnLevel)) != 1 {
			t.Errorf("open logged to old config %d times, to new config %d times; want 0 and 1",
				oldLogs.Len(), len(entries(currentLogs, zapcore.WarnLevel)))
		}

		// A new config that fails to load and is closed hands logging back.
		failed, failedLogs := newSet(t, cfg)
		forward(failed, "m", 200)
		failed.Close()
		time.Sleep(time.Second + time.Millisecond)
		forward(old, "m", 200)
		if failedLogs.Len() != 0 || len(entries(currentLogs, zapcore.InfoLevel)) != 1 {
			t.Errorf("close logged to the closed config %d times, to the live one %d times; want 0 and 1",
				failedLogs.Len(), len(entries(currentLogs, zapcore.InfoLevel)))
		}
	})
}

func TestOverlongModelNamesAreNotCircuitBroken(t *testing.T) {
	s, _ := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(2 * time.Minute)})
	long := strings.Repeat("x", MaxModelLen+1)
	for range 3 {
		if rej, ok := forward(s, long, 529); !ok {
			t.Fatalf("over-long model name rejected: %+v", rej)
		}
	}
	if got := s.State(long); got != "" {
		t.Errorf("state of an over-long model = %q, want empty", got)
	}
	if n := s.table.size(); n != 0 {
		t.Errorf("%d breakers for an over-long model, want 0", n)
	}
	if rej, ok := forward(s, strings.Repeat("x", MaxModelLen), 529); !ok || s.State(strings.Repeat("x", MaxModelLen)) != "open" {
		t.Errorf("a model of exactly MaxModelLen bytes is not circuit-broken (%+v)", rej)
	}
}

// A Set closed by a reload goes on answering from the table the new
// config shares: a request still reaching the old config meets the open
// breaker, and its failure counts there.
func TestClosedSetAnswersFromASharedTable(t *testing.T) {
	cfg := Config{Failures: 2, OpenFor: caddy.Duration(time.Minute)}
	old, _ := newSet(t, cfg)
	trip(t, old, "m", 2)
	fresh, _ := newSet(t, cfg)
	old.Close()
	if _, rej := old.Allow("m"); rej == nil {
		t.Fatal("the closed Set admitted a model whose shared breaker is open")
	}
	if got := old.State("m"); got != "open" {
		t.Errorf("closed Set state %q, want open", got)
	}
	forward(old, "n", 529)
	forward(old, "n", 529)
	if got := fresh.State("n"); got != "open" {
		t.Errorf("failures through the closed Set left the live one's breaker %q, want open", got)
	}
}

// Once no live Set has its settings, a closed Set admits everything.
func TestNilAndClosedSetsAdmitEverything(t *testing.T) {
	var none *Set
	ticket, rej := none.Allow("m")
	if rej != nil || ticket == nil {
		t.Fatalf("nil Set: Allow = %v, %+v; want a ticket", ticket, rej)
	}
	ticket.Done(529, nil)
	ticket.Cancel()
	if got := none.State("m"); got != "" {
		t.Errorf("nil Set state %q, want empty", got)
	}
	none.Close()

	var nilTicket *Ticket
	nilTicket.Done(529, nil)
	nilTicket.Cancel()

	s, _ := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(time.Minute)})
	inFlight, _ := s.Allow("m")
	trip(t, s, "m", 1)
	s.Close()
	inFlight.Done(529, nil) // a ticket outliving its Set is harmless
	for range 3 {
		if rej, ok := forward(s, "m", 529); !ok {
			t.Fatalf("closed Set rejected: %+v", rej)
		}
	}
	if got := s.State("m"); got != "closed" {
		t.Errorf("closed Set state %q, want closed (no breaker left)", got)
	}
}

// BenchmarkAllowOpen measures the rejection path: the cost of answering a
// request for a model whose breaker is open.
func BenchmarkAllowOpen(b *testing.B) {
	s, err := New(Config{Failures: 1, OpenFor: caddy.Duration(time.Hour)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	forward(s, "bench-open", 529)
	b.ReportAllocs()
	for b.Loop() {
		if _, rej := s.Allow("bench-open"); rej == nil {
			b.Fatal("admitted while open")
		}
	}
}

func BenchmarkAllowOpenParallel(b *testing.B) {
	s, err := New(Config{Failures: 1, OpenFor: caddy.Duration(time.Hour)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	forward(s, "bench-open-parallel", 529)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, rej := s.Allow("bench-open-parallel"); rej == nil {
				panic("admitted while open")
			}
		}
	})
}

// BenchmarkAllowDone measures what the breaker adds to every request for a
// model that has never failed (and so has no breaker).
func BenchmarkAllowDone(b *testing.B) {
	s, err := New(Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		ticket, _ := s.Allow("bench-closed")
		ticket.Done(200, nil)
	}
}

// Caddy's order on a reload: the new config is provisioned, the old one is
// cleaned up, and only then does the new one see its first request.
func TestReloadCleanupBeforeFirstRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Failures: 2, OpenFor: caddy.Duration(30 * time.Second)}
		old, _ := newSet(t, cfg)
		trip(t, old, "m", 2)
		reloaded, _ := newSet(t, cfg)
		old.Close()
		wantRejection(t, reloaded, "m", "open", 30*time.Second)
	})
}

// BenchmarkAllowDoneWithBreaker measures a model that has a (closed)
// breaker: one that failed once and recovered.
func BenchmarkAllowDoneWithBreaker(b *testing.B) {
	s, err := New(Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	forward(s, "bench-breaker", 529)
	b.ReportAllocs()
	for b.Loop() {
		ticket, _ := s.Allow("bench-breaker")
		ticket.Done(200, nil)
	}
}
