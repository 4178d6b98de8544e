// Package drain keeps what a retired config's requests use until the last
// of them is out.
//
// On a reload Caddy cleans up the old config's modules as soon as its
// servers have begun shutting down, not when they have finished: requests
// still in the old handlers (an evaluation call can take seconds) would
// meet closed settlement queues, a closed review queue and a released
// Redis client, and their charges, refunds and review entries would be
// lost. A handler counts its requests through a Gate and hands its
// Cleanup to Retire; the cleanup runs when the last request leaves.
package drain

import "sync/atomic"

const (
	retired  = 1 << 62 // Retire was called
	released = 1 << 61 // the release has run (or is running)
	inFlight = released - 1
)

// Gate counts the requests inside a handler. The zero value is ready; its
// methods are safe for concurrent use and cost an atomic operation or two
// each. A nil *Gate holds nothing: Retire releases at once (a module whose
// Provision never ran), Enter reports true, Exit does nothing.
type Gate struct {
	// state is retired | released | requests in flight. The release is
	// decided in the same atomic step that sees the last request gone, so
	// that no request can enter between the two and find it released.
	state   atomic.Int64
	release func()
}

// Enter counts a request in. It reports false when the gate's release has
// already run: the request reached the retired config after its last
// request had left (a connection the old server was still reading when it
// began shutting down) and meets released resources. Enter must be paired
// with Exit either way.
func (g *Gate) Enter() bool {
	if g == nil {
		return true
	}
	return g.state.Add(1)&released == 0
}

// Exit counts a request out; the last one out of a retired gate starts
// its release on a goroutine of its own: the release may wait on Redis (a
// final flush) or the review queue, and the request's response is not
// finished until its handler returns.
func (g *Gate) Exit() {
	if g == nil {
		return
	}
	for {
		v := g.state.Load()
		n := v - 1
		last := n&retired != 0 && n&released == 0 && n&inFlight == 0
		if last {
			n |= released
		}
		if g.state.CompareAndSwap(v, n) {
			if last {
				go g.release()
			}
			return
		}
	}
}

// Retire hands the gate the release of what its requests use: it runs now,
// before Retire returns, if no request is in flight, else when the last
// one exits. Call it once,
// from Cleanup; a second call does nothing.
func (g *Gate) Retire(release func()) {
	if g == nil {
		release()
		return
	}
	if g.state.Load()&retired != 0 {
		return
	}
	g.release = release // published to the last Exit by the swap below
	for {
		v := g.state.Load()
		n := v | retired
		idle := v&inFlight == 0
		if idle {
			n |= released
		}
		if g.state.CompareAndSwap(v, n) {
			if idle {
				release()
			}
			return
		}
	}
}
