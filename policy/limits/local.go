package limits

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// localStores holds the in-process buckets across config reloads, one store
// per key prefix (the same namespace the Redis keys use). A store holds levels
// only; each admission brings the limits of the config that asks.
var localStores = caddy.NewUsagePool()

func acquireLocal(prefix string) (*localStore, func() error) {
	v, _, _ := localStores.LoadOrNew(prefix, func() (caddy.Destructor, error) {
		return newLocalStore(), nil
	})
	var once sync.Once
	return v.(*localStore), func() error {
		var err error
		once.Do(func() { _, err = localStores.Delete(prefix) })
		return err
	}
}

const (
	localShards = 32
	// sweepEvery is how often the janitor forgets full buckets.
	sweepEvery = time.Minute
)

// localStore is the in-process store: the default without Redis, and the
// fallback with Redis and on_store_error local.
type localStore struct {
	seed   maphash.Seed
	shards [localShards]localShard
	// latest is the latest time an operation brought (microseconds): the
	// janitor's clock, so that it agrees with the limiters' clocks.
	latest atomic.Int64
	done   chan struct{}
}

type localShard struct {
	mu   sync.Mutex
	orgs map[string]*localEntry
}

type localEntry struct {
	req, tok  stored
	holdUntil int64 // microseconds
	// expires is when every bucket is full and no hold is left: from then on
	// the entry is indistinguishable from no entry (the Redis keys' PEXPIRE).
	expires int64
}

func newLocalStore() *localStore {
	s := &localStore{seed: maphash.MakeSeed(), done: make(chan struct{})}
	for i := range s.shards {
		s.shards[i].orgs = make(map[string]*localEntry)
	}
	go s.janitor()
	return s
}

// Destruct implements caddy.Destructor: it stops the janitor.
func (s *localStore) Destruct() error {
	close(s.done)
	return nil
}

// janitor forgets the organizations whose buckets are full again, so that
// organizations seen once do not stay forever.
func (s *localStore) janitor() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.sweep(s.latest.Load())
		}
	}
}

func (s *localStore) sweep(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for org, e := range sh.orgs {
			if e.expires <= now {
				delete(sh.orgs, org)
			}
		}
		sh.mu.Unlock()
	}
}

// with runs fn on org's entry (nil if none) under its shard's lock; fn
// returns the entry to keep, nil to forget it.
func (s *localStore) with(org string, now int64, fn func(*localEntry) *localEntry) {
	// Written at most once a second: a shared cache line written on every
	// admission would cost more than the sweep it serves.
	if now > s.latest.Load()+1_000_000 {
		s.latest.Store(now) // a lost race only delays a sweep
	}
	sh := &s.shards[maphash.String(s.seed, org)%localShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.orgs[org]
	if e != nil && e.expires <= now {
		e = nil
	}
	if e = fn(e); e != nil {
		sh.orgs[org] = e
	} else {
		delete(sh.orgs, org)
	}
}

func (s *localStore) admit(org string, c check, now int64) outcome {
	var o outcome
	s.with(org, now, func(e *localEntry) *localEntry {
		if e == nil {
			e = &localEntry{}
		}
		var req, tok int64
		if c.req.on() {
			req = refill(c.req, e.req, now)
		}
		if c.tok.on() {
			tok = refill(c.tok, e.tok, now)
		}
		if c.hold && e.holdUntil > now {
			o.holdWait = e.holdUntil - now
		}
		if c.usesReq() {
			o.reqWait = waitFor(c.req, req, c.reqCost)
		}
		if c.usesTok() {
			o.tokWait = waitFor(c.tok, tok, c.tokCost)
		}
		o.allowed = o.holdWait == 0 && o.reqWait == 0 && o.tokWait == 0
		if o.allowed {
			if c.usesReq() {
				req -= c.reqCost
				e.req = stored{level: req, at: now, known: true}
			}
			if c.usesTok() {
				tok -= c.tokCost
				e.tok = stored{level: tok, at: now, known: true}
			}
		}
		o.req, o.tok = req, tok
		return e.keep(c.req, c.tok, req, tok, now)
	})
	return o
}

// settle charges delta units to org's token bucket (a refund when negative).
func (s *localStore) settle(org string, req, tok spec, delta, now int64) {
	if !tok.on() {
		return
	}
	s.with(org, now, func(e *localEntry) *localEntry {
		if e == nil {
			e = &localEntry{}
		}
		t := settled(tok, refill(tok, e.tok, now), delta)
		e.tok = stored{level: t, at: now, known: true}
		var r int64
		if req.on() {
			r = refill(req, e.req, now)
		}
		return e.keep(req, tok, r, t, now)
	})
}

// hold refuses org's evaluations until the given microsecond.
func (s *localStore) hold(org string, until, now int64) {
	s.with(org, now, func(e *localEntry) *localEntry {
		if e == nil {
			e = &localEntry{expires: now}
		}
		e.holdUntil = max(e.holdUntil, until)
		e.expires = max(e.expires, e.holdUntil)
		return e
	})
}

// holdWait returns the microseconds left on org's hold.
func (s *localStore) holdWait(org string, now int64) int64 {
	var wait int64
	s.with(org, now, func(e *localEntry) *localEntry {
		if e != nil && e.holdUntil > now {
			wait = e.holdUntil - now
		}
		return e
	})
	return wait
}

// keep sets e's expiry from the levels at now, and drops e if that is now.
func (e *localEntry) keep(req, tok spec, reqLevel, tokLevel, now int64) *localEntry {
	e.expires = now + max(fullIn(req, reqLevel), fullIn(tok, tokLevel), e.holdUntil-now)
	if e.expires <= now {
		return nil
	}
	return e
}
