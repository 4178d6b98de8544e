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
// Breakers live in a package-level pool keyed by model and settings, so a
// config reload with the same breaker settings keeps every breaker's state.
package breaker

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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

// MaxModels bounds how many models one Set keeps a breaker for, because
// model names come from clients. A model first seen once the bound is reached
// is not circuit-broken: Allow admits it, State reports "", and one warning
// is logged per Set. The next config load starts counting afresh.
const MaxModels = 1000

// MaxModelLen is the longest model name, in bytes, that gets a breaker;
// longer names are not circuit-broken (the upstream answers them 404).
const MaxModelLen = 256

// breakers holds every live breaker, shared by the Sets of old and new
// configs during a reload. Keys are settings plus model (see Set.key).
var breakers = caddy.NewUsagePool()

// Set is the breakers of one loaded config. Its methods are safe for
// concurrent use; a nil *Set admits everything, so a handler without a
// breaker block can call it unconditionally.
type Set struct {
	failures uint32
	openFor  time.Duration
	halfOpen uint32
	logger   *zap.Logger

	mu     sync.RWMutex
	models map[string]*breaker // nil once closed
	full   bool                // MaxModels reached and logged
}

// New returns a Set with cfg's settings, zero fields taking their defaults.
// Breakers are created when a model is first asked for. logger receives the
// state changes (warn on open, info on close, info on half-open); nil
// discards them. Call Close when the config is unloaded.
func New(cfg Config, logger *zap.Logger) (*Set, error) {
	if cfg.OpenFor < 0 {
		return nil, fmt.Errorf("breaker: open_for must be positive, got %v", time.Duration(cfg.OpenFor))
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Set{
		failures: cmp.Or(cfg.Failures, DefaultFailures),
		openFor:  cmp.Or(time.Duration(cfg.OpenFor), DefaultOpenFor),
		halfOpen: cmp.Or(cfg.HalfOpen, DefaultHalfOpen),
		logger:   logger,
		models:   make(map[string]*breaker),
	}
	s.adopt()
	return s, nil
}

// adopt takes a share of every live breaker with the Set's settings. Caddy
// provisions the new config of a reload, then cleans up the old one before
// the new one has seen a request: without this, a model's breaker would lose
// its last user in between and an open breaker would close on a reload.
func (s *Set) adopt() {
	prefix := s.key("")
	var models []string
	breakers.Range(func(key, _ any) bool {
		if k := key.(string); strings.HasPrefix(k, prefix) {
			models = append(models, strings.TrimPrefix(k, prefix))
		}
		return len(models) < MaxModels
	})
	for _, model := range models {
		s.breaker(model)
	}
}

// Allow asks model's breaker to admit one request. model is the requested
// model with the default applied (evaluation.Request.ModelOrDefault).
//
// Admitted, it returns a Ticket that must be settled once: Done with the
// upstream's result, or Cancel if the request is not forwarded after all.
// Rejected (open, or half-open with every probe slot taken), it returns a
// nil Ticket and a Rejection for the 529 answer. It does no network I/O;
// rejecting takes about 0.2µs.
func (s *Set) Allow(model string) (*Ticket, *Rejection) {
	b := s.breaker(model)
	if b == nil {
		return &Ticket{}, nil
	}
	done, err := b.cb.Allow()
	if err != nil {
		return nil, b.rejection(err)
	}
	return &Ticket{done: done}, nil
}

// State returns model's breaker state for the request log: "closed", "open"
// or "half-open"; "" when model has no breaker (never asked for, or not
// circuit-broken, see MaxModels).
func (s *Set) State(model string) string {
	if s == nil {
		return ""
	}
	s.mu.RLock()
	b := s.models[model]
	s.mu.RUnlock()
	if b == nil {
		return ""
	}
	return b.cb.State().String()
}

// Close releases the Set's breakers; a breaker another live Set uses keeps
// its state. Tickets already handed out stay valid. Afterwards the Set admits
// everything. Calling Close again does nothing.
func (s *Set) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.models {
		b.removeOwner(s)
		// Destruct does nothing, so Delete cannot fail.
		_, _ = breakers.Delete(b.key)
	}
	s.models = nil
}

