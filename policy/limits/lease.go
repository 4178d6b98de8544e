package limits

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The local-allowance mode (LocalAllowance). Per organization, an instance
// holds at most one lease: units of the requests and token buckets that
// leaseScript debited from Redis for it. Admissions spend the lease under a
// mutex, without a round trip. When the lease cannot pay an admission, or
// its interval has passed, the next admission takes a new one in the same
// script that gives the old one's rest back (an exchange: no moment sees
// both or neither), while the admissions that arrive meanwhile wait for
// that one call. A lease nobody spends is given back by the sweeper,
// through the settlement queue; until that flush is answered its units are
// neither here nor in Redis, so the organization's admissions take the
// exact path meanwhile rather than lease again: an instance never holds
// more than one lease's units of an organization outside Redis, which is
// what the README's bound counts on.

// maxLeases bounds the organizations an instance holds leases for, as
// maxOverLimit does the over-limit table: past it, a newcomer is admitted
// exactly, one round trip per request, until the sweeper frees a slot.
const maxLeases = 100_000

// minSweepEvery bounds how often the sweeper runs, whatever the interval.
const minSweepEvery = 5 * time.Millisecond

type leases struct {
	s         *redisStore
	now       func() time.Time       // the Limiter's clock
	limitsFor func(string) orgLimits // the Limiter's, for give-backs
	share     float64
	interval  int64 // µs
	max       int

	seed   maphash.Seed
	shards [localShards]leaseShard
	size   atomic.Int64

	// taken counts the lease calls that granted something.
	taken atomic.Int64
	// seqs numbers the leases' changes of hands across every entry, so
	// that a lease sequence names one lease of one entry (see
	// Decision.leaseSeq): an entry removed and made anew for the same
	// organization never reuses one.
	seqs atomic.Uint64

	// mu is held for reading by each lease call and for writing by close,
	// so that no lease is taken after close gave the others back.
	mu     sync.RWMutex
	closed bool

	// sweepEvery is the sweeper's period in nanoseconds; the sweeper
	// starts with the first lease, so tests can change it before.
	sweepEvery atomic.Int64
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
	// flush number epoch (see redisStore.flushed).
	returning bool
	epoch     uint64
}

func newLeases(s *redisStore, a LocalAllowance, now func() time.Time, limitsFor func(string) orgLimits) *leases {
	share, interval := a.settings()
	ls := &leases{s: s, now: now, limitsFor: limitsFor, share: share, interval: interval.Microseconds(), max: maxLeases,
		seed: maphash.MakeSeed(), done: make(chan struct{})}
	for i := range ls.shards {
		ls.shards[i].orgs = make(map[string]*leaseEntry)
	}
	ls.sweepEvery.Store(int64(max(interval/2, minSweepEvery)))
	return ls
}

