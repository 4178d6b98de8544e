package redisstore

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/systemone/systemone-gateway/policy/limits/store"
	"go.uber.org/zap"
)

// maxLeases bounds the organizations an instance holds leases for, as
// maxOverLimit does the over-limit table: past it, a newcomer is admitted
// exactly, one round trip per request, until the sweeper frees a slot.
const maxLeases = 100_000

// nShards is the number of lease tables, each with a lock of its own.
const nShards = 32

// minSweepEvery bounds how often the sweeper runs, whatever the interval.
const minSweepEvery = 5 * time.Millisecond

// Leases are the local-allowance mode (local_allowance), a store.Store
// wrapping the Redis store. Per organization, an instance holds at most
// one lease: units of the requests and token buckets that
// leaseBody debited from Redis for it. Admissions spend the lease under a
// mutex, without a round trip. When the lease cannot pay an admission, or
// its interval has passed, the next admission takes a new one in the same
// script that gives the old one's rest back (an exchange: no moment sees
// both or neither), while the admissions that arrive meanwhile wait for
// that one call. A lease nobody spends is given back by the sweeper,
// through the settlement queue; until that flush is answered its units are
// neither here nor in Redis, so the organization's admissions take the
// exact path meanwhile rather than lease again: an instance never holds
// more than one lease's units of an organization outside Redis, which is
// what the documented bound counts on.
// It is safe for concurrent use.
type Leases struct {
	s        *Store
	now      func() time.Time                       // the Limiter's clock
	specs    func(org string) (req, tok store.Spec) // the Limiter's, for give-backs
	share    float64
	interval int64 // µs
	max      int
	adaptive bool // lease only organizations that keep a pace (see LeaseOptions.Adaptive)

	seed   maphash.Seed
	shards [nShards]leaseShard
	size   atomic.Int64

	// taken counts the lease calls that granted something.
	taken atomic.Int64
	// seqs numbers the leases' changes of hands across every entry, so
	// that a lease sequence names one lease of one entry (see
	// store.Outcome.Lease): an entry removed and made anew for the same
	// organization never reuses one.
	seqs atomic.Uint64

	// mu is held for reading by each lease call and for writing by close,
	// so that no lease is taken after close gave the others back.
	mu     sync.RWMutex
	closed bool

	sweepEvery time.Duration
	startOnce  sync.Once
	done       chan struct{}
	wg         sync.WaitGroup
}

type leaseShard struct {
	mu   sync.Mutex
	orgs map[string]*leaseEntry
}

// leaseEntry is one organization's lease on this instance.
type leaseEntry struct {
	mu sync.Mutex
	// dead: the sweeper removed the entry from the table; look it up again.
	dead bool
	// held: the entry holds a lease (perhaps expired): req and tok units
	// are left of it, spendable until until (µs, the limiter's clock).
	held     bool
	req, tok int64
	tokCap   int64 // the token slice: refunds refill the lease to that, no more
	until    int64
	// seq changes whenever the lease's units change hands (a new lease, a
	// give-back), so that Settle corrects only the lease its admission
	// was paid from.
	seq uint64
	// r and t are Redis's levels after the last lease call, at at (µs):
	// with the lease's rest, what the rate-limit headers report.
	r, t, at int64
	// holdUntil is the upstream hold Redis had at the last lease call.
	holdUntil int64
	// taking is set while a lease call is in flight and closed when it is
	// answered; calls counts the answered calls; refused and failed
	// describe the last one, for the admissions that waited for it.
	taking          chan struct{}
	calls           uint64
	refused, failed bool
	// returning: the sweeper queued the lease's rest for Redis, sent by
	// flush number epoch (see Store.flushed).
	returning bool
	epoch     uint64
	// pace counts the organization's admissions (the adaptive mode).
	pace pace
}

// LeaseOptions are the settings of Leases.
type LeaseOptions struct {
	// Share is the part of each bucket's capacity one lease takes
	// (local_allowance's share), Interval how long a lease may be spent.
	Share    float64
	Interval time.Duration
	// Now is the Limiter's clock, which leases expire by.
	Now func() time.Time
	// Specs returns an organization's buckets as the Limiter has them,
	// for the give-backs of the sweeper.
	Specs func(org string) (req, tok store.Spec)
	// SweepEvery is how often the sweeper gives idle leases back: by
	// default half the interval, at least 5ms.
	SweepEvery time.Duration
	// Adaptive leases an organization only while it keeps a pace: this
	// instance admitted at least MinLeaseAdmissions of its requests within
	// the interval under way or the one before, and a slice (Share of each
	// bucket, no floor) pays at least MinLeaseAdmissions of the admission
	// that asks; every other admission is exact. Without it, every
	// organization without a budget is leased, with a requests slice of at
	// least one request.
	Adaptive bool
}

