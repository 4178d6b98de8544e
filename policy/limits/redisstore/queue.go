package redisstore

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/policy/limits/store"
)

type pendingSettle struct {
	req, tok store.Spec          // the buckets, as the latest settlement had them
	delta    int64               // tokens
	spend    []store.SpendSettle // by period and minute
	// reqBack and tokBack are units of leases given back (see Leases).
	reqBack, tokBack int64
}

// add merges a budget settlement into p's.
func (p *pendingSettle) add(sp store.SpendSettle) {
	for i := range p.spend {
		if q := &p.spend[i]; q.Period == sp.Period && q.Slot == sp.Slot {
			q.Charge += sp.Charge
			q.Release += sp.Release
			return
		}
	}
	p.spend = append(p.spend, sp)
}

// Settle implements store.Store. A request that holds a budget reservation is
// settled at once (settleNow), so that its reservation stops counting
// before the request ends; a token correction alone is queued (enqueue).
func (s *Store) Settle(org string, st store.Settlement, _ time.Time) {
	if sp := st.Spend; sp != nil && sp.Release > 0 {
		s.settleNow(org, st.Req, st.Tok, st.Delta, *sp)
		return
	}
	s.enqueue(org, st.Req, st.Tok, st.Delta, st.Spend)
}

// enqueue queues a charge (refund when negative) of delta tokens for org,
// and a budget settlement if sp is set. Amounts for one organization add up
// while they wait. Nothing is dropped while Redis is reachable: with
// maxPending organizations queued, settle waits for the next flush to take
// the queue. While Redis is lost, new organizations past maxPending are
// dropped (counted, logged once). Once the store is closed, settle sends
// the settlement itself (see unlockAndSend).
func (s *Store) enqueue(org string, req, tok store.Spec, delta int64, sp *store.SpendSettle) {
	s.mu.Lock()
	p, queued := s.settles[org]
	if !queued && s.full() {
		s.mu.Unlock()
		return
	}
	p.req, p.tok, p.delta = req, tok, p.delta+delta
	if sp != nil {
		p.add(*sp)
	}
	s.settles[org] = p
	s.unlockAndSend()
}

// settleNow settles one request that holds a budget reservation (its
// token correction, charge and release, delta and sp as settle's) at once:
// it rides the node's next script call, with the admissions waiting for
// that node (a call of its own, sent at once, when the node has none in
// flight: no timer waits for company; see maxInflightSettle), and
// settleNow returns once Redis has answered, at most store_timeout later.
// So the reservation has stopped counting before the request ends, for
// every instance's next admission; queued, it would count until the next
// flush, up to settleEvery plus a round trip later, and concurrent
// requests far below the budget would be refused on reservations already
// released. Only what cannot be sent now goes to the queue: while the
// org's node is lost, and when the script did not run (see notSent: no
// connection, no node, a cluster that refused it), to be sent by a flush
// once Redis takes it. One whose answer is lost is sent again by the
// flushes, with its id (see resend.go), as in a flush.
func (s *Store) settleNow(org string, req, tok store.Spec, delta int64, sp store.SpendSettle) {
	firstSent := time.Now()
	c := s.settleCall(org, pendingSettle{req: req, tok: tok, delta: delta, spend: []store.SpendSettle{sp}}, s.clockArg())
	_, err := s.run(context.Background(), c.kind, c.keys, c.args...)
	switch {
	case err == nil:
	case notSent(err):
		s.enqueue(org, req, tok, delta, &sp)
	case answerLost(err):
		s.mu.Lock()
		if !s.addResend(resend{org: org, keys: c.keys, args: c.args, firstSent: firstSent}) {
			s.mu.Unlock()
			s.unanswered(1)
			return
		}
		s.unlockAndSend()
	default:
		s.unanswered(1)
	}
}

// giveBack queues what a lease did not spend, req and tok units, to go
// back to org's buckets (up to full ones), like settle. It returns the
// number of the flush that sends it (see flushed).
func (s *Store) giveBack(org string, reqSpec, tokSpec store.Spec, req, tok int64) uint64 {
	s.mu.Lock()
	p, queued := s.settles[org]
	if !queued && s.full() {
		s.mu.Unlock()
		return 0
	}
	p.req, p.tok = reqSpec, tokSpec
	p.reqBack += req
	p.tokBack += tok
	s.settles[org] = p
	epoch := s.taken + 1
	s.unlockAndSend()
	return epoch
}

