package guardrails

import (
	"context"
	"errors"
	"sync"
	"time"
)

// flights are the calls to the service under way, by cache key, so that
// identical concurrent checks share one. Unlike a group that runs each call
// on a goroutine of its own, the first check (the leader) asks the service
// on its own goroutine, and the others wait for its answer: a check starts
// no goroutine, and uses one of the transport's kept-alive connections to
// the service, shared with every other check.
type flights struct {
	mu    sync.Mutex
	calls map[string]*flight
}

// flight is one call to the service.
type flight struct {
	done chan struct{} // closed once a and err are set
	a    assessment
	err  error
	// waiters are the checks waiting for it besides the leader, guarded
	// by flights.mu: while there are any, the leader's caller going away
	// does not cancel the call.
	waiters int
}

// errLeaderLeft is the answer of a call cancelled because its leader's
// caller went away with nobody else waiting for it: not the service's
// failure, and nobody reads it.
var errLeaderLeft = errors.New("guardrails: the caller went away")

// call asks the service about msgs (under key), or waits for the identical
// call under way, and returns what it said; the caller reads ctx's end
// first. The call is bounded by the timeout, and by the leader's ctx while
// no other check waits for it: a waiting check returns once its ctx is
// done, the leader once the call is (at once when it was alone).
func (c *Checker) call(ctx context.Context, key string, msgs []Message) (assessment, error) {
	fs := &c.flights
	fs.mu.Lock()
	for {
		f, ok := fs.calls[key]
		if !ok {
			break
		}
		f.waiters++
		fs.mu.Unlock()
		select {
		case <-f.done:
			if f.err != errLeaderLeft {
				return f.a, f.err
			}
			// Its leader's caller left as this check came: ask again.
		case <-ctx.Done():
			fs.mu.Lock()
			f.waiters--
			fs.mu.Unlock()
			return assessment{}, ctx.Err()
		}
		fs.mu.Lock()
	}
	if fs.calls == nil {
		fs.calls = make(map[string]*flight)
	}
	f := &flight{done: make(chan struct{})}
	fs.calls[key] = f
	fs.mu.Unlock()

	// The call is shared: the leader's caller going away must not fail
	// the others, so it is bounded by the timeout, and cancelled with the
	// leader's context only when nobody else waits.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(c.cfg.Timeout))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		fs.mu.Lock()
		alone := f.waiters == 0
		fs.mu.Unlock()
		if alone {
			cancel()
		}
	})
	a, err := c.ask(callCtx, msgs)
	if !stop() && ctx.Err() != nil && errors.Is(callCtx.Err(), context.Canceled) {
		err = errLeaderLeft // cancelled here: nothing to note of the service
	} else {
		c.noteHealth(err)
		if err == nil && c.cache != nil {
			c.cache.set(callCtx, key, a)
		}
	}
	fs.mu.Lock()
	delete(fs.calls, key)
	f.a, f.err = a, err
	fs.mu.Unlock()
	close(f.done)
	return a, err
}
