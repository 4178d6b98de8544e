package cache

import (
	"context"
	"sync"
	"time"

	"github.com/systemone/systemone-gateway/internal/ttlstore"
)

// Coalescing: identical misses (same scope, org and body) ask the upstream
// once. The first leads a flight; the ones that come while it is at the
// upstream wait for it and take its outcome, without a second lookup:
//
//   - a complete 200 the cache takes: each waiter's hit (whether or not
//     its store succeeded, so a resting Redis still coalesces);
//   - a failure (an upstream 5xx read whole, or the gateway's 502 or 504 for
//     an upstream unreachable or timed out): each waiter answers it at
//     once, as the upstream would have failed it too;
//   - anything else (a 4xx, an answer the cache does not take, a leader
//     whose client left): each waiter goes to the upstream itself, at once.
//
// A waiter never waits longer than its leader's upstream call. Only a
// request entitled to the leader's answer waits: one with the leader's own
// key (the 200 says the upstream accepts it) or one whose key's record says
// the upstream accepted it within the ttl; any other goes to the upstream.
//
// With Redis, a flight whose upstream call lasts over markAfter writes a
// marker under its entry key (refreshed every markEvery, living
// markerTTL), so that identical misses at other instances, which read the
// marker in their lookup's round trip, wait for it too: one request per
// instance polls Redis for the entry or the failure (every pollFirst,
// doubling to pollMax), the others wait for it in process. A marker that
// stops being refreshed (its instance died) releases them within
// markerTTL.

// Bounds of coalescing: at most maxFlights distinct requests are led at
// once per instance (past it a miss leads nothing and nobody waits for
// it), and at most maxFollowers wait for one (past it a miss goes to the
// upstream itself).
const (
	maxFlights   = 10_000
	maxFollowers = 1_000
)

// The markers' times.
const (
	// markAfter is how long a leader's upstream call lasts before its
	// marker is written: a quicker call costs Redis nothing more.
	markAfter = 100 * time.Millisecond
	// markEvery is how often a leader refreshes its marker, which lives
	// markerTTL: a leader whose instance died holds its remote waiters at
	// most that long.
	markEvery = time.Second
	markerTTL = 3 * time.Second
	// pollFirst and pollMax space the polls of a remote waiter.
	pollFirst = 10 * time.Millisecond
	pollMax   = 100 * time.Millisecond
)

// Marker values: a flight under way, or the failure it ended with.
const (
	markerLeading byte = 'l'
	markerFailed  byte = 'f'
)

// markerKey is the store key of the marker of an entry key's flight.
func markerKey(entryKey string) string { return "run:" + entryKey }

// flight is a miss at the upstream that identical requests wait for: here,
// or (remote) at another instance, whose marker one request here polls.
type flight struct {
	done   chan struct{}
	keySum [32]byte // the leading request's key: a waiter with it needs no record
	mark   *marker  // the flight's marker in Redis; nil in process or remote

	// Under Cache.mu.
	followers int

	// The outcome, written once before done closes.
	ended   sync.Once
	answer  *Answer
	failure *Answer
}

// joinSameKey waits for a flight of l's request led with l's own key, if
// one is under way here and has room, and reports whether it did.
func (c *Cache) joinSameKey(ctx context.Context, l *Lookup) bool {
	c.mu.Lock()
	f, ok := c.flights[l.entryKey]
	if !ok || f.keySum != l.asker.KeySum || f.followers >= maxFollowers {
		c.mu.Unlock()
		return false
	}
	f.followers++
	c.mu.Unlock()
	c.await(ctx, l, f)
	return true
}

// coalesce decides what l's miss does: wait for a flight of its request
// under way here (when l may take its answer), else lead one: one that
// polls another instance's marker (remote, when l's key is known), or one
// that goes to the upstream.
func (c *Cache) coalesce(ctx context.Context, l *Lookup, remote []byte) {
	c.mu.Lock()
	if f, ok := c.flights[l.entryKey]; ok {
		if !(f.keySum == l.asker.KeySum || l.known) || f.followers >= maxFollowers {
			c.mu.Unlock()
			return
		}
		f.followers++
		c.mu.Unlock()
		c.await(ctx, l, f)
		return
	}
	if len(c.flights) >= maxFlights {
		c.mu.Unlock()
		return
	}
	f := &flight{done: make(chan struct{}), keySum: l.asker.KeySum}
	c.flights[l.entryKey] = f
	l.leads = f
	polls := len(remote) > 0 && remote[0] == markerLeading && l.known
	if !polls && c.marks != nil {
		f.mark = c.startMarker(l.entryKey)
	}
	c.mu.Unlock()
	if polls {
		c.pollRemote(ctx, l)
	}
}

