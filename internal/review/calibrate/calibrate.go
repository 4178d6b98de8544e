// Package calibrate computes the route policy's confidence thresholds from
// labelled answers (the review API's `/labels`), with a stated guarantee:
// the chance that a threshold it reports has agreement below Target, for
// the answers at or above it, is at most Delta.
//
// Three methods (Options.Method), each on the same evidence: only audited
// lines count, duplicates (the same model, request_id and question) count
// once, and lines are grouped by model version and question type (with
// ByQuestion, a question id with at least MinLabels audited lines forms its
// own group).
//
//   - MethodAnytime, the default (anytime.go): valid however often anyone
//     looks; each entry is one observation, taken in entry order; a betting
//     e-process per candidate of a grid fixed in advance, tested in a fixed
//     sequence with a fallback start.
//   - MethodWeighted (weighted.go): the same, with importance weights for
//     the lines of the active audit.
//   - MethodUniform (uniform.go): the documented one-look method, each
//     labelled question one observation, Clopper-Pearson bounds walked in a
//     fixed sequence: valid for one look at a number of labels fixed in
//     advance.
//
// The package also reads `/labels` (a file, standard input or the URL of
// the review API), writes the result as a table, as JSON or as a Caddyfile
// `route` fragment; Commands returns its `calibrate` and `verify`
// subcommands for the binary to register.
package calibrate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Grouping of the lines of one model version.
const (
	// ByType makes one group per question type.
	ByType = "type"
	// ByQuestion gives a question id with at least MinLabels audited lines
	// a group of its own; the rest of its type form the type group.
	ByQuestion = "question"
	// ByOrg gives an org with at least MinLabels audited entries in a
	// (model, type) a group of its own; the other orgs' lines of that
	// model and type form the pooled type group.
	ByOrg = "org"
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
	// Entry is the line's `entry`, the review stream's id of its entry:
	// the order of the evidence, and what makes the entry's questions one
	// observation. A line without one is its own entry, ordered before
	// those with one, in the order given.
	Entry EntryID
	// RequestID is the line's `request_id`; with Model and Question it
	// tells a copy of the line (see Sample). "" when absent.
	RequestID string
	// Replay is true for a line written by `replay` (`route` "replay").
	Replay bool
	// Labelled is when the label was stored (`ts`), in nanoseconds since
	// the epoch; 0 when unknown. Of two lines of one entry and question,
	// the one labelled later is the correction, and is kept.
	Labelled int64
	// Org is the line's `org`: with ByOrg, an org with enough audited
	// entries in a (model, type) gets a group of its own.
	Org string
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
	// Method is MethodAnytime (also "", the default), MethodWeighted for
	// lines of the active audit, or MethodUniform, valid for one look.
	Method string
	// Expect asks for labels_expected, a simulation of each group without
	// a threshold (a few dozen resampled futures, each up to thousands of
	// entries): true in DefaultOptions; without it LabelsExpected is
	// reported only as 0 for a group with a threshold.
	Expect bool
}

// DefaultOptions returns the command's defaults: Delta 0.05, By "type",
// MinLabels 30, Method "anytime", Expect, and no Target.
func DefaultOptions() Options {
	return Options{Delta: DefaultDelta, By: ByType, MinLabels: DefaultMinLabels, Method: MethodAnytime, Expect: true}
}

// Methods lists the values of Options.Method, the default first.
var Methods = []string{MethodAnytime, MethodUniform, MethodWeighted}

func (o Options) method() string {
	if o.Method == "" {
		return MethodAnytime
	}
	return o.Method
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
	if o.By != ByType && o.By != ByQuestion && o.By != ByOrg {
		errs = append(errs, fmt.Errorf("--by %q is not %q, %q or %q", o.By, ByType, ByQuestion, ByOrg))
	}
	if o.MinLabels < 1 {
		errs = append(errs, fmt.Errorf("--min-labels %d is less than 1", o.MinLabels))
	}
	if o.Method != "" && !slices.Contains(Methods, o.Method) {
		errs = append(errs, fmt.Errorf("--method %q is not %q, %q or %q", o.Method, MethodAnytime, MethodUniform, MethodWeighted))
	}
	return errors.Join(errs...)
}

// Result is a calibration's outcome.
type Result struct {
	// Target and Delta are the options the thresholds were computed with;
	// Method the method (never "").
	Target, Delta float64
	Method        string
	// Ignored counts the lines without `audit`: they are not a uniform
	// sample of the traffic, so they cannot support a guarantee.
	Ignored int
	// Duplicates counts the lines that repeat another (same model,
	// request_id and question) and were counted once.
	Duplicates int
	// Groups are ordered by model, then type (noul, choice, score), then
	// question with the type group ("") first.
	Groups []Group
	// Notes explain decisions the method's text leaves open, for a person
	// to read (for example a question id kept in its type groups).
	Notes []string
}