// slices returns the units one lease takes of each bucket: share of its
// capacity, at least one request of a requests bucket.
func (ls *leases) slices(c check) (req, tok int64) {
	if c.req.on() {
		req = max(int64(ls.share*float64(c.req.capacity)), unit)
	}
	if c.tok.on() {
		tok = int64(ls.share * float64(c.tok.capacity))
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

// admit implements store: from org's lease when it can pay c, taking a
// new lease when needed; exactly, from the Redis store, for an
// organization with a budget (a reservation per request), for a check of
// no bucket, and when leasing would break the bound (see leaseExact).
func (ls *leases) admit(ctx context.Context, org string, c check, held int64, at time.Time) (outcome, error) {
	if c.budget.on() || !c.usesReq() && !c.usesTok() {
		return ls.s.admit(ctx, org, c, held, at)
	}
	o, res := ls.lend(ctx, org, c, held)
	switch res {
	case leaseDone:
		return o, nil
	case leaseExact:
		return ls.s.admit(ctx, org, c, held, at)
	}
	return outcome{}, errLeaseFailed
}

// settle implements store: an admission paid from a lease is corrected
// against it first; what the lease does not take (a charge it cannot
// pay, or a refund past its grant) goes to Redis, whole tokens either way.
func (ls *leases) settle(org string, st settlement, at time.Time) {
	if st.lease != 0 && st.spend == nil {
		if st.delta = ls.settleLease(org, st.lease, st.delta*unit) / unit; st.delta == 0 {
			return
		}
	}
	ls.s.settle(org, st, at)
}

// hold implements store: through Redis; another instance honours it at
// its next lease call, within the interval.
func (ls *leases) hold(org string, d time.Duration, at time.Time) { ls.s.hold(org, d, at) }

// holdWait implements store.
func (ls *leases) holdWait(org string, at time.Time) int64 { return ls.s.holdWait(org, at) }

// up implements store.
func (ls *leases) up() bool { return ls.s.up() }

// stats implements store: Redis's counts and the leases taken.
func (ls *leases) stats() Stats {
	st := ls.s.stats()
	st.LeasesTaken = ls.taken.Load()
	return st
}

// close implements store: what the leases hold goes back to Redis with
// the store's last flush.
func (ls *leases) close() error {
	ls.giveAllBack()
	return ls.s.close()
}

// lend decides c for org from its lease, taking a new lease when needed.
// held is the hold this instance knows of (µs left).
func (ls *leases) lend(ctx context.Context, org string, c check, held int64) (outcome, leaseResult) {
	for {
		e := ls.entry(org)
		if e == nil {
			return outcome{}, leaseExact
		}
		if o, res, again := ls.admitFrom(ctx, e, org, c, held); !again {
			return o, res
		}
	}
}

// entry returns org's entry, a new one if there is room, else nil.
func (ls *leases) entry(org string) *leaseEntry {
	sh := &ls.shards[maphash.String(ls.seed, org)%localShards]
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
func (ls *leases) admitFrom(ctx context.Context, e *leaseEntry, org string, c check, held int64) (o outcome, res leaseResult, again bool) {
	e.mu.Lock()
	final := false
	for {
		if e.dead {
			e.mu.Unlock()
			return outcome{}, 0, true
		}
		now := micros(ls.now())
		if o, ok := e.try(c, held, now, final); ok {
			if o.allowed && c.usesTok() {
				o.lease = e.seq // Settle corrects against this lease
			}
			e.mu.Unlock()
			return o, leaseDone, false
		}
		if e.returning {
			if ls.s.flushed.Load() < e.epoch {
				e.mu.Unlock()
				return outcome{}, leaseExact, false
			}
			e.returning = false
		}
		if e.taking != nil {
			// One lease call per organization at a time: wait for its
			// answer, then spend the new lease or share its refusal.
			ch, calls := e.taking, e.calls
			e.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return outcome{}, leaseFailed, false
			}
			e.mu.Lock()
			if e.calls > calls && e.failed {
				e.mu.Unlock()
				return outcome{}, leaseFailed, false
			}
			final = e.calls > calls && e.refused
			continue
		}
		if ls.s.lost.Load() {
			e.mu.Unlock()
			return outcome{}, leaseFailed, false
		}
		ls.mu.RLock()
		if ls.closed {
			ls.mu.RUnlock()
			e.mu.Unlock()
			return outcome{}, leaseExact, false
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
			return outcome{}, leaseFailed, false
		}
		now = micros(ls.now())
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
func (ls *leases) lostBack(e *leaseEntry, org string, rback, tback int64, err error) {
	if !notSent(err) {
		ls.s.countUnanswered(1)
		if ce := ls.s.logger.Check(zap.DebugLevel, "redis lease answer lost; its give-back is not sent again"); ce != nil {
			ce.Write(zap.Error(err))
		}
		return
	}
	e.returning, e.epoch = true, ls.s.giveBack(org, ls.limitsFor(org), rback, tback)
}

// try decides c from e's lease at now; ok false means a lease call is
// needed. With final (a lease call has just answered), what the lease
// cannot pay is refused with waits from Redis's levels at that call,
// unless those levels could pay it (another admission's call): then a
// call is needed after all.
func (e *leaseEntry) try(c check, held, now int64, final bool) (o outcome, ok bool) {
	live := e.held && now < e.until
	var hold int64
	if c.hold {
		hold = max(held, e.holdUntil-now, 0)
	}
	canReq := !c.usesReq() || live && e.req >= c.reqCost
	canTok := !c.usesTok() || live && e.tok >= c.tokCost
	switch {
	case canReq && canTok && hold == 0:
		o.allowed = true
		if c.usesReq() {
			e.req -= c.reqCost
		}
		if c.usesTok() {
			e.tok -= c.tokCost
		}
	case canReq && hold > 0:
		// Refused by a hold: it still counts one request, as in Redis.
		o.holdWait = hold
		if c.usesReq() {
			e.req -= c.reqCost
		}
	case !final:
		return o, false
	case !canReq:
		if o.reqWait = waitFor(c.req, e.level(c.req, e.r, 0, now), c.reqCost); o.reqWait == 0 {
			return o, false
		}
		o.holdWait = hold
	default:
		if o.tokWait = waitFor(c.tok, e.level(c.tok, e.t, 0, now), c.tokCost); o.tokWait == 0 {
			return o, false
		}
		if c.usesReq() {
			e.req -= c.reqCost // refused by the tokens: it still counts one request
		}
	}
	if c.req.on() {
		o.req = e.level(c.req, e.r, e.req, now)
	}
	if c.tok.on() {
		o.tok = e.level(c.tok, e.t, e.tok, now)
	}
	return o, true
}

// level is a bucket as the headers report it: Redis's level at the last
// lease call, refilled since on this instance's clock, plus what the lease
// holds, at most the capacity. Other instances' admissions and leases since
// are not seen: it is approximate.
func (e *leaseEntry) level(s spec, redisLevel, lease, now int64) int64 {
	return min(refill(s, stored{level: redisLevel, at: e.at, known: true}, now)+lease, s.capacity)
}

// settleLease corrects an admission of org paid from lease seq (see
// leaseEntry.settle); a lease no longer in the table takes nothing.
func (ls *leases) settleLease(org string, seq uint64, delta int64) (rest int64) {
	sh := &ls.shards[maphash.String(ls.seed, org)%localShards]
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
// its estimate (the README's bound counts on it); the rest goes to Redis,
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
	take := min(-delta, max(e.tokCap-e.tok, 0)) / unit * unit
	e.tok += take
	return delta + take
}

func (ls *leases) startSweeper() {
	ls.startOnce.Do(func() {
		ls.wg.Add(1)
		go ls.sweepLoop()
	})
}

func (ls *leases) sweepLoop() {
	defer ls.wg.Done()
	t := time.NewTimer(time.Duration(ls.sweepEvery.Load()))
	defer t.Stop()
	for {
		select {
		case <-ls.done:
			return
		case <-t.C:
		}
		ls.sweep(micros(ls.now()))
		t.Reset(time.Duration(ls.sweepEvery.Load()))
	}
}

// giveBackItem is one lease's rest on its way back to Redis.
type giveBackItem struct {
	e        *leaseEntry
	org      string
	req, tok int64
}

// sweep gives back the rest of every lease expired at now and forgets the
// entries that hold nothing. While Redis is lost it does nothing: no lease
// is taken meanwhile, and the rests wait in their entries.
func (ls *leases) sweep(now int64) {
	if ls.s.lost.Load() {
		return
	}
	flushed := ls.s.flushed.Load()
	var back []giveBackItem
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for org, e := range sh.orgs {
			e.mu.Lock()
			switch {
			case e.taking != nil, e.returning && flushed < e.epoch, e.held && now < e.until:
				// In use.
			case e.held && (e.req > 0 || e.tok > 0):
				back = append(back, giveBackItem{e, org, e.req, e.tok})
				e.held, e.req, e.tok = false, 0, 0
				e.seq = ls.seqs.Add(1)
				e.returning, e.epoch = true, math.MaxUint64 // until queued
			default:
				e.dead = true
				delete(sh.orgs, org)
				ls.size.Add(-1)
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	ls.giveBack(back)
}

// giveBack queues rests for Redis and notes which flush sends each.
func (ls *leases) giveBack(back []giveBackItem) {
	for _, b := range back {
		epoch := ls.s.giveBack(b.org, ls.limitsFor(b.org), b.req, b.tok)
		b.e.mu.Lock()
		b.e.epoch = epoch
		b.e.mu.Unlock()
	}
}

// giveAllBack stops the sweeper and queues every lease's rest for Redis;
// the store's close sends them. No lease is taken after it: admissions
// take the exact path.
func (ls *leases) giveAllBack() {
	ls.mu.Lock()
	ls.closed = true
	ls.mu.Unlock()
	close(ls.done)
	ls.wg.Wait()
	var back []giveBackItem
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for org, e := range sh.orgs {
			e.mu.Lock()
			if e.held && (e.req > 0 || e.tok > 0) {
				back = append(back, giveBackItem{e, org, e.req, e.tok})
			}
			e.held, e.req, e.tok, e.dead = false, 0, 0, true
			e.seq = ls.seqs.Add(1)
			e.mu.Unlock()
			delete(sh.orgs, org)
		}
		sh.mu.Unlock()
	}
	ls.size.Store(0)
	ls.giveBack(back)
}
