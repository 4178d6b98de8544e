package redisstore

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// The Redis store's work goes to Redis as calls of one script, batchScript,
// each of which carries many items: admissions, lease grants, settlements
// and holds, each run by the body its kind names. The bodies transliterate
// package store's bucket arithmetic and the budget arithmetic of the
// in-process store (memstore). Every organization's keys share the hash
// tag {org}, so they live in one Redis Cluster slot and one item serves
// them all:
//
//	<prefix>{<org>}:b                hash: r, ra (requests level, at), t, ta (tokens level, at),
//	                                 h (the upstream's hold: evaluations refused until),
//	                                 x (kept until, on the server's clock; see expiry)
//	<prefix>{<org>}:budget:<period>  hash: s (spent), r<minute> (reserved by
//	                                 the requests admitted in that minute), in
//	                                 nano-yuan; <period> is 2026-11-30 or 2026-11
//	<prefix>{<org>}:s:<id>           string "1": the settlement <id> has run
//	                                 (kept for settledFor; see resend.go)
//
// Time is the Redis server's TIME in microseconds, read once per call of
// batchScript (an item's ARGV[1] = ""; tests pin a clock by passing one),
// so gateway clocks never matter. Numbers are written with %d: Lua's
// default number format keeps only 14 digits.
//
// scriptHelpers are the bodies' functions, made once per call of
// batchScript, and the item's state they share (set by scriptPrelude, the
// start of the admission, settlement and lease bodies, which reads the
// item's clock and buckets: every item sets all of it before any is read).
//
//go:embed lua/helpers.lua
var scriptHelpers string

//go:embed lua/prelude.lua
var scriptPrelude string

// admitBody checks and debits both buckets (and checks the hold), and
// checks and reserves the budget, in one round trip: a refusal by any of
// them changes none of them, except that every request counts one request
// when the requests bucket can pay (a client refused on its tokens, its
// budget or an upstream hold must not make the gateway parse for free). ARGV: now, rcap, rrate, tcap,
// trate (units, units/µs; cap 0 is off), rcost, tcost (units; negative: not
// consulted), hold ("1": check it), the caller's own hold (µs left); then
// the budget (nano-yuan; 0: none), its reservation (nano-yuan; negative:
// read only), and the boundaries of the three periods KEYS[2..4] name
// (previous, current, next: the current one's start and end, the next one's
// end; unix µs): the script takes the one that holds its clock. Returns
// {allowed, r, t, rwait, twait, holdwait, period (1-3, 0 without budget),
// spent, reserved, minute, budget refused}.
//
//go:embed lua/admit.lua
var admitBody string

// exactBody is admitBody for an admission without a budget, the common
// one, with the fewest steps: a function of the item's key and the index
// of its first argument in the call's ARGV, which the dispatch calls
// without copying the item's KEYS and ARGV into tables of their own. ARGV
// as admitBody's first nine; returns {1, r, t} when it admits, {0, r, t,
// rwait, twait, holdwait} when it refuses. Its commands are admitBody's without a budget: HMGET, and
// HSET when a bucket changes (PEXPIRE once per time its buckets need).
//
//go:embed lua/exact.lua
var exactBody string

// settleBody runs a settlement once: KEYS[2] names its id (see
// resend.go), which it keeps for settledFor, and a settlement whose id is
// kept already changes nothing. It charges ARGV[6] units to the token
// bucket (a refund when negative), between one bucket of debt and a full
// bucket, and gives ARGV[7] units back to the requests bucket (what a
// lease did not spend), up to a full bucket; ARGV[1..5] as admitBody.
// Each further key is a budget period, with four ARGV from ARGV[8] on:
// the charge, the reservation to release, the minute it was filed under,
// and the period's end (unix µs). A period that is gone is created for a
// charge, unless it ended more than the margin ago. Returns the new token
// level (the level as it is, for a settlement that ran before).
//
//go:embed lua/settle.lua
var settleBody string

