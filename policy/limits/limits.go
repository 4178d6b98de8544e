// Package limits enforces per-organization token buckets: a requests bucket
// (capacity requests_per_minute, refilled at n/60 per second) and an input
// token bucket (capacity token_burst, refilled at tokens_per_second); and
// spend budgets per calendar day or month.
//
// An evaluation is admitted only if both buckets can pay and the budget is
// not spent; then both are debited and its estimated cost is reserved at
// once, otherwise none of them changes. Its token charge is the handler's
// estimate, capped at the bucket's capacity so that no request is refused
// forever, and is corrected to the upstream's usage afterwards (Settle),
// which also charges its real cost to the budget and releases the
// reservation. An organization the upstream answered 429 is held at the edge
// until its retry-after has passed (Hold).
//
// The Limiter knows organizations, their limits, budget periods and money;
// the state lives behind one interface, store.Store (package store, with
// the bucket arithmetic every store shares): in process (package memstore),
// the default, which survives config reloads; or in Redis (package
// redisstore), shared by every gateway instance, one script call per
// exact admission on the Redis server's clock, behind the leases
// (redisstore.Leases), a store wrapping Redis's that spends slices of an
// organization's buckets in process, one call per lease: by default only
// for organizations admitted at a pace against limits large enough (the
// adaptive allowance), for every organization with local_allowance, for
// none with local_allowance off. When Redis fails, on_store_error decides;
// see Limiter.Admit.
package limits

import (
	"cmp"
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/systemone/systemone-gateway/internal/headerset"
	"github.com/systemone/systemone-gateway/policy/limits/memstore"
	"github.com/systemone/systemone-gateway/policy/limits/redisstore"
	"github.com/systemone/systemone-gateway/policy/limits/store"
	"go.uber.org/zap"
)

// maxHold bounds a hold, whatever retry-after the upstream sent.
const maxHold = time.Hour

// Limiter enforces the limits of one config. It is safe for concurrent use.
type Limiter struct {
	defaults orgLimits
	orgs     map[string]orgLimits
	mode     string
	now      func() time.Time // the in-process buckets' clock

	price   Yuan // per million input tokens
	periods *periodCache

	// local is the in-process store: every organization's without Redis;
	// with Redis, the holds this instance knows of and, with
	// on_store_error local, the fallback.
	local store.Store
	// shared is Redis (with local_allowance, behind its leases), nil
	// without it.
	shared store.Store
	over   *overLimit // orgs refused by their requests bucket, until it refills

	closeOnce sync.Once
	closeErr  error
}

// RedisClient is the part of a go-redis client the limiter uses (see
// redisstore.Client): the handler's *redis.Client or *redis.ClusterClient.
type RedisClient = redisstore.Client

// New validates cfg, applies its defaults, resolves placeholders in the
// organization ids and returns a Limiter. rdb is the gateway's Redis client
// (the caller keeps owning it); nil keeps the buckets in process. prefix
// starts every key, in Redis and in process: configs with the same prefix
// share buckets (across reloads too). A nil logger logs nothing. Call Close
// when the config is retired.
func New(cfg Config, rdb RedisClient, prefix string, logger *zap.Logger) (*Limiter, error) {
	return build(cfg, rdb, prefix, redisstore.Options{Logger: logger}, 0)
}

// build is New with the Redis store's settings (o, whose Timeout comes
// from cfg) and the leases' sweep period (0: the default).
func build(cfg Config, rdb RedisClient, prefix string, o redisstore.Options, sweepEvery time.Duration) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	repl := caddy.NewReplacer()
	defaults, _ := cfg.defaults().apply(defaultLimits)
	loc, _ := loadZone(cfg.BudgetTimezone)
	l := &Limiter{
		defaults: defaults,
		orgs:     make(map[string]orgLimits, len(cfg.Orgs)),
		mode:     cfg.OnStoreError,
		now:      time.Now,
		price:    DefaultPrice,
		periods:  &periodCache{loc: loc},
		over:     newOverLimit(maxOverLimit),
	}
	if cfg.Price != nil {
		l.price = *cfg.Price
	}
	for org, o := range cfg.Orgs {
		l.orgs[repl.ReplaceAll(org, "")], _ = o.apply(defaults)
	}
	if l.mode == "" {
		l.mode = StoreErrorLocal
	}
	o.Timeout = cmp.Or(time.Duration(cfg.StoreTimeout), DefaultStoreTimeout)
	l.local = memstore.Acquire(prefix)
	if rdb != nil {
		rs := redisstore.New(rdb, prefix, o)
		l.shared = rs
		if a := cfg.allowance(); a.Mode != AllowanceOff {
			share, interval := a.settings()
			l.shared = redisstore.NewLeases(rs, redisstore.LeaseOptions{Share: share, Interval: interval,
				Now: func() time.Time { return l.now() }, Specs: l.specsFor, SweepEvery: sweepEvery,
				Adaptive: a.Mode == AllowanceAdaptive})
		}
	} else if a := cfg.LocalAllowance; a != nil && a.Mode != AllowanceOff {
		// In process every admission is local already.
		o.Logger.Warn("local_allowance has no effect without redis")
	}
	live.Store(l, struct{}{})
	return l, nil
}

