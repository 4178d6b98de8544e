// Package guarantee is the live watch of routing's guarantee: per (model,
// type) group, an e-process over the agreement of the group's audited auto
// answers with people's labels, for the null hypothesis "this group's
// agreement is at or above the target". It holds the process's arithmetic
// twice, in Go (Update) and in Lua (LuaUpdate, run by Redis atomically with
// the label that makes the observation), computing the same numbers, and
// the Redis layout that the review handler writes and the gateway reads.
//
// The process is testing by betting (Waudby-Smith & Ramdas, "Estimating
// means of bounded random variables by betting", JRSSB 2023; for a
// deployed model's risk, Podkopaev & Ramdas, "Tracking the risk of a
// deployed model and detecting harmful distribution shifts", ICLR 2022):
// with X_t = 1 when the t-th label agrees with the model's answer,
//
//	K_0 = 1,   K_t = K_{t-1} * (1 + λ_t (target - X_t))
//
// where the bet λ_t is chosen from X_1..X_{t-1} only, in [0, 1/(2(1-target))].
// Under the null, E[X_t | past] >= target, so each factor has conditional
// mean at most 1 and K is a nonnegative supermartingale that starts at 1:
// by Ville's inequality P(sup_t K_t >= 1/alpha) <= alpha, however long the
// sequence runs. The bet follows Online Newton Step (ONS; Cutkosky &
// Orabona, COLT 2018, as used for testing by betting in Shekhar & Ramdas,
// IEEE Trans. Inf. Theory 2023): λ grows while labels disagree more often
// than the target allows and falls back to 0 while they agree, so a group
// that agreed well for a long time still alarms soon after it drifts.
// Halving the bet's range keeps each factor at least 1/2.
package guarantee

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DefaultAlpha is the alarm level when none is configured: the chance that
// a group whose agreement is at the target ever alarms is at most 5%.
const DefaultAlpha = 0.05

// MaxEvidence caps the evidence so that it stays a finite JSON number. The
// cap keeps the process a supermartingale (min(c, K f) has mean at most
// min(c, K) under the null) and sits far above any alarm level.
const MaxEvidence = 1e300

// onsGain is ONS's step size 2/(2 - ln 3) for bets whose product with the
// outcome stays within [-1/2, 1/2] on the losing side.
const onsGain = 2 / (2 - 1.0986122886681098) // ln 3

// Params are a monitor's settings, fixed for a run of the process.
type Params struct {
	// Target is the agreement the null hypothesis holds, in (0, 1).
	Target float64
	// Alpha is the alarm level, in (0, 1): the alarm is raised when the
	// evidence reaches 1/Alpha. Default DefaultAlpha.
	Alpha float64
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

// Threshold is the evidence at which the alarm is raised, 1/Alpha.
func (p Params) Threshold() float64 { return 1 / p.Alpha }

// maxBet is the largest bet, half of 1/(1 - Target), the bet at which a
// factor could reach 0.
func (p Params) maxBet() float64 { return 0.5 / (1 - p.Target) }

// State is one group's process since its last reset.
type State struct {
	// Target is the target the process runs at; a state whose target is
	// not the monitor's starts afresh at its next observation.
	Target float64
	// Labels and Agree count the observations and those that agreed.
	Labels, Agree int64
	// Evidence is K_t.
	Evidence float64
	// Bet is λ for the next observation; Curvature is ONS's running
	// 1 + sum of squared gradients.
	Bet, Curvature float64
	// Alarm is set once Evidence reaches the threshold and stays set
	// until the group is reset.
	Alarm bool
}

// Fresh is the state of a group with no observation: evidence 1, no bet.
func Fresh(target float64) State {
	return State{Target: target, Evidence: 1, Curvature: 1}
}

// At is s as the monitor p reads it: s itself when it runs at p's target,
// else a fresh process at p's target that keeps s's alarm (the evidence
// gathered against another target says nothing about this one, and an
// alarm stays until a reset).
func (s State) At(p Params) State {
	if s.Target == p.Target {
		return s
	}
	fresh := Fresh(p.Target)
	fresh.Alarm = s.Alarm
	return fresh
}

// Update returns s after one observation, agree or not, and whether this
// observation raised the alarm. It is the arithmetic of LuaUpdate, step by
// step: only +, -, *, / and comparisons, each rounded to float64 on its own
// (the explicit conversions keep the compiler from fusing a multiply and
// an add, which Lua does not do), so both compute the same bits.
func Update(p Params, s State, agree bool) (State, bool) {
	s = s.At(p)
	x := 0.0
	if agree {
		x = 1
		s.Agree++
	}
	s.Labels++
	y := p.Target - x
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
	if !s.Alarm && s.Evidence >= p.Threshold() {
		s.Alarm, raised = true, true
	}
	return s, raised
}

// Encode writes s as Redis stores it: "<target> <labels> <agree>
// <evidence> <bet> <curvature> <alarm 0|1>", each number with 17
// significant digits, which reads back to the same float64.
func (s State) Encode() string {
	alarm := "0"
	if s.Alarm {
		alarm = "1"
	}
	return strings.Join([]string{g17(s.Target), strconv.FormatInt(s.Labels, 10), strconv.FormatInt(s.Agree, 10),
		g17(s.Evidence), g17(s.Bet), g17(s.Curvature), alarm}, " ")
}

func g17(v float64) string { return strconv.FormatFloat(v, 'g', 17, 64) }

// Decode reads a state Encode or LuaUpdate wrote.
func Decode(v string) (State, error) {
	f := strings.Fields(v)
	if len(f) != 7 {
		return State{}, fmt.Errorf("guarantee state %q: want 7 fields", v)
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
	s.Target, s.Evidence, s.Bet, s.Curvature = num(0), num(3), num(4), num(5)
	labels, agree := num(1), num(2)
	s.Labels, s.Agree = int64(labels), int64(agree)
	switch f[6] {
	case "0":
	case "1":
		s.Alarm = true
	default:
		return State{}, fmt.Errorf("guarantee state %q: alarm %q", v, f[6])
	}
	if err == nil && (math.IsNaN(s.Evidence) || s.Evidence < 0) {
		err = fmt.Errorf("guarantee state %q: evidence %v", v, s.Evidence)
	}
	return s, err
}