// Group is the outcome for one (model, type), (model, type, question) or
// (model, type, org).
type Group struct {
	Model, Type string
	// Question is the question id of a question group, "" for a type group.
	Question string
	// Org is the org of an org group (ByOrg), "" for a pooled group.
	Org string
	// Cert is the id of the threshold's certificate, once Certify has
	// written one; the fragment writes it on the threshold's line.
	Cert string
	// lines are the input places of the group's audited lines, duplicates
	// dropped: what a certificate's digest is computed over.
	lines []uint32
	// Labels is the number of audited lines in the group, including those
	// with no confidence.
	Labels int
	// Threshold is the chosen threshold, unrounded; HasThreshold is false
	// when no candidate passed (the type or question then routes human with
	// no_threshold).
	Threshold    float64
	HasThreshold bool
	// Agree (k) and N count the questions at or above the threshold, and
	// Entries their entries; without a threshold they describe the first
	// candidate tested, or are all zero when none was.
	Agree, N, Entries int
	// LowerBound is the method's lower confidence bound on the agreement
	// there (Clopper-Pearson for MethodUniform, the betting bound at the
	// level the candidate was tested at for the others); HasLowerBound is
	// false when the method has none (no candidate tested).
	LowerBound    float64
	HasLowerBound bool
	// Evidence is the method's statistic at the threshold (or the first
	// candidate tested): the largest value its e-process reached under
	// MethodAnytime and MethodWeighted, LowerBound under MethodUniform; and
	// Level the risk that candidate was tested at (Delta, or a share of it).
	Evidence, Level float64
	// Coverage is the share of the group's traffic at or above the
	// threshold: the share of its labelled questions (weighted by
	// 1/audit_p under MethodWeighted). 0 without a threshold.
	Coverage float64

	// LabelsNeeded is the documented `labels_needed`: 0 with a threshold;
	// without one, the fewest more audited entries, each one agreeing
	// question at Top, that would give the group a threshold under the
	// same method.
	LabelsNeeded int
	// LabelsExpected is `labels_expected`: 0 with a threshold; without
	// one, the median number of more audited entries a threshold would
	// take if the group's entries went on as they have so far (resampled
	// from them). HasLabelsExpected is false with no labels, or when at
	// that agreement no threshold comes within the simulated horizon.
	LabelsExpected    int
	HasLabelsExpected bool
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
	// Needs is how many entries the method needs before it tests anything
	// (MinLines for MethodUniform; the burn-in plus the entries full
	// agreement takes, for the others), for the message under the table.
	Needs int
}

// Calibrate computes a threshold for each group of lines. It fails only on
// invalid options, or lines the method cannot read validly.
func Calibrate(lines []Line, opts Options) (Result, error) {
	s := NewSample()
	for _, l := range lines {
		s.Add(l)
	}
	return s.Calibrate(opts)
}