// Hold implements store.Store: it queues a hold of d for org, like enqueue.
func (s *Store) Hold(org string, d time.Duration, _ time.Time) {
	s.mu.Lock()
	cur, queued := s.holds[org]
	if !queued && s.full() {
		s.mu.Unlock()
		return
	}
	s.holds[org] = max(cur, d)
	s.unlockAndSend()
}

// unlockAndSend unlocks s.mu, which the caller holds having queued something,
// and has it sent: by the settle loop while the store is open, else at once
// on the caller's goroutine. A closed store gets work only from a request
// that reached its config after the handler released it (a connection the
// old server was still reading when a reload began; see drain.Gate): its
// settlement is still owed, and the Redis client may still be open.
func (s *Store) unlockAndSend() {
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.flush()
		return
	}
	s.wake()
}

// full waits, with s.mu held, while the queue holds maxPending
// organizations and every node is reachable. It reports true when a new
// entry must be dropped: the queue is still full and a node lost (its
// entries stay queued until it is back, so a flush may not make room).
func (s *Store) full() bool {
	for !s.closed {
		n := len(s.settles) + len(s.holds)
		if !s.Up() {
			// A flush puts a lost node's entries back: count what it
			// holds, so that the queue stays bounded through the outage.
			n += int(s.sending)
		}
		if n < s.maxPending {
			return false
		}
		if !s.Up() {
			s.countDropped(1)
			if !s.dropping {
				s.dropping = true
				s.logger.Warn("redis lost and its settlement queue full; dropping settlements", zap.Int("pending", len(s.settles)+len(s.holds)))
			}
			return true
		}
		select {
		case s.urgent <- struct{}{}:
		default:
		}
		s.space.Wait()
	}
	return false
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// settleLoop sends queued settlements and holds, one item of a script
// call each, off the clients' response path; at most one flush is in
// flight. After each flush
// it lets the queue fill for settleEvery, so that a busy organization's
// settlements add up to one item per interval instead of one per request
// (which would double the Redis round trips of every evaluation). A close
// does not wait.
func (s *Store) settleLoop() {
	defer s.wg.Done()
	pause := time.NewTimer(s.settleEvery)
	pause.Stop()
	for {
		select {
		case <-s.kick:
			s.flush()
		case <-s.urgent:
			s.flush()
		case <-s.done:
			s.flush()
			return
		}
		pause.Reset(s.settleEvery)
		select {
		case <-pause.C:
		case <-s.urgent:
			pause.Stop()
			s.flush()
		case <-s.done:
			pause.Stop()
			s.flush()
			return
		}
	}
}

// flush sends the queue as pipelines of at most flushLimit items per
// node, holds first (they are rarer and matter more to the upstream),
// then the settlements, then those whose answer was lost before (see
// resend.go). Nothing is sent to a lost node: its entries wait for its
// probe. A settlement whose answer is lost is kept to be sent again as it
// was, with its id, so that it runs once; one that did not run (see
// notSent: no connection, a cluster that refused it) is queued again, and
// so is a hold either way (a second hold changes nothing but extend it
// from a later now). Its steps: take the queue, send it per node, keep
// what is to be sent again, and then count the flush done.
func (s *Store) flush() {
	f := s.takeQueue()
	if f == nil {
		return
	}
	s.sendPerNode(f.calls)
	retry := s.requeue(f)
	s.finish(f)
	if retry {
		// Try again after the pause, traffic or not: the failures count
		// towards the node's loss, and then its probe takes over.
		s.wake()
	}
}

// queueFlush is one flush's share of the queue: its scripts, and what
// each was made from, to queue again what did not run.
type queueFlush struct {
	settles map[string]pendingSettle
	holds   map[string]time.Duration
	// resends are the settlements sent again (see resend.go), and at
	// when f took them: the first send of the settlements it sends.
	resends []resend
	at      time.Time
	// calls are the holds' scripts, then the settlements', then the
	// resends'; orgs[i] is calls[i]'s organization, nHolds the number of
	// holds and nSends that of holds and settlements.
	calls          []*scriptCall
	orgs           []string
	nHolds, nSends int
	// epoch is the flush's number (see Store.taken); taken is the number
	// of entries it took (see Store.sending).
	epoch uint64
	taken int64
	// backLeft says a lease give-back did not run and was queued again:
	// the flush number does not advance past it (see Store.flushed).
	backLeft bool
}

// takeQueue takes the queue for a flush and makes its scripts. It returns
// nil when nothing can be sent (every node lost): the queue stays for the
// probe, or, once the store is closed, is counted dropped (the resends
// unanswered). Resends kept for retryFor are given up, counted
// unanswered.
func (s *Store) takeQueue() *queueFlush {
	now := time.Now()
	s.mu.Lock()
	gaveUp := s.expireResends(now)
	if s.health.allLost() {
		abandoned := 0
		if s.closed {
			// Nobody will send it: count it as dropped.
			abandoned = len(s.settles) + len(s.holds)
			clear(s.settles)
			clear(s.holds)
			gaveUp += int64(len(s.resends))
			s.resends = nil
		}
		s.mu.Unlock()
		s.abandon(abandoned)
		s.unanswered(gaveUp)
		return nil
	}
	f := &queueFlush{at: now, resends: s.resends}
	s.resends = nil
	if len(s.settles) > 0 {
		f.settles, s.settles = s.settles, make(map[string]pendingSettle)
	}
	if len(s.holds) > 0 {
		f.holds, s.holds = s.holds, make(map[string]time.Duration)
	}
	s.dropping = false
	s.taken++
	f.epoch = s.taken
	f.taken = int64(len(f.settles) + len(f.holds) + len(f.resends))
	s.sending += f.taken
	s.space.Broadcast()
	s.mu.Unlock()
	s.unanswered(gaveUp)

	clock := s.clockArg()
	for org, d := range f.holds {
		f.calls = append(f.calls, &scriptCall{kind: kindHold, keys: []string{s.bucketKey(org)}, args: []any{clock, d.Microseconds()}})
		f.orgs = append(f.orgs, org)
	}
	f.nHolds = len(f.calls)
	for org, p := range f.settles {
		f.calls = append(f.calls, s.settleCall(org, p, clock))
		f.orgs = append(f.orgs, org)
	}
	f.nSends = len(f.calls)
	for _, r := range f.resends {
		f.calls = append(f.calls, &scriptCall{kind: kindSettle, keys: r.keys, args: r.args})
		f.orgs = append(f.orgs, r.org)
	}
	return f
}

// sendPerNode sends calls to their nodes, in pipelines of at most
// flushLimit, in the order given, and counts each pipeline towards its
// node's health. A call that could not be sent (no node found, its node
// lost) gets the error that says so.
func (s *Store) sendPerNode(calls []*scriptCall) {
	ctx := context.Background()
	byNode := make(map[*nodeBatcher][]*scriptCall)
	var nodes []*nodeBatcher
	for _, c := range calls {
		node, b, err := s.nodeFor(ctx, c.keys[0])
		if err != nil {
			c.err = err
			continue
		}
		c.node = node
		if _, ok := byNode[b]; !ok {
			nodes = append(nodes, b)
		}
		byNode[b] = append(byNode[b], c)
	}
	for _, b := range nodes {
		for chunk := range slices.Chunk(byNode[b], flushLimit) {
			if b.health.lost.Load() {
				for _, c := range chunk {
					c.err = errNodeLost
				}
				continue
			}
			s.pipeline(chunk[0].node, chunk)
			var first error
			for _, c := range chunk {
				if c.err != nil {
					first = c.err
					break
				}
			}
			s.observe(ctx, &b.health, chunk[0].keys[0], first)
		}
	}
}

// requeue puts back in the queue what f's scripts prove never ran, and
// the holds whose answer was lost; keeps to send again, as they were, the
// settlements whose answer was lost (see resend.go); and counts the rest
// of the failures: unanswered (answered with a script error; a resend
// given up) or, by a closed store, dropped. It reports whether any failed
// for another reason than its node being lost, to be tried again after
// the pause.
func (s *Store) requeue(f *queueFlush) (retry bool) {
	var lost int64
	abandoned := 0
	s.mu.Lock()
	for i, c := range f.calls {
		if c.err == nil {
			continue
		}
		// A lost node's entries wait for its probe.
		again := !errors.Is(c.err, errLost)
		lostAnswer := answerLost(c.err)
		switch {
		case i >= f.nSends:
			// A resend, failed again: kept, with its first send, unless
			// Redis answered it or the store closed.
			r := f.resends[i-f.nSends]
			if !notSent(c.err) && !lostAnswer || !s.addResend(r) {
				lost++
				continue
			}
			retry = retry || again
			f.backLeft = f.backLeft || r.givingBack
			continue
		case lostAnswer && i >= f.nHolds:
			old := f.settles[f.orgs[i]]
			r := resend{org: f.orgs[i], keys: c.keys, args: c.args, firstSent: f.at, givingBack: old.reqBack != 0 || old.tokBack != 0}
			if !s.addResend(r) {
				lost++
				continue
			}
			retry = true
			f.backLeft = f.backLeft || r.givingBack
			continue
		case lostAnswer && s.closed, !lostAnswer && !notSent(c.err):
			lost++
			continue
		case s.closed:
			abandoned++
			continue
		}
		retry = retry || again
		org := f.orgs[i]
		if i < f.nHolds {
			s.holds[org] = max(s.holds[org], f.holds[org])
			continue
		}
		p, old := s.settles[org], f.settles[org]
		f.backLeft = f.backLeft || old.reqBack != 0 || old.tokBack != 0
		p.req, p.tok, p.delta = old.req, old.tok, p.delta+old.delta
		p.reqBack, p.tokBack = p.reqBack+old.reqBack, p.tokBack+old.tokBack
		for _, sp := range old.spend {
			p.add(sp)
		}
		s.settles[org] = p
	}
	s.mu.Unlock()
	s.abandon(abandoned)
	s.unanswered(lost)
	return retry
}

// finish counts f done: its number flushed, unless a lease give-back was
// queued again (it rides a later flush, and its organization stays on
// exact admission until that one is answered), and then its entries off
// Pending, last, so that Pending reaches 0 only once the flush is done
// with, counts and flush number included.
func (s *Store) finish(f *queueFlush) {
	if !f.backLeft {
		s.flushed.Store(f.epoch)
	}
	s.mu.Lock()
	s.sending -= f.taken
	s.mu.Unlock()
}

// unanswered counts and logs n settlements or holds whose answer was lost.
func (s *Store) unanswered(n int64) {
	if n == 0 {
		return
	}
	s.countUnanswered(n)
	if ce := s.logger.Check(zap.WarnLevel, "redis settlements lost; not sent again"); ce != nil {
		ce.Write(zap.Int64("count", n))
	}
}

// settleCall is the settlement script of p for org, with an id of its
// own (see resend.go).
func (s *Store) settleCall(org string, p pendingSettle, clock string) *scriptCall {
	req, tok := p.req, p.tok
	keys := []string{s.bucketKey(org), s.settledKey(org, settleID())}
	args := []any{clock, req.Capacity, req.Rate, tok.Capacity, tok.Rate, tok.Clamp(p.delta)*store.Unit - p.tokBack, p.reqBack}
	for _, sp := range p.spend {
		keys = append(keys, s.budgetKey(org, sp.Period))
		args = append(args, sp.Charge, sp.Release, sp.Slot, sp.End)
	}
	return &scriptCall{kind: kindSettle, keys: keys, args: args}
}

// abandon counts n settlements and holds a closed store could not send
// (Redis lost or failing when the config was released) as dropped.
func (s *Store) abandon(n int) {
	if n == 0 {
		return
	}
	s.countDropped(int64(n))
	s.logger.Warn("redis unavailable as the limiter closed; settlements dropped", zap.Int("count", n))
}
