// Package cache is the exact answer cache: an upstream's 200 to an
// evaluation request, kept by the asker's org and the request body's exact
// bytes, and answered again to the same org's byte-identical request while
// it lives, to a key the upstream accepted.
//
// Only complete answers from a concrete version are kept: the answer's
// `model` must equal the request's `model` field (so an omitted model or
// an alias, which moves to new versions, is never cached), and it must
// answer every question of its request. Nothing about how the answer was
// routed is kept: the gateway routes every hit afresh, under the
// thresholds in force.
//
// The cache's scope is the org name within one key prefix, per identity
// mode: an org named by org_header, one named by org_keys and a key's own
// fingerprint never share an entry, whatever their names.
//
// Key trust: a hit is served only to a bearer key the upstream accepted
// (answered 200) within the ttl. Beside the entries the cache keeps one
// small record per accepted key (under a hash of the key's SHA-256, never
// the key), read in the same round trip as the entry; a key the upstream
// refuses (401, 403) loses its record at once.
//
// Entries live in Redis when the gateway has `redis` (shared by every
// instance, under key_prefix + "cache:"), else in process (bounded by
// max_entries, kept across reloads that keep the cache settings); both are
// package ttlstore's. The cache never fails a request: a store that fails
// or is slow (over StoreTimeout) is a miss, and a store it could not write
// is forgotten.
package cache

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/ttlstore"
	"github.com/systemone/systemone-gateway/internal/ttlstore/inprocess"
	"github.com/systemone/systemone-gateway/internal/ttlstore/inredis"
)

// StoreTimeout bounds one Redis round trip of the cache (a lookup before
// the admission, a store before the answer goes to the client): a slow
// Redis costs a request at most this, then it is a miss. The same bound
// as the guardrails verdict cache's.
const StoreTimeout = 100 * time.Millisecond

// Bounds of coalescing: at most maxFlights distinct requests are led at
// once (past it a miss leads nothing and nobody waits for it), and at most
// maxFollowers wait for one (past it a miss goes to the upstream itself).
const (
	maxFlights   = 10_000
	maxFollowers = 1_000
)

// RedisClient is the part of a go-redis client the cache uses; the
// handler's redis.UniversalClient (a server or a cluster) is one.
type RedisClient = inredis.Client

// Gauge is what the cache reports the requests waiting for an identical
// miss to (a prometheus.Gauge is one).
type Gauge interface{ Add(float64) }

// Cache is one config's answer cache. It is safe for concurrent use.
type Cache struct {
	store     ttlstore.Store
	waiting   Gauge
	ttl       time.Duration
	maxSize   int64
	now       func() time.Time
	release   func() error
	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	flights map[string]*flight // by entry key
}

// flight is a miss at the upstream that identical requests wait for.
type flight struct {
	done      chan struct{}
	followers int
}

// New validates cfg, applies its defaults and returns the cache. With rdb
// (the gateway's client; the caller keeps owning it) entries live in Redis
// under prefix + "cache:"; without, in process, shared with every config of
// the same prefix and settings (so a reload that keeps them keeps the
// entries). waiting, when not nil, counts the requests waiting for an
// identical miss. A nil logger logs nothing. Call Close when the config is
// retired.
func New(cfg Config, rdb RedisClient, prefix string, logger *zap.Logger, waiting Gauge) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ttl := time.Duration(cfg.TTL)
	var c *Cache
	if rdb != nil {
		c = newWithStore(inredis.New(rdb, inredis.Options{
			Prefix: prefix + "cache:", TTL: ttl, Timeout: StoreTimeout, Logger: logger,
			Name: "answer cache", Degraded: "answering misses",
		}), ttl, cfg.MaxSize)
	} else {
		name := fmt.Sprintf("answers|%s|ttl=%v|max_entries=%d|max_size=%d", prefix, ttl, cfg.MaxEntries, cfg.MaxSize)
		store, release := inprocess.Acquire(name, inprocess.Limits{Entries: cfg.MaxEntries, TTL: ttl})
		c = newWithStore(store, ttl, cfg.MaxSize)
		c.release = release
	}
	if waiting != nil {
		c.waiting = waiting
	}
	return c, nil
}

// newWithStore is a cache over any store.
func newWithStore(s ttlstore.Store, ttl time.Duration, maxSize int64) *Cache {
	return &Cache{store: s, waiting: noGauge{}, ttl: ttl, maxSize: maxSize, now: time.Now, release: func() error { return nil }, flights: make(map[string]*flight)}
}

// noGauge counts nothing.
type noGauge struct{}

func (noGauge) Add(float64) {}

// Lookup is what the cache found for one request: a hit, or a miss.
type Lookup struct {
	asker     Asker
	entryKey  string
	recordKey string
	answer    Answer
	hit       bool
	// keyFresh is whether the key's record is young enough (under half
	// the ttl) not to be written again after another 200.
	keyFresh bool
	// leads is the flight of identical requests waiting for this miss.
	leads *flight
}

