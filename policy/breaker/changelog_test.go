package breaker

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// With the upstream down and many junk model names (500 here, within
// MaxModels so that no eviction blurs the count; 3,000 made 3,001 lines),
// the log holds LogBurst "circuit breaker opened" lines and one summary
// per interval with the count of the rest. The next interval starts
// afresh, and closes are budgeted apart from opens. The clock is
// synctest's: the intervals pass without waiting.
func TestStateChangeLogBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const junk = 500
		// Settings of its own: a table no other test shares.
		s, logs := newSet(t, Config{Failures: 1, OpenFor: caddy.Duration(37 * time.Second), HalfOpen: 1})
		opened := func() int { return logs.FilterMessage("circuit breaker opened").Len() }
		summaries := func(msg string) []observer.LoggedEntry { return logs.FilterMessage(msg).All() }

		for i := range junk {
			forward(s, fmt.Sprintf("junk-%d", i), 529)
		}
		if n := opened(); n != LogBurst {
			t.Errorf("%d 'circuit breaker opened' lines for %d models in one interval, want %d", n, junk, LogBurst)
		}
		if got := summaries("more circuit breakers opened"); len(got) != 0 {
			t.Fatalf("a summary before the interval ended: %v", got)
		}

		time.Sleep(LogInterval)
		synctest.Wait()
		got := summaries("more circuit breakers opened")
		if len(got) != 1 {
			t.Fatalf("%d summaries after the interval, want 1", len(got))
		}
		if f := got[0].ContextMap(); got[0].Level != zapcore.WarnLevel || f["count"] != int64(junk-LogBurst) || f["interval"] != LogInterval {
			t.Errorf("summary %v %v, want warn, count %d, interval %v", got[0].Level, f, junk-LogBurst, LogInterval)
		}

		// A new interval: the first opens are logged one by one again, and
		// an interval with nothing held back has no summary.
		for i := range 3 {
			forward(s, fmt.Sprintf("late-%d", i), 529)
		}
		if n := opened(); n != LogBurst+3 {
			t.Errorf("%d opened lines after 3 more in a new interval, want %d", n, LogBurst+3)
		}
		time.Sleep(2 * LogInterval)
		synctest.Wait()
		if n := len(summaries("more circuit breakers opened")); n != 1 {
			t.Errorf("%d summaries after a quiet interval, want still 1", n)
		}

		// Closing has a budget of its own: the 3 late breakers close (3
		// lines), then, an open_for later, 12 more in one interval: 10 are
		// logged and 2 summed up.
		time.Sleep(37 * time.Second)
		for i := range 12 {
			if _, ok := forward(s, fmt.Sprintf("late-%d", i%3), 200); !ok && i < 3 {
				t.Fatalf("probe for late-%d rejected", i)
			}
		}
		for i := range 12 {
			forward(s, fmt.Sprintf("close-%d", i), 529)
		}
		time.Sleep(38 * time.Second) // past open_for
		for i := range 12 {
			forward(s, fmt.Sprintf("close-%d", i), 200)
		}
		closed := logs.FilterMessage("circuit breaker closed").Len()
		if closed != 3+LogBurst {
			t.Errorf("%d closed lines for 3 closes, then 12 in one interval, want %d", closed, 3+LogBurst)
		}
		time.Sleep(LogInterval)
		synctest.Wait()
		if got := summaries("more circuit breakers closed"); len(got) != 1 || got[0].ContextMap()["count"] != int64(12-LogBurst) || got[0].Level != zapcore.InfoLevel {
			t.Errorf("closed summaries %v, want one info line counting %d", got, 12-LogBurst)
		}
	})
}