// NewLeases returns leases taken from s, a store.Store that wraps it:
// closing the leases gives their rest back and closes s.
func NewLeases(s *Store, o LeaseOptions) *Leases {
	ls := &Leases{s: s, now: o.Now, specs: o.Specs, share: o.Share, interval: o.Interval.Microseconds(), max: maxLeases, adaptive: o.Adaptive,
		sweepEvery: cmp.Or(o.SweepEvery, max(o.Interval/2, minSweepEvery)), seed: maphash.MakeSeed(), done: make(chan struct{})}
	for i := range ls.shards {
		ls.shards[i].orgs = make(map[string]*leaseEntry)
	}
	return ls
}

// giveBackOne queues org's req and tok units for Redis (see
// Store.giveBack) and returns the number of the flush that sends them.
func (ls *Leases) giveBackOne(org string, req, tok int64) uint64 {
	rs, ts := ls.specs(org)
	return ls.s.giveBack(org, rs, ts, req, tok)
}

// slices returns the units one lease takes of each bucket: share of its
// capacity, at least one request of a requests bucket.
func (ls *Leases) slices(c store.Check) (req, tok int64) {
	if ls.adaptive {
		return ls.adaptiveSlices(c)
	}
	if c.Req.On() {
		req = max(int64(ls.share*float64(c.Req.Capacity)), store.Unit)
	}
	if c.Tok.On() {
		tok = int64(ls.share * float64(c.Tok.Capacity))
	}
	return req, tok
}

// leaseResult says who decides an admission.
type leaseResult uint8

const (
	leaseDone   leaseResult = iota // the lease did: the Decision is the answer
	leaseExact                     // the exact path: no slot, or a give-back in flight
	leaseFailed                    // Redis was needed and failed or is lost: on_store_error
)

// errLeaseFailed is an admission that needed a lease call while Redis
// failed or was lost: on_store_error decides it.
var errLeaseFailed = errors.New("redis lease call failed")

// Admit implements store.Store: from org's lease when it can pay c, taking a
// new lease when needed; exactly, from the Redis store, for an
// organization with a budget (a reservation per request), for a check of
// no bucket, and when leasing would break the bound (see leaseExact).
func (ls *Leases) Admit(ctx context.Context, org string, c store.Check, held int64, at time.Time) (store.Outcome, error) {
	if c.Budget.On() || !c.UsesReq() && !c.UsesTok() {
		return ls.s.Admit(ctx, org, c, held, at)
	}
	o, res := ls.lend(ctx, org, c, held)
	switch res {
	case leaseDone:
		return o, nil
	case leaseExact:
		return ls.s.Admit(ctx, org, c, held, at)
	}
	return store.Outcome{}, errLeaseFailed
}

// Settle implements store.Store: an admission paid from a lease is corrected
// against it first; what the lease does not take (a charge it cannot
// pay, or a refund past its grant) goes to Redis, whole tokens either way.
func (ls *Leases) Settle(org string, st store.Settlement, at time.Time) {
	if st.Lease != 0 && st.Spend == nil {
		if st.Delta = ls.settleLease(org, st.Lease, st.Delta*store.Unit) / store.Unit; st.Delta == 0 {
			return
		}
	}
	ls.s.Settle(org, st, at)
}

// Hold implements store.Store: through Redis; another instance honours it at
// its next lease call, within the interval.
func (ls *Leases) Hold(org string, d time.Duration, at time.Time) { ls.s.Hold(org, d, at) }

// HoldWait implements store.Store.
func (ls *Leases) HoldWait(org string, at time.Time) int64 { return ls.s.HoldWait(org, at) }

// Up implements store.Store.
func (ls *Leases) Up() bool { return ls.s.Up() }

// Stats implements store.Store: Redis's counts and the leases taken.
func (ls *Leases) Stats() store.Stats {
	st := ls.s.Stats()
	st.LeasesTaken = ls.taken.Load()
	return st
}

// Close implements store.Store: what the leases hold goes back to Redis with
// the store's last flush. Calling it again does nothing.
func (ls *Leases) Close() error {
	ls.giveAllBack()
	return ls.s.Close()
}

