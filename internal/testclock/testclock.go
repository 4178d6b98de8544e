// Package testclock is a clock a test moves itself, for code that takes a
// func() time.Time: safe for concurrent use, and without a monotonic
// reading, so that its times are exactly the wall-clock instants the test
// set (as a Redis script pinned to it sees them).
package testclock

import (
	"sync"
	"time"
)

// Clock is a clock the test moves.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock at t (time.Now() when t is zero).
func New(t time.Time) *Clock {
	if t.IsZero() {
		t = time.Now()
	}
	return &Clock{t: t.Round(0)}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t.Round(0)
	c.mu.Unlock()
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
