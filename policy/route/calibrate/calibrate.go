// Package calibrate computes the route policy's confidence thresholds from
// labelled answers (the review API's `/labels`), with a stated guarantee:
// with probability at least 1 - Delta over the audit sample, the agreement
// of answers at or above a chosen threshold is at least Target.
//
// The method is the contract's, exactly. Only audited lines count (a uniform
// sample of routed answers; the others are reported as ignored). Lines are
// grouped by model version and question type, and with ByQuestion a question
// id with at least MinLabels audited lines forms its own group. In a group
// the candidate thresholds are the distinct confidences, highest first. For
// a candidate t, n is the number of lines with confidence >= t, k the number
// of those that agree, and LB the one-sided Clopper-Pearson lower bound on
// the agreement at confidence 1 - Delta. The walk starts at the highest
// candidate with n >= MinLines(Target, Delta), the fewest lines at which
// full agreement can pass (a choice made from confidences only, never from
// labels), and walks down while LB >= Target, stopping at the first
// candidate that fails (fixed-sequence testing: every test spends the whole
// Delta because the order is fixed before any label is looked at). The
// threshold is the last candidate that passed.
//
// The package also reads `/labels` (a file, standard input or the URL of
// the review API), writes the result as a table, as JSON or as a Caddyfile
// `route` fragment, and registers the `calibrate` subcommand.
package calibrate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Grouping of the lines of one model version.
const (
	// ByType makes one group per question type.
	ByType = "type"
	// ByQuestion gives a question id with at least MinLabels audited lines
	// a group of its own; the rest of its type form the type group.
	ByQuestion = "question"
)

// Defaults of the `calibrate` command, which DefaultOptions returns.
const (
	DefaultDelta     = 0.05
	DefaultMinLabels = 30
)

// Line is one line of the review API's `/labels`: a labelled question of a
// queued answer. Only the fields the calibration reads are kept.
type Line struct {
	// Model is the concrete version that answered (the pin's version).
	Model string
	// Type is the question type: noul, choice or score.
	Type string
	// Question is the caller's question id.
	Question string
	// Confidence is the answer's confidence in 0..1, as the gateway routed
	// it. HasConfidence is false when the gateway could not read one (a null
	// `confidence`): such a line has no place on the confidence axis, so it
	// is never a candidate and never in n, but it counts in its group's
	// Labels and so in the denominator of Coverage, because the gateway
	// routes such an answer to a human, whatever the threshold.
	Confidence    float64
	HasConfidence bool
	// Agree is the line's `agree`: whether the person's label agrees with
	// the model's answer. It is taken as given, never recomputed.
	Agree bool
	// Audit is true when the answer was drawn by `audit`, uniformly at
	// random and independently of its route and confidence. Only such lines
	// are a sample of the traffic; the others are ignored.
	Audit bool
	// Draw is how the audit drew the line (`audit_p`, `audit_floor`,
	// `audit_from`); the zero value when the line says nothing of it.
	Draw Draw
}

// Options are the calibration's parameters. DefaultOptions gives the
// command's defaults; Target has none.
type Options struct {
	// Target is the agreement to guarantee at or above a threshold, in (0, 1).
	// Required.
	Target float64
	// Delta is the risk that the guarantee fails: the chance, over the draw
	// of the audit sample, that a chosen threshold's true agreement is below
	// Target. In (0, 1); the command's default is 0.05.
	Delta float64
	// By is ByType or ByQuestion; the command's default is ByType.
	By string
	// MinLabels is how many audited lines a question id needs, with
	// ByQuestion, for a group of its own; at least 1, the command's default
	// is 30. It is not read with ByType.
	MinLabels int
	// Method is MethodUniform (also ""), the contract's method, or
	// MethodWeighted, for lines of the active audit (weighted.go).
	Method string
}

// DefaultOptions returns the command's defaults: Delta 0.05, By "type",
// MinLabels 30, and no Target.
func DefaultOptions() Options {
	return Options{Delta: DefaultDelta, By: ByType, MinLabels: DefaultMinLabels}
}

// Validate checks that Target and Delta are in (0, 1), By is a grouping
// and MinLabels is at least 1. The messages name the command's flags.
func (o Options) Validate() error {
	var errs []error
	if !(o.Target > 0 && o.Target < 1) {
		errs = append(errs, fmt.Errorf("--target %v is not between 0 and 1 (both excluded)", o.Target))
	}
	if !(o.Delta > 0 && o.Delta < 1) {
		errs = append(errs, fmt.Errorf("--delta %v is not between 0 and 1 (both excluded)", o.Delta))
	}
	if o.By != ByType && o.By != ByQuestion {
		errs = append(errs, fmt.Errorf("--by %q is not %q or %q", o.By, ByType, ByQuestion))
	}
	if o.MinLabels < 1 {
		errs = append(errs, fmt.Errorf("--min-labels %d is less than 1", o.MinLabels))
	}
	if o.Method != "" && o.Method != MethodUniform && o.Method != MethodWeighted {
		errs = append(errs, fmt.Errorf("--method %q is not %q or %q", o.Method, MethodUniform, MethodWeighted))
	}
	return errors.Join(errs...)
}

