// Package store is what the Limiter (policy/limits) and its stores say to
// each other: the Store interface, an admission's Check and a store's
// Outcome, a Settlement, and the bucket arithmetic every store decides
// with, so that the in-process store (memstore) and the Redis store
// (redisstore, whose scripts transliterate this arithmetic) decide alike to
// the unit. A store knows an organization's limits only as each call
// brings them; the Limiter knows no store's insides.
package store

import (
	"context"
	"time"
)

// Store keeps organizations' buckets, upstream holds and budgets: in
// process, or in Redis, shared by every gateway instance. at is the
// Limiter's clock; Redis uses its own server's.
type Store interface {
	// Admit runs c for org: it checks and debits both buckets, the hold
	// (held is the hold this instance knows of, µs left, which the store
	// may not have yet) and the budget, in one step. An error means the
	// store could not decide: on_store_error does.
	Admit(ctx context.Context, org string, c Check, held int64, at time.Time) (Outcome, error)
	// Settle ends one admitted request (see Settlement). A reservation
	// stops counting before Settle returns.
	Settle(org string, st Settlement, at time.Time)
	// Hold refuses org's evaluations for d from at.
	Hold(org string, d time.Duration, at time.Time)
	// HoldWait is what this store knows of org's hold at at, µs left,
	// without a round trip (0 when it keeps none in process).
	HoldWait(org string, at time.Time) int64
	// Up reports whether the store can be asked now: false while Redis is
	// lost, until its probe sees it again.
	Up() bool
	// Stats are the store's counts of what it could not send.
	Stats() Stats
	// Close sends what the store still owes and stops its background
	// work. Calling it again does nothing.
	Close() error
}

// Check is one admission: what it costs and what it consults.
type Check struct {
	Req, Tok         Spec
	ReqCost, TokCost int64 // units; negative: the bucket is not consulted
	Hold             bool  // an upstream hold refuses it
	ReportTok        bool  // the Decision reports the token bucket even unconsulted
	Budget           BudgetCheck
}

// UsesReq reports whether c debits the requests bucket.
func (c Check) UsesReq() bool { return c.Req.On() && c.ReqCost >= 0 }

// UsesTok reports whether c debits the token bucket.
func (c Check) UsesTok() bool { return c.Tok.On() && c.TokCost >= 0 }

// BudgetCheck is the budget part of an admission. Amounts are nano-yuan.
type BudgetCheck struct {
	Limit int64 // 0: no budget applies
	Cost  int64 // to reserve; negative: read only, never refuse
	// Periods are the period that holds the Limiter's now (in the middle)
	// and its neighbours: the Redis script picks one by the server's
	// clock, so that a gateway whose clock is a little off still charges
	// the period Redis is in.
	Periods [3]Period
}

// On reports whether a budget applies.
func (b BudgetCheck) On() bool { return b.Limit > 0 }

// Period is one calendar day or month in the budget's time zone.
type Period struct {
	Name       string    // 2026-11-30 or 2026-11: the key's suffix
	Start, End time.Time // in the budget's time zone
}

// Outcome is a store's answer to a Check.
type Outcome struct {
	Allowed  bool
	Req, Tok int64 // levels after the debit (units), 0 for a bucket off
	// Microseconds until the requests bucket, the token bucket and the hold
	// would let the check pass; 0 where nothing waits.
	ReqWait, TokWait, HoldWait int64
	// The budget, when one applies: which of the check's periods the store
	// is in (0 to 2), what it found spent and reserved (this admission's
	// reservation included), the minute its reservation is filed under,
	// and whether the budget refused the request (which then still counts
	// its one request, unless ReqWait says the requests bucket could not).
	Period          int
	Spent, Reserved int64
	Slot            int64
	BudgetRefused   bool
	// Lease, when not 0, names the lease (local_allowance) that paid the
	// admission's tokens: its settlement is corrected against it first.
	Lease uint64
}

// Settlement is what ends one admitted request.
type Settlement struct {
	// Req and Tok are the organization's buckets, as the Limiter has them
	// now.
	Req, Tok Spec
	// Delta is a correction of the token bucket, in tokens: a refund when
	// negative.
	Delta int64
	// Spend is the budget's charge and the release of the reservation,
	// nil for none.
	Spend *SpendSettle
	// Lease is the lease that paid the admission's tokens
	// (Outcome.Lease), 0 for none.
	Lease uint64
}

// SpendSettle is what a settlement does to a budget period: charge, and
// release a reservation filed under a minute. Amounts are nano-yuan.
type SpendSettle struct {
	Period          string
	End             int64 // the period's end, unix µs
	Slot            int64
	Charge, Release int64
}

// Budget state's bounds, the same in every store.
const (
	// MaxSpent bounds what a period records as spent (4,000,000 yuan, in
	// nano-yuan, four times the largest budget): below 2^53 whatever
	// in-flight requests turn out to cost.
	MaxSpent int64 = 4_000_000 * 1_000_000_000
	// LeaseSlots and SlotMicros: a reservation is filed under the minute
	// of its admission and lapses once that minute is LeaseSlots minutes
	// old (10 to 11 minutes after the admission), so that a settlement
	// that never comes (an instance that crashed mid-request, a settlement
	// lost with Redis) does not hold the budget for the rest of the period.
	LeaseSlots = 11
	SlotMicros = 60_000_000
	// PeriodMargin keeps a period's state this long after it ends, for the
	// settlements of requests admitted before the boundary.
	PeriodMargin = time.Hour
)
