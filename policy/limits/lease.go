package limits

import (
	"context"
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
	l        *Limiter
	s        *redisStore
	share    float64
	interval int64 // µs
	max      int

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

func newLeases(l *Limiter, s *redisStore, a LocalAllowance) *leases {
	share, interval := a.settings()
	ls := &leases{l: l, s: s, share: share, interval: interval.Microseconds(), max: maxLeases,
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

// admit decides c for org from its lease, taking a new lease when needed.
// held is the hold this instance knows of (µs left).
func (ls *leases) admit(ctx context.Context, org string, lim orgLimits, c check, held int64) (Decision, leaseResult) {
	for {
		e := ls.entry(org)
		if e == nil {
			return Decision{}, leaseExact
		}
		if d, res, again := ls.admitFrom(ctx, e, org, lim, c, held); !again {
			return d, res
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
func (ls *leases) admitFrom(ctx context.Context, e *leaseEntry, org string, lim orgLimits, c check, held int64) (d Decision, res leaseResult, again bool) {
	e.mu.Lock()
	final := false
	for {
		if e.dead {
			e.mu.Unlock()
			return Decision{}, 0, true
		}
		now := micros(ls.l.now())
		if o, ok := e.try(c, held, now, final); ok {
			seq := e.seq
			e.mu.Unlock()
			return ls.decide(org, lim, c, o, e, seq), leaseDone, false
		}
		if e.returning {
			if ls.s.flushed.Load() < e.epoch {
				e.mu.Unlock()
				return Decision{}, leaseExact, false
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
				return Decision{}, leaseFailed, false
			}
			e.mu.Lock()
			if e.calls > calls && e.failed {
				e.mu.Unlock()
				return Decision{}, leaseFailed, false
			}
			final = e.calls > calls && e.refused
			continue
		}
		if ls.s.lost.Load() {
			e.mu.Unlock()
			return Decision{}, leaseFailed, false
		}
		ls.mu.RLock()
		if ls.closed {
			ls.mu.RUnlock()
			e.mu.Unlock()
			return Decision{}, leaseExact, false
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
				ls.lostBack(e, org, lim, rback, tback, err)
			}
			e.mu.Unlock()
			return Decision{}, leaseFailed, false
		}
		now = micros(ls.l.now())
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
func (ls *leases) lostBack(e *leaseEntry, org string, lim orgLimits, rback, tback int64, err error) {
	if !notSent(err) {
		ls.s.countUnanswered(1)
		if ce := ls.s.logger.Check(zap.DebugLevel, "redis lease answer lost; its give-back is not sent again"); ce != nil {
			ce.Write(zap.Error(err))
		}
		return
	}
	e.returning, e.epoch = true, ls.s.giveBack(org, lim, rback, tback)
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

// decide turns a lease's outcome into a Decision that Settle can correct
// against the lease.
func (ls *leases) decide(org string, lim orgLimits, c check, o outcome, e *leaseEntry, seq uint64) Decision {
	d := ls.l.decide(org, lim, c, o, chargedShared)
	if d.Allowed && c.usesTok() {
		d.leaseSeq = seq
	}
	return d
}

// settle corrects an admission of org paid from lease seq (see
// leaseEntry.settle); a lease no longer in the table takes nothing.
func (ls *leases) settle(org string, seq uint64, delta int64) (rest int64) {
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
		ls.sweep(micros(ls.l.now()))
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
		epoch := ls.s.giveBack(b.org, ls.l.limitsFor(b.org), b.req, b.tok)
		b.e.mu.Lock()
		b.e.epoch = epoch
		b.e.mu.Unlock()
	}
}

// close stops the sweeper and queues every lease's rest for Redis; the
// store's close sends them. No lease is taken after it: admissions take
// the exact path.
func (ls *leases) close() {
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
