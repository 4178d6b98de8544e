package monitor

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Late corrections
//
// A label given after its entry was taken as an observation (a
// correction after the correction window) does not change what was
// taken: the sequence stays one sequence. But a correction that turns
// an agreeing answer into a disagreement is evidence of failure, and
// reaches the group's evidence: the entry's factor is recomputed with
// the corrected count, at the bet it was taken at,
//
//	K <- K * (1 + λ_i y_i') / (1 + λ_i y_i),   y_i' = y_i + 1/max_questions
//
// so that K is, at every moment, the product the process would hold had
// each entry been observed with its labels as corrected so far. Why
// alpha still holds: let y_i* be entry i's observation under the labels
// the team finally settles on, and W_t = prod (1 + λ_i y_i*) with the
// bets K used. A correction never changes a bet: λ_i is set at the take
// from the entries taken before i, which say nothing of y_i*, so under
// the null (the settled labels agree at least target of the time) W is a
// nonnegative supermartingale and P(sup W >= 1/a) <= a (Ville). As long
// as no answer the team settles on as agreeing was counted a
// disagreement (the first pass errs, if at all, by agreeing, and is
// corrected), each factor K holds is at most W's (y_i <= y_i*, λ_i >= 0),
// so K <= W at every moment, whatever the order, timing or choice of the
// corrections: none raises the chance of a false alarm above alpha. A
// correction to an agreement changes nothing (an alarm raised stays; a
// disagreement wrongly taken is what the window is for); a correction of
// an entry of an earlier sequence (before a reset or a change of target)
// changes nothing either: that sequence is closed.
//
// The take keeps, per taken entry,
//
//	<prefix>review:{<stream>}:taken:obs   hash: entry -> {"m": {group: [bet, sequence,
//	                                      target, agree, labels, max_questions]},
//	                                      "q": {"q<question>": [agree 1|0, group]}}

// Taking is what an observation was taken with, for a late correction:
// the bet, the sequence and target it ran at, the entry's agreeing and
// labelled answers of the group as counted, and max_questions.
type Taking struct {
	Bet           float64
	Sequence      int64
	Target        float64
	Agree, Labels int64
	MaxQuestions  int
}

// Correct returns s after one of the answers an observation counted as
// agreeing was corrected to a disagreement, and whether that raised the
// alarm; s unchanged when s is no longer the sequence the observation
// was taken in. It is guarantee_correct's arithmetic, step by step, so
// that Go and Lua compute the same bits.
func Correct(p Params, s State, at Taking) (State, bool) {
	if s.Target != at.Target || s.Sequence != at.Sequence || at.Target != p.Target {
		return s, false
	}
	t, n, k := at.Target, float64(at.Labels), float64(at.Agree)
	var before, after float64
	if at.MaxQuestions > 0 {
		m := float64(at.MaxQuestions)
		before = float64(float64(t*n)-k) / m
		after = float64(float64(t*n)-float64(k-1)) / m
	} else {
		before = t - float64(k/n)
		after = t - float64(float64(k-1)/n)
	}
	ratio := float64(1+float64(at.Bet*after)) / float64(1+float64(at.Bet*before))
	s.Evidence = min(float64(s.Evidence*ratio), MaxEvidence)
	s.Agree--
	raised := false
	if !s.Alarm && s.Evidence >= p.Threshold(s.Sequence) {
		s.Alarm, raised = true, true
	}
	return s, raised
}

// LateLabel is a label given after its entry was taken: the question
// and whether it agrees.
type LateLabel struct {
	Question string
	Agree    bool
}

// correctScript applies late labels of one taken entry (guarantee_correct):
// KEYS LuaKeys; ARGV entry, target, alpha, then per label: question,
// agree (1|0). It returns, per group whose evidence moved: member, state,
// raised (1|0).
//
//go:embed lua/correct.lua
var correctLua string

var correctScript = redis.NewScript(Library + correctLua)

// Correct applies the late labels of entry (its index member) to the
// groups it was observed in: a correction to a disagreement of an
// answer counted as agreeing moves its group's evidence (Correct); an
// entry noted and not yet taken has the noted label turned to a
// disagreement. It returns the groups whose evidence moved.
func (s *Store) Correct(ctx context.Context, entry string, p Params, labels []LateLabel) ([]Observed, error) {
	if len(labels) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	args := LuaArgs(p)
	argv := []any{entry, args[0], args[1]}
	for _, l := range labels {
		agree := "0"
		if l.Agree {
			agree = "1"
		}
		argv = append(argv, l.Question, agree)
	}
	out, err := correctScript.Run(ctx, s.client, s.Keys(), argv...).StringSlice()
	if err != nil {
		return nil, err
	}
	return appendObserved(nil, out)
}
