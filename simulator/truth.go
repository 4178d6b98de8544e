package simulator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Versions and the truth.
//
// The simulator accepts any version identifier service-<n>.<n>.<n>. Two of
// them answer against a truth, so that a person or a test labelling their
// answers sees an agreement that depends on the answer's confidence, by a
// curve of the version's own:
//
//   - DefaultVersion (service-1.0.0), which the aliases resolve to by
//     default: at confidence c, its answer agrees with the truth with
//     probability 1 - (1 - chance) * (1 - c)^2;
//   - SecondVersion (service-2.0.0): 1 - (1 - chance) * (1 - c), less
//     reliable at the same confidence, so it needs higher thresholds.
//
// chance is the agreement of a blind guess: 1/2 for noul, 1/n for a choice
// or score of n options or tiers. Every other version answers at random
// (its draws seeded by its name), independently of the truth.
//
// The truth of a question is a function of the request's content only (its
// state and the question, compared without insignificant white space), the
// same whatever version is asked: so labels that agree with the truth for
// one version's answers can be re-scored against another's, as replay does.
// Truth returns it, in the review API's label form.
//
// How it is drawn: service-1.0.0's answer is drawn from the content as it
// always was; then, from a draw seeded by the content alone, the truth is
// that answer with the probability of the curve at its confidence, and
// otherwise a uniformly drawn disagreeing value (the other noul side,
// another option, a tier more than 0.5 from the score). So service-1.0.0's
// answers keep their bytes and follow their curve exactly.
// service-2.0.0 draws a distribution as any version does, then agrees with
// the truth with the probability of its curve at that confidence: the
// distribution is turned so that its peak lands on the truth (noul: the
// yes-probability mirrored; choice: the peak's option swapped with the
// truth's; score: the peak on the truth's tier, the rest by distance), or
// on a drawn wrong value. A score is the distribution's mean, so where the
// distribution is flat it can stray more than 0.5 from the peak's tier:
// service-2.0.0's score answers then agree a little less than the curve at
// low confidence. Answers to questions given a confidence by
// X-Simulator-Confidence keep no relation to the truth.

// SecondVersion is the simulator's second concrete version: its
// confidence-to-agreement curve differs from DefaultVersion's.
const SecondVersion = "service-2.0.0"

// Agreement is the probability that version's answer at confidence c (in
// 0..1) agrees with the truth, for a question whose chance agreement is
// chance: 1 - (1-chance)(1-c)^2 for DefaultVersion, 1 - (1-chance)(1-c) for
// SecondVersion, chance for any other version (whose answers are independent
// of the truth; for a score, whose mean agrees with a tier more often than a
// blind guess, that is only an approximation).
func Agreement(version string, c, chance float64) float64 {
	switch version {
	case DefaultVersion:
		return 1 - (1-chance)*(1-c)*(1-c)
	case SecondVersion:
		return 1 - (1-chance)*(1-c)
	}
	return chance
}

// Truth returns the truth of each question of an evaluation request body,
// by question id, as the review API takes labels: noul a bool (true = yes),
// choice the option key, score the tier number. It fails on a body the
// simulator would not answer.
func Truth(body []byte) (map[string]any, error) {
	e, err := parseEvaluation(body)
	if err != nil {
		return nil, err
	}
	ts := newTruthSource(e.canon)
	out := make(map[string]any, len(e.questions))
	for _, q := range e.questions {
		t := ts.of(q)
		switch q.typ {
		case typeNoul:
			out[q.id] = t.yes
		case typeChoice:
			out[q.id] = q.options[t.index]
		case typeScore:
			out[q.id] = t.index
		}
	}
	return out, nil
}

// truth is one question's truth: yes for noul, else the option or tier
// index.
type truth struct {
	yes   bool
	index int
}

// truthSource draws the truths of one request's questions.
type truthSource struct {
	first seeder // DefaultVersion's draws, as it answers
	own   seeder // the truth's draws: seeded by the content alone
}

func newTruthSource(state []byte) truthSource {
	// "truth" is no version identifier, so no version's answers share its
	// draws.
	return truthSource{first: newSeeder(DefaultVersion, state), own: newSeeder("truth", state)}
}