// leaseBody gives back what an instance's old lease left (ARGV[10] and
// ARGV[11] units of requests and tokens, up to full buckets) and takes a
// new one, in one step, so that neither is seen without the other. It
// refills as admitBody (ARGV[1..5] alike) and grants, of each bucket,
// its slice (ARGV[8], ARGV[9] units) or what the bucket holds, whichever
// is less, but at least what the admission that asks needs (ARGV[6],
// ARGV[7] units; negative: not consulted): a bucket that cannot pay that
// grants nothing and reports its wait. The requests bucket is asked first;
// when it refuses, no tokens are granted either (as admitBody changes
// nothing then). No tokens are granted while the hold (the field h) lasts:
// evaluations are refused meanwhile. Returns {requests granted, tokens
// granted, r, t (levels after), rwait, twait, holdwait}.
//
//go:embed lua/lease.lua
var leaseBody string

// holdBody refuses evaluations until ARGV[1] (now) + ARGV[2] microseconds,
// unless a longer hold is already in place: the field h of the bucket's
// key (KEYS[1]), read by the admission with the levels, so that checking
// for a hold costs no command of its own. The key is kept at least as
// long as the hold (a missing key's levels read as full buckets), and its
// expiry is never shortened here, so x stays a time it is kept until.
//
//go:embed lua/hold.lua
var holdBody string

// callKind names an item's body in batchScript.
type callKind string

const (
	kindAdmit  callKind = "a" // admitBody
	kindExact  callKind = "x" // exactBody
	kindSettle callKind = "s" // settleBody
	kindLease  callKind = "l" // leaseBody
	kindHold   callKind = "h" // holdBody
)

// batchScript runs many items in one call, in order, each its own body
// with its own KEYS and ARGV, and answers each: one script call, where
// one per item would cost Redis the script machinery of every call
// (about 6µs each on Redis 7) and more than the items' own work. ARGV[1]
// is the number of items; each then has three ARGV (its kind, its
// number of keys, its number of arguments) followed by its arguments;
// KEYS are the items' keys one after the other. Returns an array of one
// answer per item, in order: the body's reply, or an error reply when
// the item failed (a data or script error, or a write Redis refused:
// OOM, READONLY, ...). An item's failure stops that item alone, as it
// would stop its own script: the other items' outcomes stand, each as
// atomic as one script's, since nothing else runs on Redis while a
// script does.
//
//go:embed lua/batch.lua
var batchLua string

var batchScript = redis.NewScript(batchSource())

// batchSource is the batch script's Lua: the helpers, then the dispatch
// with each body in place of its {{NAME}}, then the kinds and the
// constants in place of theirs. A {{NAME}} left over is a Lua syntax
// error, so a name the Go side forgets fails the first call, not quietly.
func batchSource() string {
	bodies := strings.NewReplacer(
		"{{PRELUDE}}", scriptPrelude,
		"{{ADMIT}}", admitBody,
		"{{SETTLE}}", settleBody,
		"{{LEASE}}", leaseBody,
		"{{HOLD}}", holdBody,
		"{{EXACT}}", exactBody,
	).Replace(batchLua)
	return strings.NewReplacer(
		"{{KIND_ADMIT}}", string(kindAdmit),
		"{{KIND_EXACT}}", string(kindExact),
		"{{KIND_SETTLE}}", string(kindSettle),
		"{{KIND_LEASE}}", string(kindLease),
		"{{KIND_HOLD}}", string(kindHold),
		"{{SLOT_MICROS}}", strconv.Itoa(store.SlotMicros),
		"{{LEASE_SLOTS}}", strconv.Itoa(store.LeaseSlots),
		"{{PERIOD_MARGIN_MS}}", strconv.FormatInt(store.PeriodMargin.Milliseconds(), 10),
		"{{MAX_SPENT}}", strconv.FormatInt(store.MaxSpent, 10),
		"{{SETTLED_FOR_MS}}", strconv.FormatInt(settledFor.Milliseconds(), 10),
	).Replace(scriptHelpers + bodies)
}
