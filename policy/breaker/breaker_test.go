package breaker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// newSet returns a Set logging at debug level into the returned logs; it is
// closed when the test ends.
func newSet(t *testing.T, cfg Config) (*Set, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := New(cfg, zap.New(core))
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

// forward sends one request for model through s to an upstream answering
// status, and reports whether the breaker let it through.
func forward(s *Set, model string, status int) (*Rejection, bool) {
	ticket, rej := s.Allow(model)
	if rej != nil {
		return rej, false
	}
	ticket.Done(status, nil)
	return nil, true
}

// trip opens model's breaker with failures 529s.
func trip(t *testing.T, s *Set, model string, failures int) {
	t.Helper()
	for i := range failures {
		if rej, ok := forward(s, model, 529); !ok {
			t.Fatalf("request %d of %d rejected while closed: %+v", i+1, failures, rej)
		}
	}
	if got := s.State(model); got != "open" {
		t.Fatalf("after %d failures: state %q, want open", failures, got)
	}
}

func wantRejection(t *testing.T, s *Set, model, state string, retryAfter time.Duration) {
	t.Helper()
	ticket, rej := s.Allow(model)
	if rej == nil {
		ticket.Cancel()
		t.Fatalf("Allow(%q) admitted, want rejected (%s)", model, state)
	}
	if ticket != nil {
		t.Errorf("rejected Allow returned a ticket")
	}
	if rej.State != state || rej.RetryAfter != retryAfter {
		t.Errorf("rejection = %+v, want state %s, retry after %v", *rej, state, retryAfter)
	}
}

// entries are the open and close entries at level; the half-open entry in
// between is checked on its own (halfOpenLogged).
func entries(logs *observer.ObservedLogs, level zapcore.Level) []observer.LoggedEntry {
	return logs.Filter(func(e observer.LoggedEntry) bool {
		return e.Level == level && e.Message != "circuit breaker half-open"
	}).All()
}

func halfOpenLogged(logs *observer.ObservedLogs) int {
	return logs.Filter(func(e observer.LoggedEntry) bool {
		return e.Level == zapcore.InfoLevel && e.Message == "circuit breaker half-open"
	}).Len()
}

func TestNewDefaultsAndValidation(t *testing.T) {
	s, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.table.settings; st.failures != 5 || st.openFor != 30*time.Second || st.halfOpen != 1 {
		t.Errorf("defaults: failures %d, open_for %v, half_open %d; want 5, 30s, 1", st.failures, st.openFor, st.halfOpen)
	}

	s, err = New(Config{Failures: 2, OpenFor: caddy.Duration(time.Minute), HalfOpen: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.table.settings; st.failures != 2 || st.openFor != time.Minute || st.halfOpen != 4 {
		t.Errorf("explicit settings: failures %d, open_for %v, half_open %d; want 2, 1m, 4", st.failures, st.openFor, st.halfOpen)
	}

	// The message names the option once and no block: the caller (the
	// handler, the Caddyfile) puts "breaker: " before it.
	const want = "open_for -1s: want a positive duration"
	if _, err := New(Config{OpenFor: caddy.Duration(-time.Second)}, nil); err == nil || err.Error() != want {
		t.Errorf("negative open_for: New err = %v, want %q", err, want)
	}
	if err := (Config{OpenFor: caddy.Duration(-time.Second)}).Validate(); err == nil || err.Error() != want {
		t.Errorf("negative open_for: Validate err = %v, want %q", err, want)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the defaults: Validate err = %v", err)
	}
}

func TestDefaultSettingsEndToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, Config{})
		for i := range 4 {
			forward(s, "defaults", 529)
			if got := s.State("defaults"); got != "closed" {
				t.Fatalf("after %d failures: state %q, want closed", i+1, got)
			}
		}
		forward(s, "defaults", 529)
		wantRejection(t, s, "defaults", "open", 30*time.Second)

		time.Sleep(30*time.Second + time.Millisecond)
		probe, rej := s.Allow("defaults")
		if rej != nil {
			t.Fatalf("first request after open_for rejected: %+v", rej)
		}
		wantRejection(t, s, "defaults", "half-open", time.Second)
		probe.Done(200, nil)
		if got := s.State("defaults"); got != "closed" {
			t.Errorf("after the probe succeeded: state %q, want closed", got)
		}
	})
}