func (ts truthSource) of(q question) truth {
	rng, u := ts.first.rand(q), ts.own.rand(q)
	switch q.typ {
	case typeNoul:
		p := naturalNoul(rng)
		yes := p >= 50
		if u.Float64() < Agreement(DefaultVersion, noulConfidenceOf(p), 0.5) {
			return truth{yes: yes}
		}
		return truth{yes: !yes}
	case typeChoice:
		n := len(q.options)
		dist := naturalDistribution(rng, n)
		a := argmax(dist)
		if n == 1 || u.Float64() < Agreement(DefaultVersion, choiceConfidence(dist), 1/float64(n)) {
			return truth{index: a}
		}
		return truth{index: other(u, n, a)}
	case typeScore:
		n := len(q.tiers)
		dist := naturalDistribution(rng, n)
		score := float64(scoreOf(dist)) / 100
		var near, far []int
		for tier := range n {
			if math.Abs(float64(tier)-score) <= 0.5 {
				near = append(near, tier)
			} else {
				far = append(far, tier)
			}
		}
		if len(far) == 0 || u.Float64() < Agreement(DefaultVersion, float64(dist[argmax(dist)])/100, 1/float64(n)) {
			return truth{index: near[0]}
		}
		return truth{index: far[u.IntN(len(far))]}
	}
	panic(fmt.Sprintf("simulator: question type %q", q.typ)) // parseEvaluation admits only the three
}

// other draws an index in 0..n-1 other than not; n must be at least 2.
func other(rng *rand.Rand, n, not int) int {
	k := rng.IntN(n - 1)
	if k >= not {
		k++
	}
	return k
}

// noulConfidenceOf is |2p-1| of a yes-probability in hundredths.
func noulConfidenceOf(p int) float64 {
	return math.Abs(float64(2*p-100)) / 100
}

// secondAnswer is SecondVersion's natural answer to q, whose truth is t.
func secondAnswer(rng *rand.Rand, q question, t truth) json.RawMessage {
	switch q.typ {
	case typeNoul:
		p := naturalNoul(rng)
		agree := rng.Float64() < Agreement(SecondVersion, noulConfidenceOf(p), 0.5)
		if wantYes := t.yes == agree; (p >= 50) != wantYes {
			p = 100 - p // the same confidence, the other side (p = 50 has no other side)
		}
		var out object
		out.str("type", typeNoul)
		out.raw("noul", []byte(formatHundredths(p)))
		return out.bytes()
	case typeChoice:
		n := len(q.options)
		dist := naturalDistribution(rng, n)
		to := t.index
		if n > 1 && rng.Float64() >= Agreement(SecondVersion, choiceConfidence(dist), 1/float64(n)) {
			to = other(rng, n, t.index)
		}
		a := argmax(dist)
		dist[a], dist[to] = dist[to], dist[a]
		return renderChoice(q.options, dist, "")
	case typeScore:
		n := len(q.tiers)
		dist := naturalDistribution(rng, n)
		to := t.index
		if n > 1 && rng.Float64() >= Agreement(SecondVersion, float64(dist[argmax(dist)])/100, 1/float64(n)) {
			to = other(rng, n, t.index)
		}
		return renderScore(q.tiers, aroundTier(dist, to), "")
	}
	panic(fmt.Sprintf("simulator: question type %q", q.typ))
}

// aroundTier rearranges a distribution so that its largest part is at
// tier at and the others follow by size, nearest tiers first (the lower
// one first on a tie): a mean near at.
func aroundTier(dist []int, at int) []int {
	parts := slices.Clone(dist)
	slices.SortFunc(parts, func(a, b int) int { return cmp.Compare(b, a) })
	tiers := make([]int, len(dist))
	for i := range tiers {
		tiers[i] = i
	}
	slices.SortStableFunc(tiers, func(a, b int) int {
		return cmp.Compare(abs(a-at), abs(b-at))
	})
	out := make([]int, len(dist))
	for i, tier := range tiers {
		out[tier] = parts[i]
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
