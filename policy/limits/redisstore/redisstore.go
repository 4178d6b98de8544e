// Package redisstore is the limits' store in Redis, shared by every
// gateway instance: one script per admission (script.go) on the Redis
// server's clock, the admissions of concurrent requests pipelined per node
// (batch.go), settlements of token corrections queued and flushed off the
// response path, holds, Redis's health judged per node (health.go), and
// the leases of local_allowance (lease.go), which spend slices of an
// organization's buckets in process. It alone knows go-redis's concrete
// types: a Redis Cluster's scripts go to the master that owns the
// organization's slot (see redispool.ForKey).
package redisstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

const (
	// lostAfter consecutive outage errors of one node's calls mark that
	// node lost: the admissions of the organizations it serves stop paying
	// store_timeout, and a background probe watches for its return.
	lostAfter = 3
	// maxPending bounds the settlements and holds waiting for Redis: one
	// entry per organization (the amounts of one organization add up),
	// about 100 bytes plus the organization id each. Past it, settle and
	// hold wait for the next flush to take the queue (backpressure) rather
	// than drop anything; only while Redis is lost are new organizations
	// dropped past it, counted and logged. With the queue in flight, at
	// most 2*maxPending entries are held.
	maxPending = 100_000
	// settleEvery is the least time between two flushes of the queue: a
	// bucket is corrected at most this much later, which a per-second
	// refill does not notice, and under load Redis sees one settlement per
	// organization per interval.
	settleEvery = 20 * time.Millisecond
)

// Client is the part of a go-redis client the store uses: scripts. The
// handler's *redis.Client or *redis.ClusterClient is one; with a cluster,
// scripts go to the master that owns the organization's slot (see
// redispool.ForKey).
type Client interface {
	redis.Scripter
}

// Options are a Store's settings; zero values take the defaults.
type Options struct {
	// Timeout bounds each call to Redis (store_timeout): 50ms by default.
	Timeout time.Duration
	// Logger receives `redis lost`, `redis back` and the settlements'
	// warnings; nil logs nothing.
	Logger *zap.Logger
	// Clock, when set, is the scripts' clock instead of the Redis
	// server's TIME: for a test that moves time itself.
	Clock func() time.Time
	// ProbeMin and ProbeMax bound the backoff of the probe that watches a
	// lost Redis come back: 100ms and 5s by default.
	ProbeMin, ProbeMax time.Duration
	// SettleEvery is the least time between two flushes of the settlement
	// queue (default 20ms, settleEvery).
	SettleEvery time.Duration
	// MaxPending bounds the organizations queued for settlement (default
	// 100,000, maxPending).
	MaxPending int
}

// Store keeps the buckets in Redis, shared by every gateway instance. It
// is safe for concurrent use.
type Store struct {
	client  Client // the handler's: never closed here
	prefix  string
	timeout time.Duration
	logger  *zap.Logger
	// now is the scripts' clock (Options.Clock); nil uses the server's TIME.
	now func() time.Time
	// probeMin and probeMax bound the probe's backoff.
	probeMin, probeMax time.Duration
	// settleEvery is the pause after each flush of the queue.
	settleEvery time.Duration

	scriptErrSeen atomic.Bool
	health        healthTable

	// batchers holds a *nodeBatcher per node address (see run), which
	// also holds the node's health.
	batchers   sync.Map
	maxPending int

	mu       sync.Mutex // guards the fields below
	closed   bool
	settles  map[string]pendingSettle
	holds    map[string]time.Duration
	dropping bool // a settlement was dropped since the last flush
	// space is signalled when a flush takes the queue, Redis is lost or
	// the store closes: what settle and hold wait for when it is full.
	space *sync.Cond
	// lostAnswers counts settlements and holds whose answer was lost (a
	// timeout, a connection closed mid-pipeline): they may or may not
	// have run, and are not sent again; dropped counts those never sent
	// (Redis lost and the queue full).
	lostAnswers, dropped atomic.Int64
	// sending counts the settlements and holds a flush has taken and not
	// yet finished with (see Stats' Pending); guarded by mu.
	sending int64
	// taken counts the flushes that took the queue (guarded by mu);
	// flushed is the last of them whose scripts have been answered, with
	// every lease give-back sent. What settle queues is sent by flush
	// number taken+1 (see giveBack), or a later one if it must be queued
	// again.
	taken   uint64
	flushed atomic.Uint64

	kick   chan struct{}
	urgent chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
}

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