func TestOpensAfterExactlyFailuresAndAdmitsNoneWhileOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, logs := newSet(t, Config{Failures: 3, OpenFor: caddy.Duration(10 * time.Second)})

		upstreamCalls := 0
		for range 3 {
			if _, ok := forward(s, "m", 529); ok {
				upstreamCalls++
			}
		}
		if upstreamCalls != 3 {
			t.Fatalf("let through %d requests before opening, want 3", upstreamCalls)
		}
		if got := s.State("m"); got != "open" {
			t.Fatalf("state %q after 3 failures, want open", got)
		}

		for range 1000 {
			if _, ok := forward(s, "m", 529); ok {
				upstreamCalls++
			}
		}
		if upstreamCalls != 3 {
			t.Errorf("let through %d requests while open, want 0", upstreamCalls-3)
		}
		wantRejection(t, s, "m", "open", 10*time.Second)

		warns := entries(logs, zapcore.WarnLevel)
		if len(warns) != 1 {
			t.Fatalf("%d warn entries, want exactly 1: %v", len(warns), warns)
		}
		fields := warns[0].ContextMap()
		if warns[0].Message != "circuit breaker opened" || fields["model"] != "m" || fields["failures"] != uint32(3) {
			t.Errorf("open entry = %q %v, want model m and failures 3", warns[0].Message, fields)
		}
		if n := len(entries(logs, zapcore.InfoLevel)); n != 0 {
			t.Errorf("%d info entries while opening, want 0", n)
		}
	})
}

func TestRetryAfterCountsDownToHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(30 * time.Second)})
		trip(t, s, "m", 1)

		wantRejection(t, s, "m", "open", 30*time.Second)
		time.Sleep(12400 * time.Millisecond) // 17.6s left
		wantRejection(t, s, "m", "open", 18*time.Second)
		time.Sleep(17500 * time.Millisecond) // 0.1s left
		wantRejection(t, s, "m", "open", time.Second)
		time.Sleep(100 * time.Millisecond) // exactly open_for: still open
		wantRejection(t, s, "m", "open", time.Second)
		time.Sleep(time.Nanosecond)
		if _, ok := forward(s, "m", 200); !ok {
			t.Fatalf("rejected after open_for, want a probe")
		}
	})
}

func TestRetryAfterRoundsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(1500 * time.Millisecond)})
		trip(t, s, "m", 1)
		wantRejection(t, s, "m", "open", 2*time.Second)
	})
	for _, tt := range []struct{ in, want time.Duration }{
		{-time.Hour, time.Second},
		{0, time.Second},
		{time.Nanosecond, time.Second},
		{time.Second, time.Second},
		{time.Second + time.Nanosecond, 2 * time.Second},
		{59*time.Second + 999*time.Millisecond, time.Minute},
		{1<<63 - 1, maxRetryAfter},
	} {
		if got := ceilSeconds(tt.in); got != tt.want {
			t.Errorf("ceilSeconds(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestHalfOpenAdmitsOnlyHalfOpenProbesUnderConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const openFor = 5 * time.Second
		s, logs := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(openFor), HalfOpen: 3})
		trip(t, s, "m", 1)
		time.Sleep(openFor + time.Millisecond)

		const clients = 64
		var (
			mu         sync.Mutex
			probes     []*Ticket
			rejections []*Rejection
			wg         sync.WaitGroup
		)
		start := make(chan struct{})
		for range clients {
			wg.Go(func() {
				<-start
				ticket, rej := s.Allow("m")
				mu.Lock()
				defer mu.Unlock()
				if rej != nil {
					rejections = append(rejections, rej)
				} else {
					probes = append(probes, ticket)
				}
			})
		}
		close(start)
		wg.Wait()

		if len(probes) != 3 {
			t.Fatalf("%d of %d concurrent requests admitted half-open, want 3", len(probes), clients)
		}
		for _, rej := range rejections {
			if rej.State != "half-open" || rej.RetryAfter != time.Second {
				t.Fatalf("half-open rejection = %+v, want half-open, 1s", *rej)
			}
		}

		// All probes must succeed to close; until then, still no room.
		for i, p := range probes {
			p.Done(200, nil)
			want := "half-open"
			if i == len(probes)-1 {
				want = "closed"
			}
			if got := s.State("m"); got != want {
				t.Fatalf("after %d successful probes: state %q, want %s", i+1, got, want)
			}
		}
		for range 10 {
			if rej, ok := forward(s, "m", 200); !ok {
				t.Fatalf("rejected after recovery: %+v", rej)
			}
		}

		if n := halfOpenLogged(logs); n != 1 {
			t.Errorf("%d half-open info entries, want 1", n)
		}
		infos := entries(logs, zapcore.InfoLevel)
		if len(infos) != 1 || infos[0].Message != "circuit breaker closed" || infos[0].ContextMap()["model"] != "m" {
			t.Errorf("info entries = %v, want one 'circuit breaker closed' for m", infos)
		}
		if got := infos[0].ContextMap()["outage"]; got != openFor+time.Millisecond {
			t.Errorf("outage = %v, want %v", got, openFor+time.Millisecond)
		}
		if n := len(entries(logs, zapcore.WarnLevel)); n != 1 {
			t.Errorf("%d warn entries over one outage, want 1", n)
		}
	})
}

func TestFailedProbeReopensForAnotherOpenFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const openFor = 20 * time.Second
		s, logs := newSet(t, Config{Failures: 2, OpenFor: caddy.Duration(openFor), HalfOpen: 2})
		trip(t, s, "m", 2)
		time.Sleep(openFor + time.Millisecond)

		p1, rej1 := s.Allow("m")
		p2, rej2 := s.Allow("m")
		if rej1 != nil || rej2 != nil {
			t.Fatalf("half-open with 2 slots rejected: %+v %+v", rej1, rej2)
		}
		p1.Done(200, nil)
		p2.Done(503, nil)
		wantRejection(t, s, "m", "open", openFor)

		warns := entries(logs, zapcore.WarnLevel)
		if len(warns) != 2 {
			t.Fatalf("%d warn entries, want 2 (open, re-open)", len(warns))
		}
		if f := warns[1].ContextMap(); f["from"] != "half-open" || f["failures"] != uint32(1) {
			t.Errorf("re-open entry fields = %v, want from half-open, failures 1", f)
		}

		time.Sleep(openFor - time.Second)
		wantRejection(t, s, "m", "open", time.Second)
		time.Sleep(time.Second + time.Millisecond)
		for range 2 {
			if rej, ok := forward(s, "m", 200); !ok {
				t.Fatalf("probe rejected in the second half-open period: %+v", rej)
			}
		}
		if got := s.State("m"); got != "closed" {
			t.Errorf("state %q after two good probes, want closed", got)
		}
	})
}

func TestExcludedProbeFreesItsSlot(t *testing.T) {
	release := map[string]func(*Ticket){
		"Cancel":            func(t *Ticket) { t.Cancel() },
		"Done 499":          func(t *Ticket) { t.Done(499, nil) },
		"Done canceled":     func(t *Ticket) { t.Done(0, context.Canceled) },
		"Done handler 499":  func(t *Ticket) { t.Done(0, caddyhttp.Error(499, context.Canceled)) },
		"Done handler 413 ": func(t *Ticket) { t.Done(0, caddyhttp.Error(413, errors.New("too large"))) },
	}
	for name, free := range release {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, _ := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(time.Second)})
				trip(t, s, "m", 1)
				time.Sleep(time.Second + time.Millisecond)

				probe, rej := s.Allow("m")
				if rej != nil {
					t.Fatalf("first half-open request rejected: %+v", rej)
				}
				wantRejection(t, s, "m", "half-open", time.Second)
				free(probe)
				if got := s.State("m"); got != "half-open" {
					t.Fatalf("state %q after an excluded probe, want half-open", got)
				}
				if rej, ok := forward(s, "m", 200); !ok {
					t.Fatalf("slot not freed by an excluded probe: %+v", rej)
				}
				if got := s.State("m"); got != "closed" {
					t.Errorf("state %q after the replacement probe succeeded, want closed", got)
				}
			})
		})
	}
}

func TestTicketSettlesOnlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, Config{Failures: 2, OpenFor: caddy.Duration(time.Second), HalfOpen: 2})

		// A second Done must not count a second failure.
		ticket, _ := s.Allow("m")
		ticket.Done(529, nil)
		ticket.Done(529, nil)
		ticket.Cancel()
		if got := s.State("m"); got != "closed" {
			t.Fatalf("one ticket settled thrice opened the breaker (state %q)", got)
		}

		// Nor, concurrently, many.
		ticket, _ = s.Allow("m")
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() { ticket.Done(500, nil) })
		}
		wg.Wait()
		if got := s.State("m"); got != "open" {
			t.Fatalf("state %q after the second failure, want open", got)
		}

		// A Cancel after Done must not free a half-open slot.
		time.Sleep(time.Second + time.Millisecond)
		p1, _ := s.Allow("m")
		p2, _ := s.Allow("m")
		if p1 == nil || p2 == nil {
			t.Fatalf("half-open with 2 slots rejected a probe")
		}
		p1.Done(200, nil)
		p1.Cancel()
		wantRejection(t, s, "m", "half-open", time.Second)
		p2.Cancel()
		p2.Cancel()
		p3, rej := s.Allow("m")
		if rej != nil {
			t.Fatalf("slot of the cancelled probe not freed: %+v", rej)
		}
		wantRejection(t, s, "m", "half-open", time.Second)
		p3.Done(200, nil)
		if got := s.State("m"); got != "closed" {
			t.Errorf("state %q after 2 successful probes, want closed", got)
		}
	})
}

func TestTooManyRequestsStormDoesNotOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, logs := newSet(t, Config{Failures: 3, OpenFor: caddy.Duration(time.Minute)})
		for range 1000 {
			if rej, ok := forward(s, "m", 429); !ok {
				t.Fatalf("429 storm opened the breaker: %+v", rej)
			}
		}
		// A 429 (or any 4xx) between failures breaks the run.
		for range 100 {
			forward(s, "m", 529)
			forward(s, "m", 503)
			forward(s, "m", 429)
			forward(s, "m", 404)
		}
		if got := s.State("m"); got != "closed" {
			t.Fatalf("state %q, want closed", got)
		}
		if logs.Len() != 0 {
			t.Errorf("logged %d entries without a state change: %v", logs.Len(), logs.All())
		}
		forward(s, "m", 529)
		forward(s, "m", 502)
		forward(s, "m", 504)
		if got := s.State("m"); got != "open" {
			t.Errorf("state %q after 3 consecutive failures, want open", got)
		}
	})
}

func TestCancellationsDoNotCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newSet(t, Config{Failures: 3, OpenFor: caddy.Duration(time.Minute)})
		forward(s, "m", 529)
		forward(s, "m", 529)
		excluded := []func(*Ticket){
			func(t *Ticket) { t.Cancel() },
			func(t *Ticket) { t.Done(499, nil) },
			func(t *Ticket) { t.Done(0, context.Canceled) },
			func(t *Ticket) { t.Done(0, caddyhttp.Error(499, errors.New("operation was canceled"))) },
		}
		for range 50 {
			for _, settle := range excluded {
				ticket, rej := s.Allow("m")
				if rej != nil {
					t.Fatalf("cancellations opened the breaker: %+v", rej)
				}
				settle(ticket)
			}
		}
		if got := s.State("m"); got != "closed" {
			t.Fatalf("state %q after 2 failures and cancellations, want closed", got)
		}
		// Nor did they reset the run: one more failure is the third.
		forward(s, "m", 529)
		if got := s.State("m"); got != "open" {
			t.Errorf("state %q after the third failure, want open", got)
		}
	})
}

func TestModelsHaveIndependentBreakers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, logs := newSet(t, Config{Failures: 2, OpenFor: caddy.Duration(time.Minute)})
		trip(t, s, "service-latest", 2)
		for range 100 {
			if rej, ok := forward(s, "service-1.0.0", 200); !ok {
				t.Fatalf("service-1.0.0 rejected while only service-latest is open: %+v", rej)
			}
		}
		wantRejection(t, s, "service-latest", "open", time.Minute)
		if got := s.State("service-1.0.0"); got != "closed" {
			t.Errorf("service-1.0.0 state %q, want closed", got)
		}
		if got := s.State("never-asked"); got != "closed" {
			t.Errorf("state of a model never asked for = %q, want closed", got)
		}
		if n := s.table.size(); n != 1 {
			t.Errorf("%d breakers after one model failed, want 1: a model that never failed needs none", n)
		}
		forward(s, "service-1.0.0", 529)
		forward(s, "service-1.0.0", 529)
		if got := s.State("service-1.0.0"); got != "open" {
			t.Errorf("service-1.0.0 state %q after its own failures, want open", got)
		}
		warns := entries(logs, zapcore.WarnLevel)
		if len(warns) != 2 || warns[0].ContextMap()["model"] != "service-latest" || warns[1].ContextMap()["model"] != "service-1.0.0" {
			t.Errorf("warn entries = %v, want one per model", warns)
		}
	})
}
