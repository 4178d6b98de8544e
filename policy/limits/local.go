package limits

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// localStores holds the in-process buckets across config reloads, one store
// per key prefix (the same namespace the Redis keys use). A store holds levels
// only; each admission brings the limits of the config that asks.
var localStores = caddy.NewUsagePool()

func acquireLocal(prefix string) localRef {
	v, _, _ := localStores.LoadOrNew(prefix, func() (caddy.Destructor, error) {
		return newLocalStore(), nil
	})
	var once sync.Once
	return localRef{v.(*localStore), func() error {
		var err error
		once.Do(func() { _, err = localStores.Delete(prefix) })
		return err
	}}
}

// localRef is one Limiter's use of an in-process store: closing it
// releases that use, and the last release stops the store.
type localRef struct {
	*localStore
	release func() error
}

func (r localRef) close() error { return r.release() }

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
	// spends are the organization's budget periods with something spent or
	// reserved: one, two around a boundary.
	spends []spendState
	// expires is when every bucket is full, no hold is left and no period
	// is kept: from then on the entry is indistinguishable from no entry
	// (the Redis keys' PEXPIRE).
	expires int64
}

// spendState is an organization's budget in one period: the Redis hash
// <prefix>{<org>}:budget:<period>.
type spendState struct {
	period   string
	expires  int64 // microseconds: the period's end plus periodMargin
	spent    int64 // nano-yuan
	reserved []reservation
}

// reservation is what the requests admitted in one minute reserved.
type reservation struct{ slot, amount int64 }

// spend returns the state of period, or nil.
func (e *localEntry) spend(period string) *spendState {
	for i := range e.spends {
		if e.spends[i].period == period {
			return &e.spends[i]
		}
	}
	return nil
}

// lapse forgets the reservations filed before the lease of slot's minute.
func (s *spendState) lapse(slot int64) {
	s.reserved = slices.DeleteFunc(s.reserved, func(r reservation) bool { return r.slot <= slot-leaseSlots })
}

func (s *spendState) live() int64 {
	var sum int64
	for _, r := range s.reserved {
		sum += r.amount
	}
	return sum
}

// admit implements store: in process it never fails. A hold this
// instance knows of is in the store already (held is not needed).
func (s *localStore) admit(_ context.Context, org string, c check, _ int64, at time.Time) (outcome, error) {
	return s.admitAt(org, c, micros(at), at.UnixMicro()), nil
}

// settle implements store: at once.
func (s *localStore) settle(org string, st settlement, at time.Time) {
	s.settleAt(org, st.lim.requests(), st.lim.tokens(), st.delta*unit, st.spend, micros(at), at.UnixMicro())
}

// hold implements store.
func (s *localStore) hold(org string, d time.Duration, at time.Time) {
	now := micros(at)
	s.holdAt(org, now+d.Microseconds(), now)
}

// holdWait implements store.
func (s *localStore) holdWait(org string, at time.Time) int64 { return s.holdWaitAt(org, micros(at)) }

// up implements store: the process is always there.
func (s *localStore) up() bool { return true }

// stats implements store: nothing is ever left unsent.
func (s *localStore) stats() Stats { return Stats{} }

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

