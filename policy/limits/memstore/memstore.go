// Package memstore is the limits' in-process store: organizations'
// buckets, holds and budgets in sharded maps, decided with the arithmetic
// of package store under a shard's lock. It is the store without Redis,
// and with Redis the holds this instance knows of and, with on_store_error
// local, the fallback. Stores are shared by key prefix through a usage
// pool, so that buckets survive config reloads.
package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// stores holds the in-process buckets across config reloads, one store
// per key prefix (the same namespace the Redis keys use). A store holds
// levels only; each admission brings the limits of the config that asks.
var stores = caddy.NewUsagePool()

// Acquire returns the in-process store of prefix, shared by every config
// with that prefix, made if there is none. Closing the returned store
// releases this use of it; the last release stops it.
func Acquire(prefix string) store.Store {
	v, _, _ := stores.LoadOrNew(prefix, func() (caddy.Destructor, error) {
		return New(), nil
	})
	var once sync.Once
	return ref{v.(*Store), func() error {
		var err error
		once.Do(func() { _, err = stores.Delete(prefix) })
		return err
	}}
}

// ref is one config's use of a shared store.
type ref struct {
	*Store
	release func() error
}

// Close releases this use of the store.
func (r ref) Close() error { return r.release() }

const (
	nShards = 32
	// sweepEvery is how often the janitor forgets full buckets.
	sweepEvery = time.Minute
)

// Store is an in-process store. It is safe for concurrent use.
type Store struct {
	seed   maphash.Seed
	shards [nShards]shard
	// latest is the latest time an operation brought (microseconds): the
	// janitor's clock, so that it agrees with the limiters' clocks.
	latest    atomic.Int64
	done      chan struct{}
	closeOnce sync.Once
}

type shard struct {
	mu   sync.Mutex
	orgs map[string]*entry
}

type entry struct {
	req, tok  store.Stored
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
	expires  int64 // microseconds: the period's end plus store.PeriodMargin
	spent    int64 // nano-yuan
	reserved []reservation
}

// reservation is what the requests admitted in one minute reserved.
type reservation struct{ slot, amount int64 }

// spend returns the state of period, or nil.
func (e *entry) spend(period string) *spendState {
	for i := range e.spends {
		if e.spends[i].period == period {
			return &e.spends[i]
		}
	}
	return nil
}

// lapse forgets the reservations filed before the lease of slot's minute.
func (s *spendState) lapse(slot int64) {
	s.reserved = slices.DeleteFunc(s.reserved, func(r reservation) bool { return r.slot <= slot-store.LeaseSlots })
}

func (s *spendState) live() int64 {
	var sum int64
	for _, r := range s.reserved {
		sum += r.amount
	}
	return sum
}

// Admit implements store.Store: in process it never fails. A hold this
// instance knows of is in the store already (held is not needed).
func (s *Store) Admit(_ context.Context, org string, c store.Check, _ int64, at time.Time) (store.Outcome, error) {
	return s.admitAt(org, c, store.Micros(at), at.UnixMicro()), nil
}

// Settle implements store.Store: at once.
func (s *Store) Settle(org string, st store.Settlement, at time.Time) {
	s.settleAt(org, st.Req, st.Tok, st.Delta*store.Unit, st.Spend, store.Micros(at), at.UnixMicro())
}

// Hold implements store.Store.
func (s *Store) Hold(org string, d time.Duration, at time.Time) {
	now := store.Micros(at)
	s.holdAt(org, now+d.Microseconds(), now)
}

// HoldWait implements store.Store.
func (s *Store) HoldWait(org string, at time.Time) int64 { return s.holdWaitAt(org, store.Micros(at)) }

// Up implements store.Store: the process is always there.
func (s *Store) Up() bool { return true }

// Stats implements store.Store: nothing is ever left unsent.
func (s *Store) Stats() store.Stats { return store.Stats{} }

// New returns a store of its own, not shared by prefix (Acquire shares
// one); Close stops it.
func New() *Store {
	s := &Store{seed: maphash.MakeSeed(), done: make(chan struct{})}
	for i := range s.shards {
		s.shards[i].orgs = make(map[string]*entry)
	}
	go s.janitor()
	return s
}

// Close implements store.Store: it stops the janitor. The buckets stay
// readable. Calling it again does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	return nil
}

// Destruct implements caddy.Destructor: the last use of a shared store is
// released.
func (s *Store) Destruct() error { return s.Close() }

