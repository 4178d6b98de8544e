// Package monitor is the live watch of routing's guarantee: per (model,
// type) group (or (model, type, org) group), an e-process over the
// agreement of the group's audited auto answers with people's labels, for
// the null hypothesis "this group's agreement is at or above the target".
// It holds the process's arithmetic twice, in Go (Update) and in Lua
// (Library, embedded from lua/), computing the same numbers; the Redis
// layout the review API writes and the gateway's alarm watch reads
// (keys.go); and the monitor's state in Redis (Store: the takes, the
// groups, the resets).
//
// The unit of evidence is the audited entry, not the question: the
// questions of one entry share a state, so their agreement is not
// independent. The t-th observation of a group is X_t in [0, 1], the share
// of the entry's labelled auto questions of the group that agree with
// their labels. The process is testing by betting (Waudby-Smith & Ramdas,
// "Estimating means of bounded random variables by betting", JRSSB 2023;
// for a deployed model's risk, Podkopaev & Ramdas, "Tracking the risk of a
// deployed model and detecting harmful distribution shifts", ICLR 2022,
// and Timans et al., "Sequential risk monitoring", UAI 2025):
//
//	K_0 = 1,   K_t = K_{t-1} * (1 + λ_t (target - X_t))
//
// where the bet λ_t is chosen from X_1..X_{t-1} only, in [0, 1/(2(1-target))].
// Under the null, E[X_t | past] >= target, so each factor has conditional
// mean at most 1 whatever the correlation of the questions inside an
// entry, and K is a nonnegative supermartingale that starts at 1: by
// Ville's inequality P(sup_t K_t >= 1/a) <= a, however long the sequence
// runs. The bet follows Online Newton Step (ONS; Cutkosky & Orabona, COLT
// 2018, as used for testing by betting in Shekhar & Ramdas, IEEE Trans.
// Inf. Theory 2023): λ grows while entries disagree more often than the
// target allows and falls back to 0 while they agree, so a group that
// agreed well for a long time still alarms soon after it drifts. Halving
// the bet's range keeps each factor at least 1/2.
//
// Resets spend alpha: the k-th sequence of a group (k = 1 at its first
// observation, plus one at each reset or change of target) raises its
// alarm at level alpha/2^k, so that, by a union bound over the sequences,
// the chance of any false alarm over the group's whole life is at most
// alpha/2 + alpha/4 + ... < alpha.
package monitor

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DefaultAlpha is the alarm level when none is configured: the chance that
// a group whose agreement is at the target ever alarms, over its whole
// life, is at most 5%.
const DefaultAlpha = 0.05

// MaxEvidence caps the evidence so that it stays a finite JSON number. The
// cap keeps the process a supermartingale (min(c, K f) has mean at most
// min(c, K) under the null) and sits far above any alarm level.
const MaxEvidence = 1e300

// maxSequence bounds the sequence number, so that alpha/2^k stays a
// normal float64 (a group reset a thousand times is beyond any real use;
// its later sequences all run at the last level).
const maxSequence = 1000

// onsGain is ONS's step size 2/(2 - ln 3) for bets whose product with the
// outcome stays within [-1/2, 1/2] on the losing side.
const onsGain = 2 / (2 - 1.0986122886681098) // ln 3

// Params are a monitor's settings.
type Params struct {
	// Target is the agreement the null hypothesis holds, in (0, 1).
	Target float64
	// Alpha bounds the chance of a false alarm over a group's whole life,
	// in (0, 1): its k-th sequence alarms at level Alpha/2^k. Default
	// DefaultAlpha.
	Alpha float64
	// MaxQuestions, when above 0, is the most questions of a group an
	// entry may hold: each observation is (Target labels - agree) /
	// MaxQuestions, so that every answer weighs the same whatever the
	// entry's size, and an entry with more is refused (Ledger.Refused);
	// 0 weighs each entry's share of agreeing answers (the same when
	// every entry holds MaxQuestions).
	MaxQuestions int
}

// Validate checks the ranges; NaN is outside both.
func (p Params) Validate() error {
	if !(p.Target > 0 && p.Target < 1) {
		return fmt.Errorf("monitor target %v is outside (0, 1)", p.Target)
	}
	if !(p.Alpha > 0 && p.Alpha < 1) {
		return fmt.Errorf("monitor alpha %v is outside (0, 1)", p.Alpha)
	}
	return nil
}

// Level is the alarm level of the k-th sequence (k >= 1), Alpha/2^k: the
// levels of all sequences sum to less than Alpha. Dividing by a power of
// two is exact, so Lua computes the same bits.
func (p Params) Level(k int64) float64 {
	return math.Ldexp(p.Alpha, -int(min(max(k, 1), maxSequence)))
}

// Threshold is the evidence at which the k-th sequence raises the alarm,
// 1/Level(k).
func (p Params) Threshold(k int64) float64 { return 1 / p.Level(k) }

// maxBet is the largest bet, half of 1/(1 - Target), the bet at which a
// factor could reach 0.
func (p Params) maxBet() float64 { return 0.5 / (1 - p.Target) }