// lend decides c for org from its lease, taking a new lease when needed.
// held is the hold this instance knows of (µs left).
func (ls *Leases) lend(ctx context.Context, org string, c store.Check, held int64) (store.Outcome, leaseResult) {
	for {
		e := ls.entry(org)
		if e == nil {
			return store.Outcome{}, leaseExact
		}
		if o, res, again := ls.admitFrom(ctx, e, org, c, held); !again {
			return o, res
		}
	}
}

// entry returns org's entry, a new one if there is room, else nil.
func (ls *Leases) entry(org string) *leaseEntry {
	sh := &ls.shards[maphash.String(ls.seed, org)%nShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.orgs[org]; e != nil {
		return e
	}
	if ls.size.Load() >= int64(ls.max) {
		return nil
	}
	e := &leaseEntry{}
	sh.orgs[org] = e
	ls.size.Add(1)
	return e
}

// admitFrom is admit on one entry; again means the entry was removed
// meanwhile: look it up again.
func (ls *Leases) admitFrom(ctx context.Context, e *leaseEntry, org string, c store.Check, held int64) (o store.Outcome, res leaseResult, again bool) {
	e.mu.Lock()
	final, counted := false, false
	for {
		if e.dead {
			e.mu.Unlock()
			return store.Outcome{}, 0, true
		}
		now := store.Micros(ls.now())
		if ls.adaptive && !counted {
			e.pace.note(now, ls.interval)
			counted = true
		}
		if o, ok := e.try(c, held, now, final); ok {
			if o.Allowed && c.UsesTok() {
				o.Lease = e.seq // Settle corrects against this lease
			}
			e.mu.Unlock()
			return o, leaseDone, false
		}
		if e.returning {
			if ls.s.flushed.Load() < e.epoch {
				e.mu.Unlock()
				return store.Outcome{}, leaseExact, false
			}
			e.returning = false
		}
		if ls.adaptive && !(e.pace.fast() && ls.leasable(c)) {
			// Too slow, or a limit too small, for a lease to pay: exact.
			e.mu.Unlock()
			return store.Outcome{}, leaseExact, false
		}
		if e.taking != nil {
			// One lease call per organization at a time: wait for its
			// answer, then spend the new lease or share its refusal.
			ch, calls := e.taking, e.calls
			e.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return store.Outcome{}, leaseFailed, false
			}
			e.mu.Lock()
			if e.calls > calls && e.failed {
				e.mu.Unlock()
				return store.Outcome{}, leaseFailed, false
			}
			final = e.calls > calls && e.refused
			continue
		}
		if !ls.s.upFor(ctx, org) {
			// Its node is lost: no lease call until its probe sees it.
			e.mu.Unlock()
			return store.Outcome{}, leaseFailed, false
		}
		ls.mu.RLock()
		if ls.closed {
			ls.mu.RUnlock()
			e.mu.Unlock()
			return store.Outcome{}, leaseExact, false
		}
		// Take a new lease; the old one's rest goes back in the same
		// script.
		rback, tback := e.req, e.tok
		e.held, e.req, e.tok = false, 0, 0
		e.seq = ls.seqs.Add(1)
		ch := make(chan struct{})
		e.taking = ch
		e.mu.Unlock()
		ls.startSweeper()
		rslice, tslice := ls.slices(c)
		// The call serves every admission waiting for it: the caller
		// going away must not fail theirs.
		g, err := ls.s.lease(context.WithoutCancel(ctx), org, c, rslice, tslice, rback, tback)
		e.mu.Lock()
		ls.mu.RUnlock()
		e.taking = nil
		close(ch)
		e.calls++
		e.failed = err != nil
		if err != nil {
			if rback > 0 || tback > 0 {
				ls.lostBack(e, org, rback, tback, err)
			}
			e.mu.Unlock()
			return store.Outcome{}, leaseFailed, false
		}
		now = store.Micros(ls.now())
		e.r, e.t, e.at = g.r, g.t, now
		e.holdUntil = 0
		if g.holdwait > 0 {
			e.holdUntil = now + g.holdwait
		}
		// A call that reports no wait could pay this admission, even
		// one that needs nothing (an estimate of 0 tokens): hold the
		// lease, empty as it may be, so that try admits it.
		if g.req > 0 || g.tok > 0 || g.rwait == 0 && g.twait == 0 {
			e.held, e.req, e.tok, e.until = true, g.req, g.tok, now+ls.interval
			e.tokCap = tslice
			e.seq = ls.seqs.Add(1)
		}
		if g.req > 0 || g.tok > 0 {
			ls.countTaken()
		}
		e.refused = g.rwait > 0 || g.twait > 0
		final = true
	}
}

