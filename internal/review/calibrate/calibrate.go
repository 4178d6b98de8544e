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
	"slices"
	"time"

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
	// DefaultCorrectWithin is the correction window: a day.
	DefaultCorrectWithin = 24 * time.Hour
	// DefaultMaxQuestions is the most questions of one group an entry
	// may hold when none is given.
	DefaultMaxQuestions = 5
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
	// Pending is true for the line of an audited question not labelled
	// yet (`label` and `agree` null): it holds its entry, and every entry
	// after it, out of the evidence until it is labelled.
	Pending bool
	// Pass is true for a line of an entry a reviewer passed: complete, and
	// a disagreement (Agree is false).
	Pass bool
	// Auto is true when the gateway routed the question auto (`route`
	// "auto"): where the threshold in force shows (Group.InForce).
	Auto bool
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
	// CorrectWithin is the correction window: an entry is evidence once
	// all its audited questions are labelled (or it is passed) and its
	// newest label is at least this old at AsOf. The command's default is
	// DefaultCorrectWithin; 0 takes labels as final at once.
	CorrectWithin time.Duration
	// AsOf is the time of the look; the zero time is now.
	AsOf time.Time
	// Since keeps only the entries from this id on (ParseSince reads an id
	// or a time); not Set, the default, keeps every entry.
	Since EntryID
	// MaxQuestions is the most questions of one group an entry may hold:
	// each entry's evidence is weighed against it, so that the guarantee
	// is per answer whatever the entries' sizes, and an entry above it is
	// refused as evidence and counted (Group.Refused). 0 is
	// DefaultMaxQuestions.
	MaxQuestions int
	// Family holds the guarantee for all the groups together: the chance
	// that any threshold reported is wrong is at most Delta, each group
	// walked at its share (family.go). Default off: each group's chance
	// is at most Delta on its own.
	Family bool
	// Expect asks for labels_expected, a simulation of each group without
	// a threshold (a few dozen resampled futures, each up to thousands of
	// entries): true in DefaultOptions; without it LabelsExpected is
	// reported only as 0 for a group with a threshold.
	Expect bool
}

// DefaultOptions returns the command's defaults: Delta 0.05, By "type",
// MinLabels 30, Method "anytime", CorrectWithin a day, MaxQuestions 5,
// Expect, AsOf now (the zero time), and no Target.
func DefaultOptions() Options {
	return Options{Delta: DefaultDelta, By: ByType, MinLabels: DefaultMinLabels, Method: MethodAnytime,
		CorrectWithin: DefaultCorrectWithin, MaxQuestions: DefaultMaxQuestions, Expect: true}
}

func (o Options) maxQuestions() int { return cmp.Or(o.MaxQuestions, DefaultMaxQuestions) }

// asOf is the look's time in nanoseconds since the epoch.
func (o Options) asOf() int64 {
	if o.AsOf.IsZero() {
		return time.Now().UnixNano()
	}
	return o.AsOf.UnixNano()
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
	if o.CorrectWithin < 0 {
		errs = append(errs, fmt.Errorf("--correct-within %v is negative", o.CorrectWithin))
	}
	if o.MaxQuestions < 0 {
		errs = append(errs, fmt.Errorf("--max-questions %d is less than 1", o.MaxQuestions))
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
	// Family is Options.Family: Delta bounds the chance that any group's
	// threshold is wrong, each group's Delta its share.
	Family bool
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
	// Since is Options.Since: the entries counted start there.
	Since EntryID
}

// Group is the outcome for one (model, type), (model, type, question) or
// (model, type, org).
type Group struct {
	Model, Type string
	// Question is the question id of a question group, "" for a type group.
	Question string
	// Org is the org of an org group (ByOrg), "" for a pooled group.
	Org string
	// Delta is the risk the group was walked at: the calibration's, or
	// with Family the group's share of it.
	Delta float64
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

	// CompleteThrough is the newest entry id of the group's complete
	// prefix (the evidence), "" when it is empty; WaitingOn is the entry
	// holding it back (the first audited entry of the group that is not
	// complete), "" when none is.
	CompleteThrough, WaitingOn string
	// Waiting counts the group's labelled lines after the prefix: labels
	// given, not yet evidence.
	Waiting int
	// Refused counts the entries of the prefix with more of the group's
	// questions than MaxQuestions: refused as evidence.
	Refused int
	// LateCorrections counts the labels corrected after their entry was
	// taken as evidence: the review API's count (GET /progress);
	// HasLateCorrections is false from a file, which cannot tell.
	LateCorrections    int
	HasLateCorrections bool

	// Bins are the group's labelled audited questions per confidence bin,
	// empty bins left out: the reliability diagram (bins.go).
	Bins []Bin
	// InForce is the threshold in force as the routes of the group's
	// answers show it, nil when none of them was routed auto.
	InForce *InForce
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