// Close sends the settlements still queued for Redis (giving up if Redis is
// lost), stops the background work and releases the shared in-process
// buckets; the Redis client stays open, its owner closes it. Calling it again
// does nothing.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		if l.shared != nil {
			_ = l.shared.Close()
		}
		l.closeErr = l.local.Close()
		live.Delete(l)
	})
	return l.closeErr
}

// Limits that refuse a request, as Decision.Bucket names them.
const (
	BucketRequests = "requests"
	BucketTokens   = "tokens"
	BucketHold     = "upstream_hold"
	BucketBudget   = "budget"
)

// Decision is the answer to one admission.
type Decision struct {
	// Allowed admits the request.
	Allowed bool
	// Unavailable means Redis failed with on_store_error deny: answer 503
	// rate_limiter_unavailable with retry-after 1. Allowed is false.
	Unavailable bool
	// RetryAfter is, when the request is refused, the time until it could
	// pass (every bucket can pay and no hold is left; for a budget, until
	// the period resets), in whole seconds and at least one second.
	RetryAfter time.Duration
	// Message is the 429 or 402 detail, naming the limit that was hit.
	Message string
	// Bucket names the limit that refused the request: BucketRequests,
	// BucketTokens, BucketHold (the upstream's own 429 for the org) or
	// BucketBudget (answer 402 budget_exceeded).
	Bucket string
	// Requests and Tokens report the two buckets (see Quota).
	Requests, Tokens Quota
	// Budget reports the org's budget, when one applies (see Spend).
	Budget Spend
	// Charged is the number of input tokens debited: the estimate capped at
	// token_burst, 0 when the token bucket is off or nothing was charged.
	// Settle takes it from the Decision.
	Charged int64

	org string
	// by names the store that charged, for Settle: the Decision holds no
	// store of its own, only the Limiter that admitted it does.
	by    chargedBy
	price Yuan              // of the admission's config: Settle charges at it
	spend store.SpendSettle // the reservation to settle (Period "" for none)
	// leaseSeq, when not 0, is the lease of org that paid the tokens
	// (local_allowance): Settle corrects against it first, if it is still
	// the organization's lease.
	leaseSeq uint64
}

// chargedBy names the store that charged an admission.
type chargedBy uint8

const (
	chargedNone   chargedBy = iota // nothing to settle (refused, or allowed with no store)
	chargedLocal                   // the in-process store
	chargedShared                  // Redis
)

// Price is the price per million input tokens of the admission's config
// (DefaultPrice for a zero Decision).
func (d Decision) Price() Yuan {
	if d.price == 0 {
		return DefaultPrice
	}
	return d.price
}

// Cost is what tokens input tokens cost at the admission's Price, rounded
// up to a whole nano-yuan.
func (d Decision) Cost(tokens int64) Yuan { return Yuan(cost(tokens, d.Price())) }

// Quota reports one bucket after an admission.
type Quota struct {
	// Limit is the bucket's capacity: requests_per_minute or token_burst;
	// 0 when the bucket is off.
	Limit int64
	// Remaining is what the bucket holds after the admission, in whole
	// requests or tokens (0 while in debt); -1 when unknown because Redis
	// failed and on_store_error is allow or deny.
	Remaining int64
}

// SetHeaders sets the X-RateLimit-* headers of d on h, and the X-Budget-*
// ones for an answer that costs nothing (see Spend.SetHeaders). A bucket
// that is off sets neither of its headers; an unknown remaining omits that
// header.
func (d Decision) SetHeaders(h http.Header) {
	var s headerset.Set
	d.AddHeaders(&s)
	s.WriteTo(h)
}

// AddHeaders adds what SetHeaders sets to s, which the handler writes with
// the response's other fields of the gateway at once.
func (d Decision) AddHeaders(s *headerset.Set) {
	d.AddRateLimitHeaders(s)
	d.Budget.AddHeaders(s, 0)
}