// janitor forgets the organizations whose buckets are full again, so that
// organizations seen once do not stay forever.
func (s *Store) janitor() {
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

func (s *Store) sweep(now int64) {
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
func (s *Store) with(org string, now int64, fn func(*entry) *entry) {
	// Written at most once a second: a shared cache line written on every
	// admission would cost more than the sweep it serves.
	if now > s.latest.Load()+1_000_000 {
		s.latest.Store(now) // a lost race only delays a sweep
	}
	sh := &s.shards[maphash.String(s.seed, org)%nShards]
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

func (s *Store) admitAt(org string, c store.Check, now, wall int64) store.Outcome {
	var o store.Outcome
	s.with(org, now, func(e *entry) *entry {
		if e == nil {
			e = &entry{}
		}
		var req, tok int64
		if c.Req.On() {
			req = store.Refill(c.Req, e.req, now)
		}
		if c.Tok.On() {
			tok = store.Refill(c.Tok, e.tok, now)
		}
		var sp *spendState
		if c.Budget.On() {
			// In process the limiter's clock is the store's: the period
			// is the one that holds it.
			o.Period, o.Slot = 1, wall/store.SlotMicros
			if sp = e.spend(c.Budget.Periods[1].Name); sp != nil {
				sp.lapse(o.Slot)
				o.Spent, o.Reserved = sp.spent, sp.live()
			}
			o.BudgetRefused = c.Budget.Cost >= 0 && o.Spent+o.Reserved >= c.Budget.Limit
		}
		if o.BudgetRefused {
			// The request counts one request, as the gateway's own
			// answers do, and changes nothing else.
			if c.UsesReq() {
				if o.ReqWait = store.WaitFor(c.Req, req, c.ReqCost); o.ReqWait == 0 {
					req -= c.ReqCost
					e.req = store.Stored{Level: req, At: now, Known: true}
				}
			}
			o.Req, o.Tok = req, tok
			return e.keep(c.Req, c.Tok, req, tok, now)
		}
		if c.Hold && e.holdUntil > now {
			o.HoldWait = e.holdUntil - now
		}
		if c.UsesReq() {
			o.ReqWait = store.WaitFor(c.Req, req, c.ReqCost)
		}
		if c.UsesTok() {
			o.TokWait = store.WaitFor(c.Tok, tok, c.TokCost)
		}
		o.Allowed = o.HoldWait == 0 && o.ReqWait == 0 && o.TokWait == 0
		if !o.Allowed && o.ReqWait == 0 && c.UsesReq() {
			// Refused by the tokens or a hold: the request still counts
			// one request, as every request does (see redisstore's admitBody).
			req -= c.ReqCost
			e.req = store.Stored{Level: req, At: now, Known: true}
		}
		if o.Allowed {
			if c.UsesReq() {
				req -= c.ReqCost
				e.req = store.Stored{Level: req, At: now, Known: true}
			}
			if c.UsesTok() {
				tok -= c.TokCost
				e.tok = store.Stored{Level: tok, At: now, Known: true}
			}
			if c.Budget.On() && c.Budget.Cost > 0 {
				if sp == nil {
					p := c.Budget.Periods[1]
					e.spends = append(e.spends, spendState{period: p.Name, expires: store.Micros(p.End) + store.PeriodMargin.Microseconds()})
					sp = &e.spends[len(e.spends)-1]
				}
				if n := len(sp.reserved); n > 0 && sp.reserved[n-1].slot == o.Slot {
					sp.reserved[n-1].amount += c.Budget.Cost
				} else {
					sp.reserved = append(sp.reserved, reservation{o.Slot, c.Budget.Cost})
				}
				o.Reserved += c.Budget.Cost
			}
		}
		o.Req, o.Tok = req, tok
		return e.keep(c.Req, c.Tok, req, tok, now)
	})
	return o
}

// settle charges delta units to org's token bucket (a refund when
// negative), and settles a budget reservation if sp is set.
func (s *Store) settleAt(org string, req, tok store.Spec, delta int64, sp *store.SpendSettle, now, wall int64) {
	if !tok.On() && sp == nil {
		return
	}
	s.with(org, now, func(e *entry) *entry {
		if e == nil {
			e = &entry{}
		}
		var r, t int64
		if req.On() {
			r = store.Refill(req, e.req, now)
		}
		if tok.On() {
			t = store.Refill(tok, e.tok, now)
			if delta != 0 {
				t = store.Settled(tok, t, delta)
				e.tok = store.Stored{Level: t, At: now, Known: true}
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
// unless it ended more than store.PeriodMargin ago.
func (e *entry) settleSpend(sp store.SpendSettle, wall int64) {
	st := e.spend(sp.Period)
	if st == nil {
		if sp.Charge <= 0 || sp.End+store.PeriodMargin.Microseconds() <= wall {
			return
		}
		e.spends = append(e.spends, spendState{period: sp.Period, expires: sp.End + store.PeriodMargin.Microseconds()})
		st = &e.spends[len(e.spends)-1]
	}
	st.spent = min(st.spent+max(sp.Charge, 0), store.MaxSpent)
	for i := range st.reserved {
		if r := &st.reserved[i]; r.slot == sp.Slot {
			if r.amount -= sp.Release; r.amount <= 0 {
				st.reserved = slices.Delete(st.reserved, i, i+1)
			}
			break
		}
	}
}

// hold refuses org's evaluations until the given microsecond.
func (s *Store) holdAt(org string, until, now int64) {
	s.with(org, now, func(e *entry) *entry {
		if e == nil {
			e = &entry{expires: now}
		}
		e.holdUntil = max(e.holdUntil, until)
		e.expires = max(e.expires, e.holdUntil)
		return e
	})
}

// holdWait returns the microseconds left on org's hold.
func (s *Store) holdWaitAt(org string, now int64) int64 {
	var wait int64
	s.with(org, now, func(e *entry) *entry {
		if e != nil && e.holdUntil > now {
			wait = e.holdUntil - now
		}
		return e
	})
	return wait
}

// keep sets e's expiry from the levels at now, and drops e if that is now.
// A budget period is kept until store.PeriodMargin after it ends, while it holds
// anything spent or reserved.
func (e *entry) keep(req, tok store.Spec, reqLevel, tokLevel, now int64) *entry {
	e.spends = slices.DeleteFunc(e.spends, func(s spendState) bool {
		return s.expires <= now || s.spent <= 0 && len(s.reserved) == 0
	})
	e.expires = now + max(store.FullIn(req, reqLevel), store.FullIn(tok, tokLevel), e.holdUntil-now)
	for _, s := range e.spends {
		e.expires = max(e.expires, s.expires)
	}
	if e.expires <= now {
		return nil
	}
	return e
}
