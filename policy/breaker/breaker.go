// Package breaker answers for the evaluation service while it is overloaded:
// one circuit breaker per requested model opens after a run of consecutive
// failures (529 overloaded, 5xx, unreachable upstream), rejects every request
// for that model until open_for has passed, then lets half_open probes through
// and closes again when they all succeed.
//
// A handler creates a Set with New in Provision, closes it in Cleanup, and for
// each evaluation request:
//
//	t, rej := set.Allow(model)
//	if rej != nil {
//		// answer 529 overloaded with retry-after: rej.RetryAfter in seconds
//	}
//	defer t.Cancel() // releases the ticket on any early return or panic
//	// ... other policies; forward ...
//	t.Done(status, err)
//
// Model names come from clients, so a model gets a breaker only when one of
// its requests fails: a model that has never failed is simply admitted, and a
// request refused or abandoned before the upstream answered never creates
// anything. The breakers of one breaker setting live in one table, bounded by
// MaxModels, in a package-level pool: every loaded config with the same
// settings shares it, so a config reload that leaves the breaker settings
// unchanged keeps every breaker's state (an open breaker stays open), and a
// reload that changes them starts with an empty table.
package breaker

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
)

// Defaults for the fields of Config left at zero.
const (
	DefaultFailures = 5
	DefaultOpenFor  = 30 * time.Second
	DefaultHalfOpen = 1
)

// MaxModels bounds the breakers one table (one breaker setting, shared by
// every config that has it) holds: 1000. Only models that have failed take a
// place. When a new model fails and the table is full, closed breakers are
// dropped first, those with no failures since they last closed or succeeded
// before those in the middle of a run, the least recently used first; an
// open or half-open breaker is dropped only when every breaker in the table
// is open or half-open, and then only the least recently used one. A dropped
// model is admitted, like any model that has not failed, until it fails
// again.
const MaxModels = 1000

// evictBatch is how many closed breakers a full table drops at once, so
// that a stream of new failing models pays for the scan once per batch.
const evictBatch = MaxModels / 8

// MaxModelLen is the longest model name, in bytes, that gets a breaker;
// longer names are not circuit-broken (the upstream answers them 404).
const MaxModelLen = 256

// tables holds one *table per breaker setting in use by a live Set (see
// settings.key).
var tables = caddy.NewUsagePool()

// tableSeq orders tables by creation, so the metric reports a model
// that two settings hold (during a reload) from the newest table.
var tableSeq atomic.Uint64

// settings are what makes two breakers interchangeable.
type settings struct {
	failures uint32
	openFor  time.Duration
	halfOpen uint32
}

func (st settings) key() string {
	return fmt.Sprintf("failures=%d open_for=%d half_open=%d", st.failures, int64(st.openFor), st.halfOpen)
}

// Set is the breakers of one loaded config. Its methods are safe for
// concurrent use; a nil *Set admits everything, so a handler without a
// breaker block can call it unconditionally.
type Set struct {
	table  *table
	logger *zap.Logger
	closed atomic.Bool
}

// New returns a Set with cfg's settings, zero fields taking their defaults,
// or cfg's error (see Validate; the caller names the block).
// A Set with the same settings as a live one shares its breakers. logger
// receives the state changes (warn on open, info on close, info on
// half-open; beyond LogBurst changes to a state per LogInterval, one summary
// line for the rest); nil discards them. Call Close when the config is unloaded.
func New(cfg Config, logger *zap.Logger) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	st := settings{
		failures: cmp.Or(cfg.Failures, DefaultFailures),
		openFor:  cmp.Or(time.Duration(cfg.OpenFor), DefaultOpenFor),
		halfOpen: cmp.Or(cfg.HalfOpen, DefaultHalfOpen),
	}
	v, _, err := tables.LoadOrNew(st.key(), func() (caddy.Destructor, error) {
		t := &table{settings: st, seq: tableSeq.Add(1), models: make(map[string]*breaker)}
		t.changes = newChangeLog(t.logger.Load)
		return t, nil
	})
	if err != nil { // the constructor never fails
		return nil, err
	}
	s := &Set{table: v.(*table), logger: logger}
	s.table.join(s)
	return s, nil
}

// Allow asks model's breaker to admit one request. model is the requested
// model with the default applied (evaluation.Request.ModelOrDefault).
//
// Admitted, it returns a Ticket that must be settled once: Done with the
// upstream's result, or Cancel if the request is not forwarded after all.
// Rejected (open, or half-open with every probe slot taken), it returns a
// nil Ticket and a Rejection for the 529 answer. A model without a breaker
// is admitted, and its Ticket creates the breaker if the request fails. It
// does no network I/O; rejecting takes about 0.3µs.
func (s *Set) Allow(model string) (*Ticket, *Rejection) {
	if s == nil || len(model) > MaxModelLen {
		return &Ticket{}, nil
	}
	b := s.table.lookup(model)
	if b == nil {
		return &Ticket{table: s.table, model: model}, nil
	}
	b.touch()
	done, err := b.cb.Allow()
	if err != nil {
		return nil, b.rejection(err)
	}
	return &Ticket{done: done}, nil
}