// AddRateLimitHeaders adds the X-RateLimit-* headers of d to s (the
// budget's aside).
func (d Decision) AddRateLimitHeaders(s *headerset.Set) {
	for _, b := range [2]struct {
		limit, remaining string
		q                Quota
	}{{headerLimitRequests, headerRemainingRequests, d.Requests}, {headerLimitTokens, headerRemainingTokens, d.Tokens}} {
		if b.q.Limit == 0 {
			continue
		}
		s.AddInt(b.limit, b.q.Limit)
		if b.q.Remaining >= 0 {
			s.AddInt(b.remaining, b.q.Remaining)
		}
	}
}

// The rate-limit headers, in the canonical form net/http writes them in
// (X-RateLimit-… canonicalizes to X-Ratelimit-…), so that setting them
// needs no canonicalization per request.
const (
	headerLimitRequests     = "X-Ratelimit-Limit-Requests"
	headerRemainingRequests = "X-Ratelimit-Remaining-Requests"
	headerLimitTokens       = "X-Ratelimit-Limit-Tokens"
	headerRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
)

// Admit decides on an evaluation request of org estimated at estimatedTokens
// input tokens: both buckets, any upstream hold and the budget. The token
// charge is the estimate capped at token_burst; the budget reserves the
// estimate's whole cost, and admits the request while what the period has
// spent and reserved is below the budget. A budget refusal counts the
// request against the requests bucket (as AdmitRequest does) and changes
// nothing else; when that bucket cannot pay, the requests bucket's refusal
// is the answer (its 429 comes first, so that the over-limit cache and the
// budget agree); otherwise the budget's 402 comes before the waits of the
// token bucket and the hold, which would only lead to it.
//
// With Redis, an exact admission costs one round trip bounded by
// store_timeout (and ctx); one paid from a lease (the adaptive allowance
// for an organization at a pace on a large limit, or local_allowance)
// none while the organization's lease can pay it, and one per new lease
// (organizations with a budget stay exact).
// If that fails, on_store_error decides: local admits against the
// in-process buckets with the same limits, allow admits, deny answers
// Unavailable. After three consecutive outage errors of one Redis node, that
// node counts as lost: the admissions of the organizations it serves take
// the on_store_error path at once until a background probe sees it serve
// a keyed script again; on a Redis Cluster, the organizations of the other
// masters stay exact meanwhile.
func (l *Limiter) Admit(ctx context.Context, org string, estimatedTokens int64) Decision {
	lim := l.limitsFor(org)
	c := store.Check{Req: lim.requests(), Tok: lim.tokens(), ReqCost: store.Unit, TokCost: -1, Hold: true}
	if c.Tok.On() {
		c.TokCost = min(max(estimatedTokens, 0), lim.burst) * store.Unit
	}
	c.Budget = l.budgetCheck(lim, cost(estimatedTokens, l.price))
	return l.admit(ctx, org, lim, c)
}

// budgetCheck is the budget part of an admission that reserves amount
// (negative: one that only reads the budget).
func (l *Limiter) budgetCheck(lim orgLimits, amount int64) store.BudgetCheck {
	if lim.budget == 0 {
		return store.BudgetCheck{}
	}
	return store.BudgetCheck{Limit: int64(lim.budget), Cost: amount, Periods: l.periods.around(l.now(), lim.per)}
}

// AdmitRequest counts one request of org against the requests bucket
// only, and refuses it when that bucket is empty: any request through the
// directive other than an evaluation, and an evaluation the gateway refuses
// itself (413, 422, an open breaker's 529), so that no client can make the
// gateway read and parse bodies for free. The token bucket and the budget
// are reported (for the headers) but neither charged nor consulted; upstream
// holds apply to forwarded evaluations only.
func (l *Limiter) AdmitRequest(ctx context.Context, org string) Decision {
	lim := l.limitsFor(org)
	return l.admit(ctx, org, lim, store.Check{Req: lim.requests(), Tok: lim.tokens(), ReqCost: store.Unit, TokCost: -1, ReportTok: true,
		Budget: l.budgetCheck(lim, -1)})
}

// KnownOver reports whether this instance already knows org to be over its
// requests-per-minute limit: an admission refused it on that bucket and the
// bucket has not refilled one request since. The refusal to give is the
// Decision (its RetryAfter counts from now). It costs no round trip, so the
// handler asks it before reading a body. Every instance sharing a Redis
// bucket would refuse the request too: only time refills a requests bucket.
func (l *Limiter) KnownOver(org string) (Decision, bool) {
	now := l.now()
	d, over := l.over.lookup(org, now)
	if over && d.Budget.Limit > 0 && !now.Before(d.Budget.Reset) {
		// The refusal was noted in a period that has ended since.
		p := l.periods.around(now, d.Budget.Per)[1]
		d.Budget = Spend{Limit: d.Budget.Limit, Per: d.Budget.Per, Reset: p.End, Spent: -1, Reserved: -1}
	}
	return d, over
}

