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
	"bytes"
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

	// marks writes the markers of the flights led here, in Redis; nil
	// in process.
	marks ttlstore.Store
	// markAfter is how long a flight's upstream call lasts before its
	// marker is written: markAfter, but in tests.
	markAfter time.Duration

	mu      sync.Mutex
	flights map[string]*flight // by entry key
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
		c.marks = inredis.New(rdb, inredis.Options{
			Prefix: prefix + "cache:", TTL: markerTTL, Timeout: StoreTimeout, Logger: logger,
			Name: "answer cache's markers", Degraded: "coalescing in process only",
		})
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
	return &Cache{store: s, waiting: noGauge{}, ttl: ttl, maxSize: maxSize, now: time.Now, release: func() error { return nil }, flights: make(map[string]*flight), markAfter: markAfter}
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
	// known is whether the upstream accepted the asker's key within the
	// ttl, as the key's record says; keyFresh whether that record is
	// young enough (under half the ttl) not to be written again after
	// another 200.
	known, keyFresh bool
	// failure is the failure of the identical request this one waited
	// for, handed over instead of asking the upstream again.
	failure *Answer
	// leads is the flight of identical requests waiting for this miss.
	leads *flight
}

// Hit returns the stored answer, when the lookup found one for the asker
// (or the answer of the identical request it waited for).
func (l *Lookup) Hit() (Answer, bool) { return l.answer, l.hit }

// Failed returns the failure of the identical request this one waited
// for: an upstream 5xx, or the gateway's 502 or 504 (Answer.Reject set).
// The request answers it instead of asking the upstream.
func (l *Lookup) Failed() (Answer, bool) {
	if l == nil || l.failure == nil {
		return Answer{}, false
	}
	return *l.failure, true
}

// Leads reports whether identical requests may wait for this one's
// answer: its upstream's failure is then worth keeping whole (Fail).
func (l *Lookup) Leads() bool { return l != nil && l.leads != nil }

// Lookup looks for the answer stored for who's request body, in one round
// trip with the record of who's key: an entry is a hit only for an asker
// of its scope and org whose key the upstream accepted within the ttl.
//
// A miss coalesces (see flight.go): while an identical request (same
// scope, org and body) is at the upstream, here or at another instance
// sharing Redis, the miss waits for it and takes its outcome. A request
// with the leader's own key waits without a lookup.
func (c *Cache) Lookup(ctx context.Context, who Asker, body []byte) *Lookup {
	l := &Lookup{asker: who, entryKey: EntryKey(who.Scope, who.Org, body), recordKey: keyRecordKey(who)}
	if c.joinSameKey(ctx, l) {
		return l
	}
	remote := c.find(ctx, l)
	if !l.hit {
		c.coalesce(ctx, l, remote)
	}
	return l
}

// find reads the entry and the key's record (and, with Redis, the
// request's marker, which it returns: another instance's flight), in one
// round trip.
func (c *Cache) find(ctx context.Context, l *Lookup) (marker []byte) {
	keys := []string{l.entryKey, l.recordKey}
	if c.marks != nil {
		keys = append(keys, markerKey(l.entryKey))
	}
	values := c.store.Get(ctx, keys...)
	accepted, ok := decodeAccepted(values[1])
	age := c.now().Sub(accepted)
	l.known = ok && age < c.ttl
	l.keyFresh = l.known && age < c.ttl/2
	if c.marks != nil {
		marker = values[2]
	}
	if c.entryFor(l, values[0]) {
		return nil
	}
	return marker
}

// entryFor makes l a hit when value is an entry of its asker's scope and
// org, and the asker's key is known accepted.
func (c *Cache) entryFor(l *Lookup, value []byte) bool {
	if value == nil || !l.known {
		return false
	}
	scope, org, a, err := decode(value)
	if err != nil || scope != l.asker.Scope || org != l.asker.Org {
		return false
	}
	l.answer, l.hit = a, true
	return true
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
// refuses the key, whose record goes at once. The requests waiting for
// this one take answer at once, before the store; with none, they go to
// the upstream themselves.
func (c *Cache) Record(ctx context.Context, l *Lookup, status int, answer *Answer) {
	defer c.Done(l)
	switch status {
	case http.StatusOK:
		writes := make([]ttlstore.Entry, 0, 2)
		if answer != nil {
			v := encode(l.asker.Scope, l.asker.Org, *answer)
			writes = append(writes, ttlstore.Entry{Key: l.entryKey, Value: v})
			_, _, shared, _ := decode(v) // the waiters share the stored bytes
			c.end(l, &shared, nil)
		}
		if !l.keyFresh {
			writes = append(writes, ttlstore.Entry{Key: l.recordKey, Value: encodeAccepted(c.now())})
		}
		c.store.Set(ctx, writes...)
	case http.StatusUnauthorized, http.StatusForbidden:
		c.store.Delete(ctx, l.recordKey)
	}
}

// Fail takes the failure of a request that missed and leads identical
// ones: an upstream 5xx read whole, or the gateway's own 502 or 504 for an
// upstream that could not be reached or timed out (a.Reject set). The
// requests waiting for it, here and at other instances, answer it too,
// at once, instead of asking a failing upstream again. a's body is copied.
func (c *Cache) Fail(l *Lookup, a Answer) {
	if !l.Leads() {
		return
	}
	a.Body = bytes.Clone(a.Body)
	c.end(l, nil, &a)
	c.Done(l)
}

// Close releases the in-process entries, unless a newer config with the
// same settings holds them too. Calling it again does nothing.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.release() })
	return c.closeErr
}