// New returns a store in client's Redis whose keys start with prefix;
// configs with the same prefix share buckets. The caller keeps owning the
// client. Call Close when the config is retired.
func New(client Client, prefix string, o Options) *Store {
	s := &Store{
		client:      client,
		prefix:      prefix,
		timeout:     cmp.Or(o.Timeout, 50*time.Millisecond),
		logger:      o.Logger,
		now:         o.Clock,
		probeMin:    cmp.Or(o.ProbeMin, 100*time.Millisecond),
		probeMax:    cmp.Or(o.ProbeMax, 5*time.Second),
		settleEvery: cmp.Or(o.SettleEvery, settleEvery),
		settles:     make(map[string]pendingSettle),
		maxPending:  cmp.Or(o.MaxPending, maxPending),
		holds:       make(map[string]time.Duration),
		kick:        make(chan struct{}, 1),
		urgent:      make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	if s.logger == nil {
		s.logger = zap.NewNop()
	}
	s.space = sync.NewCond(&s.mu)
	s.wg.Add(1)
	go s.settleLoop()
	return s
}

// Close implements store.Store: it sends what is pending (giving up once
// Redis is lost) and stops the background goroutines. The client stays
// open: the handler owns it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.space.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Store) keys(org string) (bucket, hold string) {
	base := s.prefix + "{" + keyOrg(org) + "}:"
	return base + "b", base + "h"
}

// budgetKey names org's budget hash for a period.
func (s *Store) budgetKey(org, period string) string {
	return s.prefix + "{" + keyOrg(org) + "}:budget:" + period
}

func (s *Store) clockArg() string {
	if s.now == nil {
		return ""
	}
	return strconv.FormatInt(s.now().UnixMicro(), 10)
}

// run sends one script to the node that owns keys[0], in that node's next
// pipeline (see nodeBatcher), and waits for its answer: at most
// store_timeout for a pipeline to take it, and store_timeout for that
// pipeline. It is never sent twice. While that node is lost it fails at
// once (errLost). Its result counts towards the node's health.
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	node, b, err := s.nodeFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	res, err := b.do(ctx, &scriptCall{node: node, script: script, keys: keys, args: args}, s.timeout)
	s.observe(ctx, &b.health, keys[0], err)
	return res, err
}

// nodeFor returns the node that owns key and its batcher. Its error says
// the script was not sent (notSent): no node could be found (a cluster
// whose slot map cannot be loaded, which counts towards the slot map's
// health), or the node is lost (errLost).
func (s *Store) nodeFor(ctx context.Context, key string) (*redis.Client, *nodeBatcher, error) {
	if s.health.slotMap.lost.Load() {
		return nil, nil, errNodeLost
	}
	node, err := s.node(ctx, key)
	if err != nil {
		if _, cluster := s.client.(*redis.ClusterClient); cluster {
			s.observe(ctx, &s.health.slotMap, key, err)
		}
		return nil, nil, fmt.Errorf("%w: %w", errNotSent, err)
	}
	b := s.batcher(node)
	if b.health.lost.Load() {
		return nil, nil, errNodeLost
	}
	return node, b, nil
}

// upFor reports whether the node that serves org's keys is counted up,
// as far as this instance knows without a round trip.
func (s *Store) upFor(ctx context.Context, org string) bool {
	key, _ := s.keys(org)
	_, _, err := s.nodeFor(ctx, key)
	return !errors.Is(err, errLost)
}