func (l *Limiter) admit(ctx context.Context, org string, lim orgLimits, c store.Check) Decision {
	t := l.now()
	if l.shared == nil {
		o, _ := l.local.Admit(ctx, org, c, 0, t) // in process it cannot fail
		return l.decide(org, lim, c, o, chargedLocal)
	}
	// Holds are also kept in process, so that this instance honours one at
	// once, before Redis has it, and while Redis is away.
	var held int64
	if c.Hold {
		held = l.local.HoldWait(org, t)
	}
	if o, err := l.shared.Admit(ctx, org, c, held, t); err == nil {
		return l.decide(org, lim, c, o, chargedShared)
	}
	if l.mode == StoreErrorLocal {
		o, _ := l.local.Admit(ctx, org, c, held, t)
		return l.decide(org, lim, c, o, chargedLocal)
	}
	var d Decision
	switch {
	case held > 0:
		d = l.decide(org, lim, c, store.Outcome{HoldWait: held, Period: 1}, chargedNone)
	case l.mode == StoreErrorAllow:
		d = l.decide(org, lim, c, store.Outcome{Allowed: true, Period: 1}, chargedNone)
		d.Charged, d.spend = 0, store.SpendSettle{} // nothing to settle
	default:
		d = l.decide(org, lim, c, store.Outcome{Period: 1}, chargedNone)
		d.Unavailable, d.RetryAfter, d.Message, d.Bucket = true, time.Second, "", ""
	}
	if d.Requests.Limit > 0 {
		d.Requests.Remaining = -1
	}
	if d.Tokens.Limit > 0 {
		d.Tokens.Remaining = -1
	}
	if d.Budget.Limit > 0 {
		d.Budget.Spent, d.Budget.Reserved, d.Budget.Own = -1, -1, 0
	}
	return d
}

// decide turns a store's outcome into a Decision.
func (l *Limiter) decide(org string, lim orgLimits, c store.Check, o store.Outcome, by chargedBy) Decision {
	d := Decision{Allowed: o.Allowed, org: org, by: by, price: l.price, leaseSeq: o.Lease}
	if c.Budget.On() {
		p := c.Budget.Periods[o.Period]
		d.Budget = Spend{Limit: Yuan(c.Budget.Limit), Per: lim.per, Reset: p.End, Spent: Yuan(o.Spent), Reserved: Yuan(o.Reserved)}
		if o.Allowed && c.Budget.Cost >= 0 {
			d.Budget.Own = Yuan(c.Budget.Cost)
			d.spend = store.SpendSettle{Period: p.Name, End: p.End.UnixMicro(), Slot: o.Slot, Release: c.Budget.Cost}
		}
	}
	if c.Req.On() {
		d.Requests = Quota{Limit: lim.rpm, Remaining: max(o.Req/store.Unit, 0)}
	}
	if c.UsesTok() || (c.ReportTok && c.Tok.On()) {
		d.Tokens = Quota{Limit: lim.burst, Remaining: max(o.Tok/store.Unit, 0)}
	}
	if o.Allowed {
		if c.UsesTok() {
			d.Charged = c.TokCost / store.Unit
		}
		return d
	}
	if o.ReqWait > 0 {
		// Until the requests bucket refills one request, every admission
		// of this org is refused, on every instance: remember it.
		over := Decision{Bucket: BucketRequests, Message: requestsMessage(lim, org), Requests: Quota{Limit: lim.rpm}, Tokens: d.Tokens, Budget: d.Budget}
		now := l.now()
		l.over.note(org, now, now.Add(time.Duration(o.ReqWait)*time.Microsecond), over)
	}
	if o.BudgetRefused && o.ReqWait == 0 {
		d.Bucket = BucketBudget
		d.Message = budgetMessage(lim, org, d.Budget.Reset)
		d.RetryAfter = max((d.Budget.Reset.Sub(l.now())+time.Second-1)/time.Second*time.Second, time.Second)
		return d
	}
	wait := max(o.ReqWait, o.TokWait, o.HoldWait)
	secs := max((wait+999_999)/1_000_000, 1)
	d.RetryAfter = time.Duration(secs) * time.Second
	switch {
	case o.HoldWait > 0:
		d.Bucket = BucketHold
		d.Message = "Rate limit exceeded: the upstream limited organization " + org + "; retry after " + strconv.FormatInt(secs, 10) + "s"
	case o.ReqWait >= o.TokWait:
		d.Bucket = BucketRequests
		d.Message = requestsMessage(lim, org)
	default:
		d.Bucket = BucketTokens
		d.Message = "Rate limit exceeded: " + strconv.FormatInt(lim.tps, 10) + " input tokens per second for organization " + org
	}
	return d
}