// State returns model's breaker state for the request log: "closed", "open"
// or "half-open"; "closed" too for a model without a breaker, which is
// admitted; "" when model is not circuit-broken (over MaxModelLen, or the
// Set is nil).
func (s *Set) State(model string) string {
	if s == nil || len(model) > MaxModelLen {
		return ""
	}
	if b := s.table.lookup(model); b != nil {
		return b.cb.State().String()
	}
	return gobreaker.StateClosed.String()
}

// Close releases the Set's share of its table; the breakers live on while
// another live Set has the same settings. Tickets already handed out stay
// valid, and the Set goes on answering from the table: a request that
// reaches an old config after a reload still meets the breakers the new
// config shares. Once no live Set has the settings, the table is dropped
// and the Set admits everything. Calling Close again does nothing.
func (s *Set) Close() {
	if s == nil || !s.closed.CompareAndSwap(false, true) {
		return
	}
	s.table.leave(s)
	// Destruct cannot fail.
	_, _ = tables.Delete(s.table.key())
}

// table is the breakers of one setting, shared by every live Set that has
// it. Its live list exists only for the logger: a state change is logged
// through the newest live config, because an old config's log writers may
// be closed once it is unloaded, and a new config that fails to load is
// closed while the one it was to replace still runs.
type table struct {
	settings
	seq uint64

	// logger is the newest live Set's; stateChanged reads it under
	// gobreaker's lock, so it is not guarded by mu.
	logger atomic.Pointer[zap.Logger]
	// changes bounds the state-change lines written through logger.
	changes *changeLog

	mu      sync.RWMutex
	models  map[string]*breaker // nil once destructed
	live    []*Set              // oldest first
	created uint64              // breakers created, for their seq
	full    bool                // MaxModels reached and logged
}

// Destruct implements caddy.Destructor: once no Set uses the table, its
// breakers are dropped and a late Ticket creates no new one.
func (t *table) Destruct() error {
	t.mu.Lock()
	t.models = nil
	t.mu.Unlock()
	t.changes.stop()
	return nil
}

func (t *table) join(s *Set) {
	t.mu.Lock()
	t.live = append(t.live, s)
	t.logger.Store(s.logger)
	t.mu.Unlock()
}

func (t *table) leave(s *Set) {
	t.mu.Lock()
	t.live = slices.DeleteFunc(t.live, func(o *Set) bool { return o == s })
	logger := zap.NewNop()
	if n := len(t.live); n > 0 {
		logger = t.live[n-1].logger
	}
	t.logger.Store(logger)
	t.mu.Unlock()
}

func (t *table) lookup(model string) *breaker {
	t.mu.RLock()
	b := t.models[model]
	t.mu.RUnlock()
	return b
}

// fail records the failure of a request admitted while model had no
// breaker, creating the breaker.
func (t *table) fail(model string) {
	b := t.loadOrCreate(model)
	if b == nil {
		return
	}
	b.touch()
	done, err := b.cb.Allow()
	if err != nil {
		return // already open: this failure adds nothing
	}
	if b.changed.Load() {
		// The breaker has opened since this request was admitted. As
		// gobreaker ignores results from an earlier generation, so does
		// this; excluding it frees the slot just taken.
		done(errExcluded)
		return
	}
	done(errFailure)
}

// loadOrCreate returns model's breaker, creating it, or nil once the table
// is destructed.
func (t *table) loadOrCreate(model string) *breaker {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.models == nil {
		return nil
	}
	if b, ok := t.models[model]; ok {
		return b
	}
	if len(t.models) >= MaxModels {
		if !t.full {
			t.full = true
			t.logger.Load().Warn("too many models with circuit breakers; dropping the least recently used closed ones",
				zap.Int("max_models", MaxModels))
		}
		t.evict()
	}
	t.created++
	b := t.newBreaker(model, t.created)
	t.models[model] = b
	return b
}

// evict makes room for at least one breaker, as MaxModels describes. It
// runs under t.mu.
func (t *table) evict() {
	type candidate struct {
		b    *breaker
		rank int // 0 closed without failures, 1 closed in a run, 2 open or half-open
		last int64
	}
	all := make([]candidate, 0, len(t.models))
	closed := 0
	for _, b := range t.models {
		c := candidate{b: b, rank: 2, last: b.lastUsed.Load()}
		if b.cb.State() == gobreaker.StateClosed {
			c.rank = 1
			if b.cb.Counts().ConsecutiveFailures == 0 {
				c.rank = 0
			}
			closed++
		}
		all = append(all, c)
	}
	slices.SortFunc(all, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.last, b.last), cmp.Compare(a.b.seq, b.b.seq))
	})
	n := min(closed, evictBatch)
	if n == 0 {
		n = 1
	}
	for _, c := range all[:n] {
		delete(t.models, c.b.model)
	}
}

