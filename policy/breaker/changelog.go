package breaker

import (
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
)

// A table logs its breakers' state changes one line each, up to
// LogBurst changes to one state per LogInterval; the changes beyond are
// counted and reported in one line when the interval ends ("more circuit
// breakers opened", count 2990). With the upstream down and thousands of
// junk model names failing, the log then holds at most LogBurst lines per
// state and one summary per interval, instead of one line per model: the
// breakers still open one by one, and the state metric has each.
const (
	LogBurst    = 10
	LogInterval = 10 * time.Second
)

// Messages of the summary lines, by the state the breakers changed to.
var summaryMessages = map[gobreaker.State]string{
	gobreaker.StateOpen:     "more circuit breakers opened",
	gobreaker.StateHalfOpen: "more circuit breakers half-open",
	gobreaker.StateClosed:   "more circuit breakers closed",
}

// changeLog is a table's state-change budget, one window per state.
type changeLog struct {
	logger func() *zap.Logger // the table's current logger

	mu      sync.Mutex
	windows map[gobreaker.State]*changeWindow
}

// changeWindow is the changes to one state within one LogInterval, which
// begins at the first change after the previous window ended.
type changeWindow struct {
	start      time.Time
	logged     int
	suppressed int
	timer      *time.Timer // reports suppressed when the window ends
}

func newChangeLog(logger func() *zap.Logger) *changeLog {
	return &changeLog{logger: logger, windows: make(map[gobreaker.State]*changeWindow)}
}

// allow reports whether a change to state at now is to be logged on its
// own line; if not, it is counted for the window's summary.
func (c *changeLog) allow(state gobreaker.State, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.windows[state]
	if w == nil || !now.Before(w.start.Add(LogInterval)) {
		if w != nil && w.timer != nil && w.timer.Stop() {
			// The window ended a moment before its timer fired: its
			// summary goes out now, before the new window's lines.
			c.summarize(state, w)
		}
		w = &changeWindow{start: now}
		c.windows[state] = w
	}
	if w.logged < LogBurst {
		w.logged++
		return true
	}
	w.suppressed++
	if w.timer == nil {
		w.timer = time.AfterFunc(w.start.Add(LogInterval).Sub(now), func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.summarize(state, w)
		})
	}
	return false
}

// summarize logs the changes w counted and not logged, once. It runs
// under c.mu.
func (c *changeLog) summarize(state gobreaker.State, w *changeWindow) {
	if w.suppressed == 0 {
		return
	}
	level := zap.InfoLevel
	if state == gobreaker.StateOpen {
		level = zap.WarnLevel
	}
	if ce := c.logger().Check(level, summaryMessages[state]); ce != nil {
		ce.Write(zap.Int("count", w.suppressed), zap.Duration("interval", LogInterval), zap.Int("logged", w.logged))
	}
	w.suppressed = 0
}

// stop reports what the windows counted and stops their timers: the table
// is going away.
func (c *changeLog) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for state, w := range c.windows {
		if w.timer != nil && w.timer.Stop() {
			c.summarize(state, w)
		}
	}
}