func (s *localStore) admitAt(org string, c check, now, wall int64) outcome {
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
		var sp *spendState
		if c.budget.on() {
			// In process the limiter's clock is the store's: the period
			// is the one that holds it.
			o.period, o.slot = 1, wall/slotMicros
			if sp = e.spend(c.budget.periods[1].name); sp != nil {
				sp.lapse(o.slot)
				o.spent, o.reserved = sp.spent, sp.live()
			}
			o.budgetRefused = c.budget.cost >= 0 && o.spent+o.reserved >= c.budget.limit
		}
		if o.budgetRefused {
			// The request counts one request, as the gateway's own
			// answers do, and changes nothing else.
			if c.usesReq() {
				if o.reqWait = waitFor(c.req, req, c.reqCost); o.reqWait == 0 {
					req -= c.reqCost
					e.req = stored{level: req, at: now, known: true}
				}
			}
			o.req, o.tok = req, tok
			return e.keep(c.req, c.tok, req, tok, now)
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
		if !o.allowed && o.reqWait == 0 && c.usesReq() {
			// Refused by the tokens or a hold: the request still counts
			// one request, as every request does (see admitScript).
			req -= c.reqCost
			e.req = stored{level: req, at: now, known: true}
		}
		if o.allowed {
			if c.usesReq() {
				req -= c.reqCost
				e.req = stored{level: req, at: now, known: true}
			}
			if c.usesTok() {
				tok -= c.tokCost
				e.tok = stored{level: tok, at: now, known: true}
			}
			if c.budget.on() && c.budget.cost > 0 {
				if sp == nil {
					p := c.budget.periods[1]
					e.spends = append(e.spends, spendState{period: p.name, expires: micros(p.end) + periodMargin.Microseconds()})
					sp = &e.spends[len(e.spends)-1]
				}
				if n := len(sp.reserved); n > 0 && sp.reserved[n-1].slot == o.slot {
					sp.reserved[n-1].amount += c.budget.cost
				} else {
					sp.reserved = append(sp.reserved, reservation{o.slot, c.budget.cost})
				}
				o.reserved += c.budget.cost
			}
		}
		o.req, o.tok = req, tok
		return e.keep(c.req, c.tok, req, tok, now)
	})
	return o
}

// settle charges delta units to org's token bucket (a refund when
// negative), and settles a budget reservation if sp is set.
func (s *localStore) settleAt(org string, req, tok spec, delta int64, sp *spendSettle, now, wall int64) {
	if !tok.on() && sp == nil {
		return
	}
	s.with(org, now, func(e *localEntry) *localEntry {
		if e == nil {
			e = &localEntry{}
		}
		var r, t int64
		if req.on() {
			r = refill(req, e.req, now)
		}
		if tok.on() {
			t = refill(tok, e.tok, now)
			if delta != 0 {
				t = settled(tok, t, delta)
				e.tok = stored{level: t, at: now, known: true}
			}
		}
		if sp != nil {
			e.settleSpend(*sp, wall)
		}
		return e.keep(req, tok, r, t, now)
	})
}

// settleSpend charges the period sp names and releases the reservation's
// part of its minute. A period that has no state is created for a charge,
// unless it ended more than periodMargin ago.
func (e *localEntry) settleSpend(sp spendSettle, wall int64) {
	st := e.spend(sp.period)
	if st == nil {
		if sp.charge <= 0 || sp.end+periodMargin.Microseconds() <= wall {
			return
		}
		e.spends = append(e.spends, spendState{period: sp.period, expires: sp.end + periodMargin.Microseconds()})
		st = &e.spends[len(e.spends)-1]
	}
	st.spent = min(st.spent+max(sp.charge, 0), int64(maxSpent))
	for i := range st.reserved {
		if r := &st.reserved[i]; r.slot == sp.slot {
			if r.amount -= sp.release; r.amount <= 0 {
				st.reserved = slices.Delete(st.reserved, i, i+1)
			}
			break
		}
	}
}

// hold refuses org's evaluations until the given microsecond.
func (s *localStore) holdAt(org string, until, now int64) {
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
func (s *localStore) holdWaitAt(org string, now int64) int64 {
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
// A budget period is kept until periodMargin after it ends, while it holds
// anything spent or reserved.
func (e *localEntry) keep(req, tok spec, reqLevel, tokLevel, now int64) *localEntry {
	e.spends = slices.DeleteFunc(e.spends, func(s spendState) bool {
		return s.expires <= now || s.spent <= 0 && len(s.reserved) == 0
	})
	e.expires = now + max(fullIn(req, reqLevel), fullIn(tok, tokLevel), e.holdUntil-now)
	for _, s := range e.spends {
		e.expires = max(e.expires, s.expires)
	}
	if e.expires <= now {
		return nil
	}
	return e
}
