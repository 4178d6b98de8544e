// Package redisstore is the limits' store in Redis, shared by every
// gateway instance. Its files, by responsibility: the store and its
// settings (redisstore.go); the scripts, on the Redis server's clock
// (script.go); admissions and leases as calls of those scripts
// (admit.go), the calls of concurrent requests pipelined per node
// (batch.go); the queue of settlements of token corrections and holds,
// flushed off the response path (queue.go); Redis's health judged per
// node (health.go); and the leases of local_allowance (lease.go), which
// spend slices of an organization's buckets in process. It alone knows
// go-redis's concrete types: a Redis Cluster's scripts go to the master
// that owns the organization's slot (see redispool.ForKey).
package redisstore

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

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
	// 100,000, maxPending), and the settlements kept to send again.
	MaxPending int
	// RetryFor is how long a settlement whose answer was lost is sent
	// again: 1 minute (retryFor) by default, and at most that (Redis
	// remembers a settlement's id for twice as long; see resend.go).
	RetryFor time.Duration
}

// Store keeps the buckets in Redis, shared by every gateway instance. It
// is safe for concurrent use.
type Store struct {
	client Client // the handler's: never closed here
	// cluster says client is a Redis Cluster's: a script call then holds
	// the keys of one slot only (see scriptGroups).
	cluster bool
	prefix  string
	timeout time.Duration
	logger  *zap.Logger
	// now is the scripts' clock (Options.Clock); nil uses the server's TIME.
	now func() time.Time
	// probeMin and probeMax bound the probe's backoff.
	probeMin, probeMax time.Duration
	// settleEvery is the pause after each flush of the queue.
	settleEvery time.Duration
	// retryFor is how long a settlement whose answer was lost is sent
	// again (Options.RetryFor).
	retryFor time.Duration

	scriptErrSeen atomic.Bool
	health        healthTable

	// batchers holds a *nodeBatcher per node address (see run), which
	// also holds the node's health.
	batchers   sync.Map
	maxPending int

	mu      sync.Mutex // guards the fields below
	closed  bool
	settles map[string]pendingSettle
	holds   map[string]time.Duration
	// resends are the settlements whose answer was lost, to send again
	// (see resend.go).
	resends  []resend
	dropping bool // a settlement was dropped since the last flush
	// space is signalled when a flush takes the queue, Redis is lost or
	// the store closes: what settle and hold wait for when it is full.
	space *sync.Cond
	// lostAnswers counts settlements and holds that may or may not have
	// run and are not sent again: answered with a script error, or whose
	// answer was lost and that were not answered within retryFor (or
	// before the store closed); dropped counts those never sent (Redis
	// lost and the queue full).
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
		retryFor:    min(cmp.Or(o.RetryFor, retryFor), retryFor),
		settles:     make(map[string]pendingSettle),
		maxPending:  cmp.Or(o.MaxPending, maxPending),
		holds:       make(map[string]time.Duration),
		kick:        make(chan struct{}, 1),
		urgent:      make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	_, s.cluster = client.(*redis.ClusterClient)
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

// bucketKey names org's hash of its buckets and hold (see script.go).
func (s *Store) bucketKey(org string) string {
	return s.prefix + "{" + keyOrg(org) + "}:b"
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
	pending := int64(len(s.settles)+len(s.holds)+len(s.resends)) + s.sending
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