// node returns the client of the node that owns key (redispool.ForKey). A
// cluster's lookup may load the slot map, which store_timeout bounds; a
// single server's is the client itself, with no deadline to pay for on
// every admission.
func (s *Store) node(ctx context.Context, key string) (*redis.Client, error) {
	if _, cluster := s.client.(*redis.ClusterClient); cluster {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return redispool.ForKey(ctx, s.client, key)
}

// Admit implements store.Store: c against Redis, on the server's clock;
// localHold is the hold this instance knows of (microseconds left), which
// Redis may not have yet. While the node that serves org is lost it fails
// at once (errLost).
func (s *Store) Admit(ctx context.Context, org string, c store.Check, localHold int64, _ time.Time) (store.Outcome, error) {
	bucket, hold := s.keys(org)
	holdArg := "0"
	if c.Hold {
		holdArg = "1"
	}
	keys := []string{bucket, hold}
	args := []any{s.clockArg(), c.Req.Capacity, c.Req.Rate, c.Tok.Capacity, c.Tok.Rate,
		c.ReqCost, c.TokCost, holdArg, localHold}
	if b := c.Budget; b.On() {
		for _, p := range b.Periods {
			keys = append(keys, s.budgetKey(org, p.Name))
		}
		args = append(args, b.Limit, b.Cost,
			b.Periods[1].Start.UnixMicro(), b.Periods[1].End.UnixMicro(), b.Periods[2].End.UnixMicro())
	}
	res, err := s.run(ctx, admitScript, keys, args...)
	var o store.Outcome
	if err == nil {
		if o, err = parseOutcome(res); err != nil {
			s.scriptFailed("script", err)
		}
	}
	return o, err
}

// leaseGrant is leaseScript's answer.
type leaseGrant struct {
	req, tok               int64 // units granted
	r, t                   int64 // Redis's levels after the grant (units)
	rwait, twait, holdwait int64 // µs
}

// lease gives back rback and tback units of org's old lease and takes a
// new one of rslice and tslice units, in one script (see leaseScript),
// sent like an admission. c is the admission that needs it.
func (s *Store) lease(ctx context.Context, org string, c store.Check, rslice, tslice, rback, tback int64) (leaseGrant, error) {
	bucket, hold := s.keys(org)
	res, err := s.run(ctx, leaseScript, []string{bucket, hold}, s.clockArg(),
		c.Req.Capacity, c.Req.Rate, c.Tok.Capacity, c.Tok.Rate, c.ReqCost, c.TokCost, rslice, tslice, rback, tback)
	var g leaseGrant
	if err == nil {
		if g, err = parseGrant(res); err != nil {
			s.scriptFailed("script", err)
		}
	}
	return g, err
}

func parseGrant(res any) (leaseGrant, error) {
	var n [7]int64
	if err := int64s(res, n[:]); err != nil {
		return leaseGrant{}, err
	}
	return leaseGrant{req: n[0], tok: n[1], r: n[2], t: n[3], rwait: n[4], twait: n[5], holdwait: n[6]}, nil
}

var errBadReply = errors.New("unexpected reply from the admission script")

// int64s reads a script's reply of len(out) integers into out.
func int64s(res any, out []int64) error {
	v, ok := res.([]any)
	if !ok || len(v) != len(out) {
		return fmt.Errorf("%w: %T", errBadReply, res)
	}
	for i := range v {
		if out[i], ok = v[i].(int64); !ok {
			return fmt.Errorf("%w: %T at %d", errBadReply, v[i], i)
		}
	}
	return nil
}

func parseOutcome(res any) (store.Outcome, error) {
	var n [11]int64
	if err := int64s(res, n[:]); err != nil {
		return store.Outcome{}, err
	}
	if n[6] < 0 || n[6] > 3 {
		return store.Outcome{}, fmt.Errorf("%w: period %d", errBadReply, n[6])
	}
	return store.Outcome{Allowed: n[0] == 1, Req: n[1], Tok: n[2], ReqWait: n[3], TokWait: n[4], HoldWait: n[5],
		Period: max(int(n[6])-1, 0), Spent: n[7], Reserved: n[8], Slot: n[9], BudgetRefused: n[10] == 1}, nil
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

// HoldWait implements store.Store: Redis's holds are known only by a
// round trip.
func (s *Store) HoldWait(string, time.Time) int64 { return 0 }

// Up implements store.Store: false while any node that served one of
// the store's calls is counted lost (from the `redis lost` log entry to
// `redis back`); the organizations of the other nodes stay exact
// meanwhile.
func (s *Store) Up() bool { return !s.health.down.Load() }

// Stats implements store.Store.
func (s *Store) Stats() store.Stats {
	s.mu.Lock()
	pending := int64(len(s.settles)+len(s.holds)) + s.sending
	s.mu.Unlock()
	return store.Stats{SettlementsDropped: s.dropped.Load(), SettlementsUnanswered: s.lostAnswers.Load(),
		Pending: pending}
}

// countDropped counts n settlements or holds never sent.
func (s *Store) countDropped(n int64) {
	s.dropped.Add(n)
	store.Count(store.Stats{SettlementsDropped: n})
}

// countUnanswered counts n settlements, holds or give-backs whose answer
// was lost.
func (s *Store) countUnanswered(n int64) {
	s.lostAnswers.Add(n)
	store.Count(store.Stats{SettlementsUnanswered: n})
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
// the script goes in the node's next pipeline, with the admissions, and
// settleNow returns once Redis has answered, at most store_timeout later.
// So the reservation has stopped counting before the request ends, for
// every instance's next admission; queued, it would count until the next
// flush, up to settleEvery plus a round trip later, and concurrent
// requests far below the budget would be refused on reservations already
// released. Only what cannot be sent now goes to the queue: while the
// org's node is lost, and when the script did not run (see notSent: no
// connection, no node, a cluster that refused it), to be sent by a flush
// once Redis takes it. One whose answer is lost is counted and not sent
// again (it may have run), as in a flush.
func (s *Store) settleNow(org string, req, tok store.Spec, delta int64, sp store.SpendSettle) {
	c := s.settleCall(org, pendingSettle{req: req, tok: tok, delta: delta, spend: []store.SpendSettle{sp}}, s.clockArg())
	_, err := s.run(context.Background(), c.script, c.keys, c.args...)
	switch {
	case err == nil:
	case notSent(err):
		s.enqueue(org, req, tok, delta, &sp)
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

// settleLoop sends queued settlements and holds, one script each, off the
// clients' response path; at most one call is in flight. After each flush
// it lets the queue fill for settleEvery, so that a busy organization's
// settlements add up to one script per interval instead of one per request
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

// flush sends the queue as pipelines of at most flushLimit scripts per
// node, holds first (they are rarer and matter more to the upstream).
// Nothing is sent to a lost node: its entries wait for its probe. A
// script whose answer is lost is not sent again (it may have run: a
// second debit would charge twice); one that did not run (see notSent: no
// connection, a cluster that refused it) is queued again.
func (s *Store) flush() {
	s.mu.Lock()
	if s.health.allLost() {
		// Nothing could be sent: leave the queue, for the probe.
		abandoned := 0
		if s.closed {
			// Nobody will send it: count it as dropped.
			abandoned = len(s.settles) + len(s.holds)
			clear(s.settles)
			clear(s.holds)
		}
		s.mu.Unlock()
		s.abandon(abandoned)
		return
	}
	var settles map[string]pendingSettle
	var holds map[string]time.Duration
	if len(s.settles) > 0 {
		settles, s.settles = s.settles, make(map[string]pendingSettle)
	}
	if len(s.holds) > 0 {
		holds, s.holds = s.holds, make(map[string]time.Duration)
	}
	s.dropping = false
	s.taken++
	epoch := s.taken
	taken := int64(len(settles) + len(holds))
	s.sending += taken
	s.space.Broadcast()
	s.mu.Unlock()
	// flushed advances only past a flush that left no lease give-back
	// unsent: one queued again below rides in a later flush, and its
	// organization stays on exact admission until that one is answered.
	backLeft := false

	ctx := context.Background()
	clock := s.clockArg()
	var calls []*scriptCall
	var orgs []string
	for org, d := range holds {
		_, hold := s.keys(org)
		calls = append(calls, &scriptCall{script: holdScript, keys: []string{hold}, args: []any{clock, d.Microseconds()}})
		orgs = append(orgs, org)
	}
	nHolds := len(calls)
	for org, p := range settles {
		calls = append(calls, s.settleCall(org, p, clock))
		orgs = append(orgs, org)
	}
	// Per node, in the order of the queue.
	byNode := make(map[*nodeBatcher][]*scriptCall)
	var nodes []*nodeBatcher
	for _, c := range calls {
		node, b, err := s.nodeFor(ctx, c.keys[0])
		if err != nil {
			c.err = err // not sent: queued again below
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
					c.err = errNodeLost // left unsent: queued again below
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

	var lost int64
	abandoned, retry := 0, false
	s.mu.Lock()
	for i, c := range calls {
		if c.err == nil {
			continue
		}
		if !notSent(c.err) {
			lost++
			continue
		}
		if s.closed {
			abandoned++
			continue
		}
		// A lost node's entries wait for its probe; any other that did
		// not run is tried again after the pause.
		retry = retry || !errors.Is(c.err, errLost)
		org := orgs[i]
		if i < nHolds {
			s.holds[org] = max(s.holds[org], holds[org])
		} else {
			p, old := s.settles[org], settles[org]
			backLeft = backLeft || old.reqBack != 0 || old.tokBack != 0
			p.req, p.tok, p.delta = old.req, old.tok, p.delta+old.delta
			p.reqBack, p.tokBack = p.reqBack+old.reqBack, p.tokBack+old.tokBack
			for _, sp := range old.spend {
				p.add(sp)
			}
			s.settles[org] = p
		}
	}
	s.mu.Unlock()
	s.abandon(abandoned)
	s.unanswered(lost)
	if !backLeft {
		s.flushed.Store(epoch)
	}
	// Last: Pending reaches 0 only once the flush is done with, counts
	// and flush number included.
	s.mu.Lock()
	s.sending -= taken
	s.mu.Unlock()
	if retry {
		// Try again after the pause, traffic or not: the failures count
		// towards the node's loss, and then its probe takes over.
		s.wake()
	}
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

// settleCall is the settlement script of p for org.
func (s *Store) settleCall(org string, p pendingSettle, clock string) *scriptCall {
	bucket, _ := s.keys(org)
	req, tok := p.req, p.tok
	keys := []string{bucket}
	args := []any{clock, req.Capacity, req.Rate, tok.Capacity, tok.Rate, tok.Clamp(p.delta)*store.Unit - p.tokBack, p.reqBack}
	for _, sp := range p.spend {
		keys = append(keys, s.budgetKey(org, sp.Period))
		args = append(args, sp.Charge, sp.Release, sp.Slot, sp.End)
	}
	return &scriptCall{script: settleScript, keys: keys, args: args}
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

// keyOrg makes an untrusted organization id safe for a key: braces would
// change the hash tag, so they (with %, spaces and control bytes) are
// percent-encoded, and long ids are hashed. Encoded forms never collide with
// verbatim ones: a verbatim % is always encoded.
func keyOrg(org string) string {
	const maxLen = 128
	if len(org) > maxLen {
		sum := sha256.Sum256([]byte(org))
		return "%h" + hex.EncodeToString(sum[:16])
	}
	if org == "" {
		return "%e"
	}
	special := func(c byte) bool { return c == '{' || c == '}' || c == '%' || c <= ' ' || c == 0x7f }
	if !strings.ContainsFunc(org, func(r rune) bool { return r < 0x80 && special(byte(r)) }) {
		return org
	}
	var b strings.Builder
	for i := 0; i < len(org); i++ {
		if c := org[i]; special(c) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