// Result is a calibration's outcome.
type Result struct {
	// Target and Delta are the options the thresholds were computed with.
	Target, Delta float64
	// Ignored counts the lines without `audit`: they are not a uniform
	// sample of the traffic, so they cannot support a guarantee.
	Ignored int
	// Groups are ordered by model, then type (noul, choice, score), then
	// question with the type group ("") first.
	Groups []Group
	// Notes explain decisions the method's text leaves open, for a person
	// to read (for example a question id kept in its type groups).
	Notes []string
}

// Group is the outcome for one (model, type) or (model, type, question).
type Group struct {
	Model, Type string
	// Question is the question id of a question group, "" for a type group.
	Question string
	// Labels is the number of audited lines in the group, including those
	// with no confidence.
	Labels int
	// Threshold is the chosen threshold, unrounded; HasThreshold is false
	// when no candidate passed (the type or question then routes human with
	// no_threshold).
	Threshold    float64
	HasThreshold bool
	// Agree (k), N and LowerBound describe the threshold; without one, the
	// first candidate tested, or all zero when no candidate had enough lines.
	Agree, N   int
	LowerBound float64
	// Coverage is N / Labels at the threshold: the share of the group's
	// traffic that routes auto. 0 without a threshold.
	Coverage float64

	// LabelsNeeded is the contract's `labels_needed`: 0 with a threshold;
	// without one, the fewest more audited lines, all agreeing and all at
	// Top, that would give the group a threshold under the same walk.
	LabelsNeeded int
	// Why says why a group has no threshold: WhyTooFew or WhyBelowTarget;
	// "" when it has one.
	Why string
	// Start is the confidence of the first candidate tested: where the walk
	// started; 0 when no candidate was tested.
	Start float64
	// Top is the group's highest confidence, where LabelsNeeded counts its
	// lines: 1 when no line has a confidence.
	Top float64
	// Scored counts the group's lines with a confidence, ScoredAgree those
	// that agree: the agreement seen so far, whatever the walk tested.
	Scored, ScoredAgree int
}

// Calibrate computes a threshold for each group of lines. It fails only on
// invalid options.
func Calibrate(lines []Line, opts Options) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{Target: opts.Target, Delta: opts.Delta}

	type key struct{ model, typ, question string }
	audited := make([]Line, 0, len(lines))
	for _, l := range lines {
		if !l.Audit {
			res.Ignored++
			continue
		}
		audited = append(audited, l)
	}
	if err := checkDraws(audited, opts.Method); err != nil {
		return Result{}, err
	}

	// A question id of its own, with ByQuestion: enough audited lines, and
	// one type within its model. A pin's `question <id>` threshold applies
	// to the id whatever the question's type, so an id asked as two types
	// cannot get a threshold of its own without imposing it on the other
	// type's answers, which the threshold was not computed from.
	own := map[key]bool{}
	if opts.By == ByQuestion {
		count := map[key]int{}
		types := map[key][]string{} // (model, "", question) -> types
		for _, l := range audited {
			count[key{l.Model, l.Type, l.Question}]++
			k := key{l.Model, "", l.Question}
			if !slices.Contains(types[k], l.Type) {
				types[k] = append(types[k], l.Type)
			}
		}
		for k, n := range count {
			if n < opts.MinLabels || k.question == "" {
				continue // an empty id is the type group's key: stays there
			}
			if ts := types[key{k.model, "", k.question}]; len(ts) > 1 {
				slices.SortFunc(ts, compareTypes)
				res.Notes = append(res.Notes, fmt.Sprintf(
					"question %s of %s is asked as %s: kept in its type groups, since a pin's question threshold applies to every type",
					quoteNote(k.question), quoteNote(k.model), strings.Join(ts, " and ")))
				continue
			}
			own[k] = true
		}
		slices.Sort(res.Notes)
		res.Notes = slices.Compact(res.Notes)
	}

	members := map[key]*tally{}
	group := func(k key) *tally {
		m := members[k]
		if m == nil {
			m = new(tally)
			members[k] = m
		}
		return m
	}
	for _, l := range audited {
		// The type group exists even when every question of the type has a
		// group of its own: empty, it says what a new question id gets.
		m := group(key{l.Model, l.Type, ""})
		if len(own) > 0 && own[key{l.Model, l.Type, l.Question}] {
			m = group(key{l.Model, l.Type, l.Question})
		}
		m.add(l)
	}

	nmin := MinLines(opts.Target, opts.Delta)
	for k, m := range members {
		walk := m.walk
		if opts.Method == MethodWeighted {
			walk = m.walkWeighted
		}
		g := walk(opts.Target, opts.Delta, nmin)
		g.Model, g.Type, g.Question = k.model, k.typ, k.question
		res.Groups = append(res.Groups, g)
	}
	slices.SortFunc(res.Groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), compareTypes(a.Type, b.Type), cmp.Compare(a.Question, b.Question))
	})

	// A question group without a threshold has no line in the fragment, so
	// the gateway gives it its type's threshold, if there is one: a
	// threshold its labels did not count toward. The route block cannot
	// send one question id to a human, so the operator is told.
	for _, q := range res.Groups {
		if q.Question == "" || q.HasThreshold {
			continue
		}
		if tg, ok := typeGroup(res.Groups, q); ok && tg.HasThreshold {
			res.Notes = append(res.Notes, fmt.Sprintf(
				"question %s of %s has no threshold of its own, so it takes its type's (%s %s), computed without its labels; run with --by type, or label more of it",
				quoteNote(q.Question), quoteNote(q.Model), q.Type, FormatThreshold(tg.Threshold)))
		}
	}
	return res, nil
}