// breaker returns model's breaker, creating it on first use, or nil if model
// is not circuit-broken.
func (s *Set) breaker(model string) *breaker {
	if s == nil || len(model) > MaxModelLen {
		return nil
	}
	s.mu.RLock()
	b, ok := s.models[model]
	s.mu.RUnlock()
	if ok {
		return b
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.models[model]; ok {
		return b
	}
	if s.models == nil { // closed
		return nil
	}
	if len(s.models) >= MaxModels {
		if !s.full {
			s.full = true
			s.logger.Warn("too many models for circuit breakers; further models are not circuit-broken",
				zap.Int("max_models", MaxModels))
		}
		return nil
	}
	key := s.key(model)
	v, _, err := breakers.LoadOrNew(key, func() (caddy.Destructor, error) {
		return s.newBreaker(key, model), nil
	})
	if err != nil { // the constructor never fails
		return nil
	}
	b = v.(*breaker)
	b.addOwner(s)
	s.models[model] = b
	return b
}

// key identifies a breaker across configs. The model goes last so that no
// model name can imitate other settings.
func (s *Set) key(model string) string {
	return fmt.Sprintf("failures=%d open_for=%d half_open=%d model=%s",
		s.failures, int64(s.openFor), s.halfOpen, model)
}

func (s *Set) newBreaker(key, model string) *breaker {
	b := &breaker{
		key:      key,
		model:    model,
		failures: s.failures,
		openFor:  s.openFor,
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        model,
		MaxRequests: s.halfOpen,
		// Interval 0 never clears the counts while closed: only a run of
		// consecutive failures opens the breaker, however slow.
		Interval: 0,
		Timeout:  s.openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= b.failures
		},
		OnStateChange: b.stateChanged,
		IsExcluded: func(err error) bool {
			return errors.Is(err, errExcluded)
		},
	})
	return b
}

// breaker is one model's circuit breaker, shared by every Set with the same
// settings.
type breaker struct {
	key      string
	model    string
	failures uint32
	openFor  time.Duration
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]

	// halfOpenAt is when the current open period ends.
	halfOpenAt atomic.Pointer[time.Time]

	mu          sync.Mutex
	owners      []*Set    // live Sets using the breaker, oldest first
	outageStart time.Time // when it last opened from closed
}

// Destruct implements caddy.Destructor; a breaker holds no resources, the
// pool only counts its users.
func (b *breaker) Destruct() error { return nil }

func (b *breaker) addOwner(s *Set) {
	b.mu.Lock()
	b.owners = append(b.owners, s)
	b.mu.Unlock()
}

func (b *breaker) removeOwner(s *Set) {
	b.mu.Lock()
	b.owners = slices.DeleteFunc(b.owners, func(o *Set) bool { return o == s })
	b.mu.Unlock()
}

// stateChanged is gobreaker's OnStateChange. It runs under the breaker's
// lock, so it only records the time and logs.
func (b *breaker) stateChanged(_ string, from, to gobreaker.State) {
	// gobreaker computes its expiry from its own time.Now read a moment
	// earlier, so halfOpenAt is never before the real transition: a client
	// told to come back then never finds the breaker still open.
	now := time.Now()

	b.mu.Lock()
	defer b.mu.Unlock()
	// The newest config's logger: an old config's log writers may be closed.
	logger := zap.NewNop()
	if n := len(b.owners); n > 0 {
		logger = b.owners[n-1].logger
	}

	switch to {
	case gobreaker.StateOpen:
		at := now.Add(b.openFor)
		b.halfOpenAt.Store(&at)
		failures := b.failures
		if from == gobreaker.StateHalfOpen {
			failures = 1 // a failed probe re-opens
		} else {
			b.outageStart = now
		}
		logger.Warn("circuit breaker opened",
			zap.String("model", b.model),
			zap.Uint32("failures", failures),
			zap.String("from", from.String()),
			zap.Duration("open_for", b.openFor))
	case gobreaker.StateHalfOpen:
		logger.Info("circuit breaker half-open", zap.String("model", b.model))
	case gobreaker.StateClosed:
		logger.Info("circuit breaker closed",
			zap.String("model", b.model),
			zap.Duration("outage", now.Sub(b.outageStart)))
	}
}

func (b *breaker) rejection(err error) *Rejection {
	if errors.Is(err, gobreaker.ErrTooManyRequests) {
		// Probes are in flight; their results decide within a round trip.
		return &Rejection{State: gobreaker.StateHalfOpen.String(), RetryAfter: time.Second}
	}
	wait := b.openFor
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
	done    func(error) // nil when the model is not circuit-broken
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
	if t == nil || t.done == nil || !t.settled.CompareAndSwap(false, true) {
		return
	}
	t.done(o.err())
}