// Hit returns the stored answer, when the lookup found one for the asker.
func (l *Lookup) Hit() (Answer, bool) { return l.answer, l.hit }

// Lookup looks for the answer stored for who's request body, in one round
// trip with the record of who's key: an entry is a hit only for an asker
// of its scope and org whose key the upstream accepted within the ttl.
//
// A miss coalesces: while an identical request (same scope, org and body)
// is at the upstream, the miss waits for its answer (or for ctx to end) and
// looks again, so that identical requests arriving together ask the
// upstream once. The second look is as strict as the first: a waiter whose
// key was never accepted misses and goes to the upstream itself. A miss
// that finds no identical request under way leads the ones that arrive
// after it, until Record or Done. Each request passes its own identity,
// limits and guardrails: the wait happens before the admission.
func (c *Cache) Lookup(ctx context.Context, who Asker, body []byte) *Lookup {
	l := &Lookup{asker: who, entryKey: EntryKey(who.Scope, who.Org, body), recordKey: keyRecordKey(who)}
	c.find(ctx, l)
	if !l.hit && c.follow(ctx, l) {
		c.find(ctx, l)
	}
	return l
}

func (c *Cache) find(ctx context.Context, l *Lookup) {
	values := c.store.Get(ctx, l.entryKey, l.recordKey)
	accepted, ok := decodeAccepted(values[1])
	age := c.now().Sub(accepted)
	known := ok && age < c.ttl
	l.keyFresh = known && age < c.ttl/2
	if values[0] == nil || !known {
		return
	}
	scope, org, a, err := decode(values[0])
	if err != nil || scope != l.asker.Scope || org != l.asker.Org {
		return
	}
	l.answer, l.hit = a, true
}

// follow waits for the flight of l's request, if one is under way and
// has room, and reports whether it did; else l leads a new flight, if
// there is room for one.
func (c *Cache) follow(ctx context.Context, l *Lookup) bool {
	c.mu.Lock()
	f, ok := c.flights[l.entryKey]
	switch {
	case !ok && len(c.flights) < maxFlights:
		l.leads = &flight{done: make(chan struct{})}
		c.flights[l.entryKey] = l.leads
		fallthrough
	case !ok || f.followers >= maxFollowers:
		c.mu.Unlock()
		return false
	}
	f.followers++
	c.mu.Unlock()
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	select {
	case <-f.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Done ends the flight l leads, if any: the requests waiting for it look
// again. Calling it again does nothing.
func (c *Cache) Done(l *Lookup) {
	if l == nil || l.leads == nil {
		return
	}
	c.mu.Lock()
	if c.flights[l.entryKey] == l.leads {
		delete(c.flights, l.entryKey)
	}
	c.mu.Unlock()
	close(l.leads.done)
	l.leads = nil
}

// Cacheable reports whether a request can ever be answered from the cache:
// it names a model (a version or an alias; only a version's answers are
// ever stored). A request that is not needs no lookup.
func Cacheable(requestedModel string) bool { return requestedModel != "" }

// Takes reports whether the cache stores an answer: a 200 of at most
// max_size bytes as sent, read (resp; nil when it could not be read),
// answered by the concrete version the request named, and answering
// every question of the request.
func (c *Cache) Takes(status int, req *evaluation.Request, resp *evaluation.Response, size int) bool {
	return status == http.StatusOK && int64(size) <= c.maxSize && resp != nil &&
		Cacheable(req.Model) && resp.Model == req.Model && resp.AnswersAll(req.Questions)
}

// Record takes the upstream's status for a request that missed, in one
// round trip: a 200 says the upstream accepted the asker's key (its record
// is written, unless young) and stores answer when it is not nil (when the
// cache Takes it; its bytes are copied); a 401 or 403 says the upstream
// refuses the key, whose record goes at once. Then the requests waiting
// for this one look again (Done).
func (c *Cache) Record(ctx context.Context, l *Lookup, status int, answer *Answer) {
	defer c.Done(l)
	switch status {
	case http.StatusOK:
		writes := make([]ttlstore.Entry, 0, 2)
		if answer != nil {
			writes = append(writes, ttlstore.Entry{Key: l.entryKey, Value: encode(l.asker.Scope, l.asker.Org, *answer)})
		}
		if !l.keyFresh {
			writes = append(writes, ttlstore.Entry{Key: l.recordKey, Value: encodeAccepted(c.now())})
		}
		c.store.Set(ctx, writes...)
	case http.StatusUnauthorized, http.StatusForbidden:
		c.store.Delete(ctx, l.recordKey)
	}
}

// Close releases the in-process entries, unless a newer config with the
// same settings holds them too. Calling it again does nothing.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.release() })
	return c.closeErr
}