func (t *table) newBreaker(model string, seq uint64) *breaker {
	b := &breaker{table: t, model: model, seq: seq}
	b.touch()
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        model,
		MaxRequests: t.halfOpen,
		// Interval 0 never clears the counts while closed: only a run of
		// consecutive failures opens the breaker, however slow.
		Interval: 0,
		Timeout:  t.openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= t.failures
		},
		OnStateChange: b.stateChanged,
		IsExcluded: func(err error) bool {
			return errors.Is(err, errExcluded)
		},
	})
	return b
}

// breaker is one model's circuit breaker in a table.
type breaker struct {
	table *table
	model string
	seq   uint64 // creation order in the table
	cb    *gobreaker.TwoStepCircuitBreaker[struct{}]

	// lastUsed is when a request last asked for the model (Unix ns).
	lastUsed atomic.Int64
	// changed is set at the first state change: a Ticket issued before
	// the breaker existed belongs to its first closed period only.
	changed atomic.Bool
	// halfOpenAt is when the current open period ends.
	halfOpenAt atomic.Pointer[time.Time]
	// outageStart is when it last opened from closed; only stateChanged,
	// under gobreaker's lock, uses it.
	outageStart time.Time
}

func (b *breaker) touch() {
	b.lastUsed.Store(time.Now().UnixNano())
}

// stateChanged is gobreaker's OnStateChange. It runs under the breaker's
// lock, so it only records the time and logs (within the table's budget of
// lines, see LogBurst).
func (b *breaker) stateChanged(_ string, from, to gobreaker.State) {
	// gobreaker computes its expiry from its own time.Now read a moment
	// earlier, so halfOpenAt is never before the real transition: a client
	// told to come back then never finds the breaker still open.
	now := time.Now()
	b.changed.Store(true)
	logger := b.table.logger.Load()
	openFor := b.table.openFor

	switch to {
	case gobreaker.StateOpen:
		at := now.Add(openFor)
		b.halfOpenAt.Store(&at)
		failures := b.table.failures
		if from == gobreaker.StateHalfOpen {
			failures = 1 // a failed probe re-opens
		} else {
			b.outageStart = now
		}
		if b.table.changes.allow(to, now) {
			logger.Warn("circuit breaker opened",
				zap.String("model", b.model),
				zap.Uint32("failures", failures),
				zap.String("from", from.String()),
				zap.Duration("open_for", openFor))
		}
	case gobreaker.StateHalfOpen:
		if b.table.changes.allow(to, now) {
			logger.Info("circuit breaker half-open", zap.String("model", b.model))
		}
	case gobreaker.StateClosed:
		if b.table.changes.allow(to, now) {
			logger.Info("circuit breaker closed",
				zap.String("model", b.model),
				zap.Duration("outage", now.Sub(b.outageStart)))
		}
	}
}

func (b *breaker) rejection(err error) *Rejection {
	if errors.Is(err, gobreaker.ErrTooManyRequests) {
		// Probes are in flight; their results decide within a round trip.
		return &Rejection{State: gobreaker.StateHalfOpen.String(), RetryAfter: time.Second}
	}
	wait := b.table.openFor
	if at := b.halfOpenAt.Load(); at != nil {
		wait = time.Until(*at)
	}
	return &Rejection{State: gobreaker.StateOpen.String(), RetryAfter: ceilSeconds(wait)}
}

// maxRetryAfter is the largest whole number of seconds a Duration holds.
const maxRetryAfter = math.MaxInt64 / time.Second * time.Second

// ceilSeconds rounds d up to whole seconds, at least one.
func ceilSeconds(d time.Duration) time.Duration {
	switch {
	case d <= time.Second:
		return time.Second
	case d >= maxRetryAfter:
		return maxRetryAfter
	}
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}

// Rejection is why Allow refused a request: answer 529 overloaded.
type Rejection struct {
	// State is "open", or "half-open" when every probe slot is taken.
	State string
	// RetryAfter is the time until the breaker lets probes through, rounded
	// up to whole seconds and at least 1s: the retry-after header's value.
	// Half-open it is 1s, since the probes in flight decide soon.
	RetryAfter time.Duration
}

// Ticket is one admitted request's place in its model's breaker. Settle it
// once: Done with the upstream's result, or Cancel if the request never
// reaches the upstream. Further calls do nothing, so deferring Cancel right
// after Allow guarantees a half-open probe slot is never leaked, even on a
// panic, without counting a request twice. A nil Ticket does nothing.
type Ticket struct {
	done func(error) // the breaker's, when the model had one
	// Otherwise, the table that gets a breaker for model if the request
	// fails (nil when the model is not circuit-broken).
	table   *table
	model   string
	settled atomic.Bool
}

// Done reports the result of forwarding the request, classified by
// Classify(status, err).
func (t *Ticket) Done(status int, err error) {
	t.settle(Classify(status, err))
}

// Cancel releases the ticket without counting it: the request was refused
// or abandoned before it could tell anything about the upstream.
func (t *Ticket) Cancel() {
	t.settle(Excluded)
}

func (t *Ticket) settle(o Outcome) {
	if t == nil || !t.settled.CompareAndSwap(false, true) {
		return
	}
	switch {
	case t.done != nil:
		t.done(o.err())
	case t.table != nil && o == Failure:
		t.table.fail(t.model)
	}
}