// State is one group's process in its current sequence.
type State struct {
	// Target is the target the process runs at; a state whose target is
	// not the monitor's starts a new sequence at its next observation.
	Target float64
	// Sequence is k, the sequence number: 1 for the first, plus one at
	// each reset; the sequence raises its alarm at Alpha/2^k.
	Sequence int64
	// Entries counts the observations (entries) of the sequence; Labels
	// and Agree the questions they held and those that agreed.
	Entries, Labels, Agree int64
	// Evidence is K_t.
	Evidence float64
	// Bet is λ for the next observation; Curvature is ONS's running
	// 1 + sum of squared gradients.
	Bet, Curvature float64
	// Alarm is set once Evidence reaches the sequence's threshold and stays
	// set until the group is reset.
	Alarm bool
}

// Fresh is the state of a group with no observation: the first sequence,
// evidence 1, no bet.
func Fresh(target float64) State {
	return State{Target: target, Sequence: 1, Evidence: 1, Curvature: 1}
}

// Restarted is the state after a reset: the next sequence, afresh, with
// the alarm cleared.
func (s State) Restarted(target float64) State {
	next := Fresh(target)
	next.Sequence = min(s.Sequence+1, maxSequence)
	return next
}

// At is s as the monitor p reads it: s itself when it runs at p's target,
// else the next sequence at p's target that keeps s's alarm (the evidence
// gathered against another target says nothing about this one, a new
// sequence spends its own share of alpha, and an alarm stays until a
// reset).
func (s State) At(p Params) State {
	if s.Target == p.Target {
		return s
	}
	next := s.Restarted(p.Target)
	next.Alarm = s.Alarm
	return next
}

// Update returns s after one observation, an entry with labels labelled
// auto questions of the group of which agree agree (0 <= agree <= labels,
// labels >= 1), and whether this observation raised the alarm. It is the
// arithmetic of guarantee_update in Library, step by step: only +, -, *,
// / and comparisons, each rounded to float64 on its own (the explicit
// conversions keep the compiler from fusing a multiply and an add, which
// Lua does not do), so both compute the same bits.
func Update(p Params, s State, agree, labels int64) (State, bool) {
	s = s.At(p)
	s.Entries++
	s.Labels += labels
	s.Agree += agree
	var y float64
	if p.MaxQuestions > 0 {
		y = float64(float64(p.Target*float64(labels))-float64(agree)) / float64(p.MaxQuestions)
	} else {
		y = p.Target - float64(agree)/float64(labels)
	}
	f := 1 + float64(s.Bet*y)
	s.Evidence = min(float64(s.Evidence*f), MaxEvidence)
	z := y / f
	s.Curvature = s.Curvature + float64(z*z)
	bet := s.Bet + onsGain*z/s.Curvature
	switch {
	case bet < 0:
		bet = 0
	case bet > p.maxBet():
		bet = p.maxBet()
	}
	s.Bet = bet
	raised := false
	if !s.Alarm && s.Evidence >= p.Threshold(s.Sequence) {
		s.Alarm, raised = true, true
	}
	return s, raised
}

// Encode writes s as Redis stores it: "<target> <sequence> <entries>
// <labels> <agree> <evidence> <bet> <curvature> <alarm 0|1>", each
// fraction with 17 significant digits, which reads back to the same
// float64.
func (s State) Encode() string {
	alarm := "0"
	if s.Alarm {
		alarm = "1"
	}
	return strings.Join([]string{g17(s.Target), strconv.FormatInt(s.Sequence, 10),
		strconv.FormatInt(s.Entries, 10), strconv.FormatInt(s.Labels, 10), strconv.FormatInt(s.Agree, 10),
		g17(s.Evidence), g17(s.Bet), g17(s.Curvature), alarm}, " ")
}

func g17(v float64) string { return strconv.FormatFloat(v, 'g', 17, 64) }

// Decode reads a state Encode or the Lua scripts wrote.
func Decode(v string) (State, error) {
	f := strings.Fields(v)
	if len(f) != 9 {
		return State{}, fmt.Errorf("guarantee state %q: want 9 fields", v)
	}
	var s State
	var err error
	num := func(i int) float64 {
		x, e := strconv.ParseFloat(f[i], 64)
		if e != nil && err == nil {
			err = fmt.Errorf("guarantee state %q: field %d: %v", v, i, e)
		}
		return x
	}
	s.Target, s.Evidence, s.Bet, s.Curvature = num(0), num(5), num(6), num(7)
	s.Sequence, s.Entries, s.Labels, s.Agree = int64(num(1)), int64(num(2)), int64(num(3)), int64(num(4))
	switch f[8] {
	case "0":
	case "1":
		s.Alarm = true
	default:
		return State{}, fmt.Errorf("guarantee state %q: alarm %q", v, f[8])
	}
	if err == nil && (math.IsNaN(s.Evidence) || s.Evidence < 0 || s.Sequence < 1) {
		err = fmt.Errorf("guarantee state %q: evidence %v, sequence %d", v, s.Evidence, s.Sequence)
	}
	return s, err
}