// await waits for f to end (or for ctx) and takes its outcome.
func (c *Cache) await(ctx context.Context, l *Lookup, f *flight) {
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	select {
	case <-f.done:
	case <-ctx.Done():
		return
	}
	switch {
	case f.answer != nil:
		l.answer, l.hit = *f.answer, true
	case f.failure != nil:
		l.failure = f.failure
	}
}

// end gives the flight l leads its outcome, once: its waiters take it now.
// The flight stays joinable (a request arriving takes the outcome at
// once) until Done.
func (c *Cache) end(l *Lookup, answer, failure *Answer) {
	if f := l.leads; f != nil {
		f.ended.Do(func() {
			f.answer, f.failure = answer, failure
			close(f.done)
		})
	}
}

// Done ends the flight l leads, if any: waiters that have no outcome yet go
// to the upstream themselves. Calling it again does nothing.
func (c *Cache) Done(l *Lookup) {
	if l == nil || l.leads == nil {
		return
	}
	f := l.leads
	c.end(l, nil, nil)
	c.mu.Lock()
	if c.flights[l.entryKey] == f {
		delete(c.flights, l.entryKey)
	}
	c.mu.Unlock()
	if f.mark != nil {
		f.mark.stop(f.failure)
	}
	l.leads = nil
}

// pollRemote waits for the flight of l's request at another instance,
// leading the identical requests here that wait with it: it polls the
// entry and the marker until the entry is there (a hit, l's key being
// known), the marker says the flight failed (its failure), or the marker
// is gone (the leader ended without an answer, or its instance died: l goes
// to the upstream). A Redis that fails or rests reads as no marker.
func (c *Cache) pollRemote(ctx context.Context, l *Lookup) {
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	defer c.Done(l)
	t := time.NewTimer(pollFirst)
	defer t.Stop()
	for every := pollFirst; ; every = min(2*every, pollMax) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		values := c.store.Get(ctx, l.entryKey, markerKey(l.entryKey))
		if c.entryFor(l, values[0]) {
			c.end(l, &l.answer, nil)
			return
		}
		switch m := values[1]; {
		case len(m) > 0 && m[0] == markerFailed:
			if _, reject, a, err := decode(m[1:]); err == nil {
				a.Reject = reject
				l.failure = &a
				c.end(l, nil, &a)
			}
			return
		case len(m) == 0 || m[0] != markerLeading:
			return
		}
		t.Reset(every)
	}
}

// marker is the Redis marker of a flight led here: written once the
// upstream call lasts markAfter, refreshed every markEvery, and at the end
// replaced by the failure (for markerTTL) or deleted.
type marker struct {
	marks ttlstore.Store
	key   string

	mu      sync.Mutex // one write at a time, in order
	timer   *time.Timer
	written bool
	stopped bool
}

func (c *Cache) startMarker(entryKey string) *marker {
	m := &marker{marks: c.marks, key: markerKey(entryKey)}
	m.timer = time.AfterFunc(c.markAfter, m.beat)
	return m
}

// beat writes (or refreshes) the marker, unless the flight ended.
func (m *marker) beat() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.marks.Set(context.Background(), ttlstore.Entry{Key: m.key, Value: []byte{markerLeading}})
	m.written = true
	m.timer.Reset(markEvery)
}

// stop ends the marker: a written one is replaced by the flight's failure,
// or deleted, in the background (the leader's client waits for nothing).
func (m *marker) stop(failure *Answer) {
	m.mu.Lock()
	m.stopped = true
	m.timer.Stop()
	written := m.written
	m.mu.Unlock()
	if !written {
		return
	}
	go func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		ctx := context.Background()
		if failure == nil {
			m.marks.Delete(ctx, m.key)
			return
		}
		value := append([]byte{markerFailed}, encode("", failure.Reject, *failure)...)
		m.marks.Set(ctx, ttlstore.Entry{Key: m.key, Value: value})
	}()
}