// Calibrate computes a threshold for each group of the sample's lines, as
// the package function does. It reorders the sample's records.
func (s *Sample) Calibrate(opts Options) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	method := opts.method()
	s.dedupe()
	res := Result{Target: opts.Target, Delta: opts.Delta, Method: method, Duplicates: s.duplicates}

	drawCounts := make([]int, len(s.draws)) // audited lines per draw
	for i := range s.records {
		if r := &s.records[i]; r.is(audited) {
			drawCounts[r.draw]++
		} else {
			res.Ignored++
		}
	}
	if err := checkDraws(s.draws, drawCounts, method); err != nil {
		return Result{}, err
	}

	// A question id of its own, with ByQuestion: enough audited lines, and
	// one type within its model. A pin's `question <id>` threshold applies
	// to the id whatever the question's type, so an id asked as two types
	// cannot get a threshold of its own without imposing it on the other
	// type's answers, which the threshold was not computed from.
	type key struct{ model, typ, question, org string }
	count := make([]int, len(s.names))
	for i := range s.records {
		if r := &s.records[i]; r.is(audited) {
			count[r.name]++
		}
	}
	own := map[key]bool{}
	if opts.By == ByQuestion {
		types := map[key][]string{} // (model, "", question) -> types
		for i, n := range s.names {
			if count[i] == 0 {
				continue
			}
			k := key{n.model, "", n.question, ""}
			if !slices.Contains(types[k], n.typ) {
				types[k] = append(types[k], n.typ)
			}
		}
		for i, n := range s.names {
			if count[i] < opts.MinLabels || n.question == "" {
				continue // an empty id is the type group's key: stays there
			}
			if ts := types[key{n.model, "", n.question, ""}]; len(ts) > 1 {
				slices.SortFunc(ts, compareTypes)
				res.Notes = append(res.Notes, fmt.Sprintf(
					"question %s of %s is asked as %s: kept in its type groups, since a pin's question threshold applies to every type",
					quoteNote(n.question), quoteNote(n.model), strings.Join(ts, " and ")))
				continue
			}
			own[key{n.model, n.typ, n.question, ""}] = true
		}
		slices.Sort(res.Notes)
		res.Notes = slices.Compact(res.Notes)
	}

	// Each name's group; the type group exists even when every question
	// of the type has a group of its own: empty, it says what a new
	// question id gets.
	var keys []key
	groupOf := make([]int, len(s.names))
	index := map[key]int{}
	groupIndex := func(k key) int {
		g, ok := index[k]
		if !ok {
			g = len(keys)
			keys = append(keys, k)
			index[k] = g
		}
		return g
	}
	for i, n := range s.names {
		if count[i] == 0 {
			groupOf[i] = -1
			continue
		}
		tg := groupIndex(key{n.model, n.typ, "", ""})
		groupOf[i] = tg
		if own[key{n.model, n.typ, n.question, ""}] {
			groupOf[i] = groupIndex(key{n.model, n.typ, n.question, ""})
		}
	}
	// An org of its own, with ByOrg: enough audited entries in its
	// (model, type). Counted in entries, the unit of evidence.
	orgGroup := map[[2]uint32]int{} // (type group, org) -> group
	if opts.By == ByOrg {
		type seen struct {
			group int
			org   uint32
		}
		entries := map[seen]map[[2]uint64]bool{}
		for i := range s.records {
			r := &s.records[i]
			if !r.is(audited) {
				continue
			}
			k := seen{groupOf[r.name], r.org}
			if entries[k] == nil {
				entries[k] = map[[2]uint64]bool{}
			}
			id := [2]uint64{r.entryMs, r.entrySeq}
			if !r.is(hasEntry) {
				id = [2]uint64{math.MaxUint64, uint64(r.line)} // an entry of its own
			}
			entries[k][id] = true
		}
		for k, ids := range entries {
			org := s.orgs[k.org]
			if org == "" || len(ids) < opts.MinLabels {
				continue // "" is the pooled group's key: stays there
			}
			tk := keys[k.group]
			orgGroup[[2]uint32{uint32(k.group), k.org}] = groupIndex(key{tk.model, tk.typ, "", org})
		}
	}
	// Audited records by group, then entry order; the others last.
	groupOfRecord := func(r *compactLine) int {
		if !r.is(audited) {
			return len(keys)
		}
		g := groupOf[r.name]
		if og, ok := orgGroup[[2]uint32{uint32(g), r.org}]; ok {
			return og
		}
		return g
	}
	slices.SortFunc(s.records, func(a, b compactLine) int {
		return cmp.Or(cmp.Compare(groupOfRecord(&a), groupOfRecord(&b)),
			cmp.Compare(a.entryMs, b.entryMs), cmp.Compare(a.entrySeq, b.entrySeq), cmp.Compare(a.index, b.index))
	})
	ranges := make([]span, len(keys)) // a group with no records (an empty type group) keeps {0, 0}
	for lo := 0; lo < len(s.records); {
		g := groupOfRecord(&s.records[lo])
		if g == len(keys) {
			break
		}
		hi := lo
		for hi < len(s.records) && groupOfRecord(&s.records[hi]) == g {
			hi++
		}
		ranges[g] = span{lo, hi}
		lo = hi
	}
	for g, k := range keys {
		gv := groupView{sample: s, records: s.records[ranges[g].lo:ranges[g].hi], seed: groupSeed(k.model, k.typ, k.question, k.org), expect: opts.Expect}
		var out Group
		switch method {
		case MethodUniform:
			out = gv.walkUniform(opts.Target, opts.Delta)
		default:
			out = gv.walkAnytime(opts.Target, opts.Delta, method == MethodWeighted)
		}
		out.Model, out.Type, out.Question, out.Org = k.model, k.typ, k.question, k.org
		out.lines = make([]uint32, 0, len(gv.records))
		for _, r := range gv.records {
			out.lines = append(out.lines, r.line)
		}
		res.Groups = append(res.Groups, out)
	}
	slices.SortFunc(res.Groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), compareTypes(a.Type, b.Type), cmp.Compare(a.Question, b.Question), cmp.Compare(a.Org, b.Org))
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
		return cmp.Or(cmp.Compare(g.Model, q.Model), compareTypes(g.Type, q.Type), cmp.Compare(g.Question, ""), cmp.Compare(g.Org, ""))
	})
	if !ok {
		return Group{}, false
	}
	return groups[i], true
}

// typeOrder is the order types are listed in, as docs/calibration.md lists them.
var typeOrder = []string{evaluation.TypeNoul, evaluation.TypeChoice, evaluation.TypeScore}

func compareTypes(a, b string) int {
	return cmp.Compare(slices.Index(typeOrder, a), slices.Index(typeOrder, b))
}
