package limits

import (
	"context"
	"time"
)

// store keeps organizations' buckets, upstream holds and budgets: in
// process (localStore) or in Redis, shared by every instance (redisStore).
// The Limiter decides with what a store answers and knows no store's
// insides; a store knows an organization's limits only as each call brings
// them. at is the Limiter's clock; Redis uses its own server's.
type store interface {
	// admit runs c for org: it checks and debits both buckets, the hold
	// (held is the hold this instance knows of, µs left, which the store
	// may not have yet) and the budget, in one step. An error means the
	// store could not decide: on_store_error does.
	admit(ctx context.Context, org string, c check, held int64, at time.Time) (outcome, error)
	// settle ends one admitted request (see settlement). A reservation
	// stops counting before settle returns (see redisStore.settle).
	settle(org string, st settlement, at time.Time)
	// hold refuses org's evaluations for d from at.
	hold(org string, d time.Duration, at time.Time)
	// holdWait is what this store knows of org's hold at at, µs left
	// without a round trip (0 when it keeps none in process).
	holdWait(org string, at time.Time) int64
	// up reports whether the store can be asked now: false while Redis
	// is lost, until its probe sees it again.
	up() bool
	// stats are the store's counts of settlements it could not apply.
	stats() Stats
	// close sends what the store still owes and stops its background
	// work; the in-process store's buckets outlive it (see acquireLocal).
	close() error
}

// settlement is what ends one admitted request.
type settlement struct {
	lim orgLimits // the organization's limits, as the Limiter has them now
	// delta is a correction of the token bucket, in tokens: a refund when
	// negative.
	delta int64
	// spend is the budget's charge and the release of the reservation,
	// nil for none.
	spend *spendSettle
	// lease is the lease that paid the admission's tokens
	// (outcome.lease), 0 for none.
	lease uint64
}