func requestsMessage(lim orgLimits, org string) string {
	return "Rate limit exceeded: " + strconv.FormatInt(lim.rpm, 10) + " requests per minute for organization " + org
}

// Settle corrects an admitted evaluation's token charge to the upstream's
// count, charges its cost to the budget and releases its reservation:
// actualTokens is usage.input_tokens of a 200 (the estimate for a 200
// without usage), or 0 when the upstream failed or the gateway refused the
// request after admitting it (nothing was billed, everything is refunded).
// The cost is at the price of the admission's config, so that a price
// changed by a reload applies from the next request. The difference goes to
// the store that charged: at once in process. With Redis, a request that
// holds a budget reservation is settled at once too, in the next pipeline
// with the admissions, and Settle waits for Redis's answer (at most
// store_timeout): its reservation stops counting before its request ends,
// on every instance. A token correction alone is queued (off the response
// path; a queue of at most one entry per organization, sent every
// settleEvery). What cannot be sent, or what Redis refused without running
// it (a lost node, a cluster that answers CLUSTERDOWN, MOVED, TRYAGAIN,
// ...), is queued until Redis takes it, and dropped past maxPending
// organizations while a node is lost: a reservation whose settlement is lost
// lapses after 10 to 11 minutes, a charge is lost. A refund never lifts a bucket above
// capacity; an extra charge may put it in debt, at most one bucket deep.
// With local_allowance, an admission paid from a lease is corrected against
// that lease when it still holds enough (a refund always), else as above.
// Settle does nothing for a refused Decision, nor for one that no store
// charged (on_store_error allow after a failure). The cost of an admission
// decided in process because Redis failed is also queued for Redis's total.
func (l *Limiter) Settle(d Decision, actualTokens int64) {
	if !d.Allowed || d.by == chargedNone {
		return
	}
	lim := l.limitsFor(d.org)
	var delta int64
	if lim.tps > 0 {
		delta = lim.tokens().Clamp(max(actualTokens, 0) - d.Charged)
	}
	var sp *store.SpendSettle
	if d.spend.Period != "" {
		s := d.spend
		s.Charge = cost(actualTokens, d.price)
		if s.Charge > 0 || s.Release > 0 {
			sp = &s
		}
	}
	if delta == 0 && sp == nil {
		return
	}
	t := l.now()
	st := store.Settlement{Req: lim.requests(), Tok: lim.tokens(), Delta: delta, Spend: sp, Lease: d.leaseSeq}
	if d.by == chargedShared {
		l.shared.Settle(d.org, st, t)
		return
	}
	l.local.Settle(d.org, st, t)
	if l.shared != nil && sp != nil && sp.Charge > 0 {
		// Admitted in process because Redis failed (on_store_error
		// local): the money is owed to Redis's total for the period
		// too, or the fleet's record would stay short by the outage's
		// spend. It is queued like any settlement and sent once Redis
		// is back; the reservation was in process only.
		owed := *sp
		owed.Release = 0
		l.shared.Settle(d.org, store.Settlement{Req: st.Req, Tok: st.Tok, Spend: &owed}, t)
	}
}

// Hold refuses org's evaluations for retryAfter (at least 1s, at most an
// hour) because the upstream answered 429: on this instance at once, on
// every instance once Redis has it (queued like Settle).
func (l *Limiter) Hold(org string, retryAfter time.Duration) {
	retryAfter = min(max(retryAfter, time.Second), maxHold)
	t := l.now()
	l.local.Hold(org, retryAfter, t)
	if l.shared != nil {
		l.shared.Hold(org, retryAfter, t)
	}
}

func (l *Limiter) limitsFor(org string) orgLimits {
	if lim, ok := l.orgs[org]; ok {
		return lim
	}
	return l.defaults
}

// specsFor is org's two buckets, for the leases' give-backs.
func (l *Limiter) specsFor(org string) (req, tok store.Spec) {
	lim := l.limitsFor(org)
	return lim.requests(), lim.tokens()
}