// lostBack handles the rest of an old lease whose exchange failed: one
// that never reached Redis goes back through the settlement queue (and
// the organization is admitted exactly until it is sent); one whose answer
// was lost may have been given back already, and is not sent again. Called
// with e.mu held.
func (ls *Leases) lostBack(e *leaseEntry, org string, rback, tback int64, err error) {
	if !notSent(err) {
		ls.s.countUnanswered(1)
		if ce := ls.s.logger.Check(zap.DebugLevel, "redis lease answer lost; its give-back is not sent again"); ce != nil {
			ce.Write(zap.Error(err))
		}
		return
	}
	e.returning, e.epoch = true, ls.giveBackOne(org, rback, tback)
}

// try decides c from e's lease at now; ok false means a lease call is
// needed. With final (a lease call has just answered), what the lease
// cannot pay is refused with waits from Redis's levels at that call,
// unless those levels could pay it (another admission's call): then a
// call is needed after all.
func (e *leaseEntry) try(c store.Check, held, now int64, final bool) (o store.Outcome, ok bool) {
	live := e.held && now < e.until
	var hold int64
	if c.Hold {
		hold = max(held, e.holdUntil-now, 0)
	}
	canReq := !c.UsesReq() || live && e.req >= c.ReqCost
	canTok := !c.UsesTok() || live && e.tok >= c.TokCost
	switch {
	case canReq && canTok && hold == 0:
		o.Allowed = true
		if c.UsesReq() {
			e.req -= c.ReqCost
		}
		if c.UsesTok() {
			e.tok -= c.TokCost
		}
	case canReq && hold > 0:
		// Refused by a hold: it still counts one request, as in Redis.
		o.HoldWait = hold
		if c.UsesReq() {
			e.req -= c.ReqCost
		}
	case !final:
		return o, false
	case !canReq:
		if o.ReqWait = store.WaitFor(c.Req, e.level(c.Req, e.r, 0, now), c.ReqCost); o.ReqWait == 0 {
			return o, false
		}
		o.HoldWait = hold
	default:
		if o.TokWait = store.WaitFor(c.Tok, e.level(c.Tok, e.t, 0, now), c.TokCost); o.TokWait == 0 {
			return o, false
		}
		if c.UsesReq() {
			e.req -= c.ReqCost // refused by the tokens: it still counts one request
		}
	}
	if c.Req.On() {
		o.Req = e.level(c.Req, e.r, e.req, now)
	}
	if c.Tok.On() {
		o.Tok = e.level(c.Tok, e.t, e.tok, now)
	}
	return o, true
}

// level is a bucket as the headers report it: Redis's level at the last
// lease call, refilled since on this instance's clock, plus what the lease
// holds, at most the capacity. Other instances' admissions and leases since
// are not seen: it is approximate.
func (e *leaseEntry) level(s store.Spec, redisLevel, lease, now int64) int64 {
	return min(store.Refill(s, store.Stored{Level: redisLevel, At: e.at, Known: true}, now)+lease, s.Capacity)
}

// settleLease corrects an admission of org paid from lease seq (see
// leaseEntry.settle); a lease no longer in the table takes nothing.
func (ls *Leases) settleLease(org string, seq uint64, delta int64) (rest int64) {
	sh := &ls.shards[maphash.String(ls.seed, org)%nShards]
	sh.mu.Lock()
	e := sh.orgs[org]
	sh.mu.Unlock()
	if e == nil {
		return delta
	}
	return e.settle(seq, delta)
}

// settle corrects an admission paid from lease seq of e by delta units of
// tokens (a refund when negative) and returns what is left for the bucket
// in Redis: nothing when the lease paid the charge or took the refund. A
// refund fills the lease up to the token slice s, no more (whole tokens),
// so that a lease never holds more than s once its own request has taken
// its estimate (the documented bound counts on it); the rest goes to Redis,
// where the bucket's capacity caps it as in exact admission.
func (e *leaseEntry) settle(seq uint64, delta int64) (rest int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead || !e.held || e.seq != seq {
		return delta
	}
	if delta >= 0 {
		if e.tok < delta {
			return delta
		}
		e.tok -= delta
		return 0
	}
	take := min(-delta, max(e.tokCap-e.tok, 0)) / store.Unit * store.Unit
	e.tok += take
	return delta + take
}

// countTaken counts a lease call that granted something.
func (ls *Leases) countTaken() {
	ls.taken.Add(1)
	store.Count(store.Stats{LeasesTaken: 1})
}