// typeGroup finds the type group of a question group in sorted groups.
func typeGroup(groups []Group, q Group) (Group, bool) {
	i, ok := slices.BinarySearchFunc(groups, q, func(g, q Group) int {
		return cmp.Or(cmp.Compare(g.Model, q.Model), compareTypes(g.Type, q.Type), cmp.Compare(g.Question, ""))
	})
	if !ok {
		return Group{}, false
	}
	return groups[i], true
}

// tally is a group's lines as the walk needs them.
type tally struct {
	labels int     // every line, with a confidence or not
	scored []point // the lines with a confidence
	draws  []Draw  // every line's draw, in the order added (weighted.go)
}

type point struct {
	confidence float64
	agree      bool
	draw       int // index in draws
}

func (m *tally) add(l Line) {
	m.labels++
	m.draws = append(m.draws, l.Draw)
	if l.HasConfidence {
		m.scored = append(m.scored, point{l.Confidence, l.Agree, len(m.draws) - 1})
	}
}

// walk runs the fixed-sequence walk over one group's lines, and says what a
// group without a threshold lacks.
func (m *tally) walk(target, delta float64, nmin int) Group {
	g := Group{Labels: m.labels}
	cands := candidates(m.scored)
	tested := false
	for _, c := range cands {
		if c.n < nmin {
			continue // above the start: skipped, untested
		}
		lb := LowerBound(c.k, c.n, delta)
		if !tested {
			g.Start = c.confidence
		}
		if lb < target {
			if !tested {
				g.Agree, g.N, g.LowerBound = c.k, c.n, lb
			}
			break
		}
		tested = true
		g.Threshold, g.HasThreshold = c.confidence, true
		g.Agree, g.N, g.LowerBound = c.k, c.n, lb
	}
	if g.HasThreshold {
		g.Coverage = float64(g.N) / float64(g.Labels)
	}
	g.explain(cands, target, delta, nmin)
	return g
}

// explain fills in what a group's walk over cands leaves to say: its top
// confidence and scored lines, and for a group without a threshold why
// not and how many labels it needs. Both methods' walks end with it.
func (g *Group) explain(cands []candidate, target, delta float64, nmin int) {
	g.Top = 1
	if len(cands) > 0 {
		last := cands[len(cands)-1]
		g.Top, g.Scored, g.ScoredAgree = cands[0].confidence, last.n, last.k
	}
	if g.HasThreshold {
		return
	}
	g.Why = WhyTooFew
	if g.N > 0 {
		g.Why = WhyBelowTarget
	}
	g.LabelsNeeded = labelsNeeded(cands, target, delta, nmin)
}

// LowerBound is the one-sided Clopper-Pearson lower bound, at confidence
// 1 - delta, on a proportion of which k successes were seen in n trials:
// the delta quantile of Beta(k, n-k+1), and 0 when k is 0. It panics
// unless 0 <= k <= n.
//
// The quantile is gonum's (mathext.InvRegIncBeta, a port of Cephes' incbi).
// When k == n the quantile has the closed form delta^(1/n), used as is, so
// that the start of the walk agrees exactly with MinLines.
func LowerBound(k, n int, delta float64) float64 {
	if k < 0 || k > n {
		panic(fmt.Sprintf("calibrate: LowerBound(%d, %d): want 0 <= k <= n", k, n))
	}
	switch {
	case k == 0:
		return 0
	case k == n:
		return math.Pow(delta, 1/float64(n))
	}
	return distuv.Beta{Alpha: float64(k), Beta: float64(n - k + 1)}.Quantile(delta)
}

// MinLines is where the walk starts: the fewest lines n at which full
// agreement passes, LowerBound(n, n, delta) = delta^(1/n) >= target, that
// is n >= ceil(ln(delta) / ln(target)). Computed against LowerBound itself,
// so that float error in the logarithms never moves the start by one.
func MinLines(target, delta float64) int {
	n := max(1, int(math.Ceil(math.Log(delta)/math.Log(target))))
	// A step or two at most; bounded, since for a target a hair under 1
	// the steps no longer change the bound.
	for range 2 {
		if n > 1 && LowerBound(n-1, n-1, delta) >= target {
			n--
		}
	}
	for range 2 {
		if LowerBound(n, n, delta) < target {
			n++
		}
	}
	return n
}

// typeOrder is the order types are listed in: the contract's.
var typeOrder = []string{evaluation.TypeNoul, evaluation.TypeChoice, evaluation.TypeScore}

func compareTypes(a, b string) int {
	return cmp.Compare(slices.Index(typeOrder, a), slices.Index(typeOrder, b))
}
