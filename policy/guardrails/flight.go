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
	// abandoned, guarded by flights.mu, is set when the leader's caller
	// went away with nobody waiting and the call was cancelled for it: its
	// failure then says nothing of the service.
	abandoned bool
}

// errLeaderLeft is the answer of a call cancelled because its leader's
// caller went away with nobody else waiting for it: not the service's
// failure, and nobody reads it.
var errLeaderLeft = errors.New("guardrails: the caller went away")

// errCheckTimedOut is the cause of a check's context ending at the check's
// own deadline (the configured timeout from its start), as opposed to its
// caller's context ending: the first is the service not answering in time,
// the second the caller going away.
var errCheckTimedOut = errors.New("guardrails: the check's timeout passed")

// call asks the service about msgs (under key), or waits for the identical
// call under way, and returns what it said; the caller reads ctx's end
// first. ctx is the check's, ending at deadline with errCheckTimedOut as
// its cause, or earlier when the check's caller goes away. The call is
// bounded by deadline (the leader's), and by the leader's caller while no
// other check waits for it: a waiting check returns once its ctx is done,
// the leader once the call is (at once when it was alone and its caller
// went away).
//
// Whether the service is failing is noted from every call's answer but an
// abandoned one, whichever goroutine runs it: the check's own deadline
// passing is the service failing, never the caller going away, though
// ctx ends with it (and may end a moment before the call's own timer).
func (c *Checker) call(ctx context.Context, deadline time.Time, key string, msgs []Message) (assessment, error) {
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
	// the others, so it is bounded by the leader's deadline, and cancelled
	// with the leader's context only when that context ended before its
	// deadline (the caller went away) and nobody else waits.
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if context.Cause(ctx) == errCheckTimedOut {
			return // the call's own deadline is the same
		}
		fs.mu.Lock()
		f.abandoned = f.waiters == 0
		abandoned := f.abandoned
		fs.mu.Unlock()
		if abandoned {
			cancel()
		}
	})
	a, err := c.ask(callCtx, msgs)
	stop()
	fs.mu.Lock()
	abandoned := f.abandoned
	fs.mu.Unlock()
	if err != nil && abandoned {
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
