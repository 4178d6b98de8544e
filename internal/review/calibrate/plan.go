package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Plans: the one look of MethodUniform, fixed before labelling began.
//
// MethodUniform is valid for one look at a number of entries fixed in
// advance. Certificates are only for looks that cannot be chosen after
// the labels are seen, so a uniform certificate needs a plan (the review
// API's PUT /plans, stored by its clock while the group had no label):
// with PlanSet, each group's look takes exactly its plan's first entries
// of the complete prefix, whatever else has been labelled since, and
// verify checks that the plan predates the group's first label and that
// the certificate used exactly that many entries.

// Why a uniform group with plans has no threshold, beside WhyTooFew and
// WhyBelowTarget.
const (
	// WhyNoPlan: the group has no plan, so its one look was never fixed.
	WhyNoPlan = "no_plan"
	// WhyPlanWaiting: the complete prefix holds fewer entries than the
	// plan's look takes.
	WhyPlanWaiting = "plan_waiting"
)

// ErrUniformUnplanned is Certify's refusal of a uniform threshold computed
// without a plan.
var ErrUniformUnplanned = errors.New("--method uniform is valid for one look fixed before labelling began: its certificates need --plan, the review API's /plans where that look was planned (docs/calibration.md, \"Plans\")")

// allowUnplannedUniform, for the simulations only, lets Certify write a
// uniform certificate without a plan: what it did before plans, to show
// that cherry-picked looks then break the guarantee.
var allowUnplannedUniform bool

// PlanSet is the plans a uniform calibration's looks are fixed by, by
// group.
type PlanSet struct {
	byGroup map[string]record.Plan
}

// NewPlanSet holds plans (record.ParsePlans checked them).
func NewPlanSet(plans []record.Plan) *PlanSet {
	s := &PlanSet{byGroup: make(map[string]record.Plan, len(plans))}
	for _, p := range plans {
		s.byGroup[p.Key()] = p
	}
	return s
}

// of returns the plan of a group.
func (s *PlanSet) of(k groupKey) (record.Plan, bool) {
	p, ok := s.byGroup[record.PlanKey(k.model, k.typ, k.question, k.org)]
	return p, ok
}

// walkPlanned runs MethodUniform over one group: with plans, over exactly
// the first entries of its plan, no threshold without a plan or before
// the prefix holds that many.
func (g groupView) walkPlanned(k groupKey, opts Options) Group {
	if opts.Plans == nil {
		return g.walkUniform(opts.Target, opts.Delta)
	}
	plan, ok := opts.Plans.of(k)
	if !ok {
		return Group{Labels: len(g.records), Top: 1, Why: WhyNoPlan}
	}
	spans := g.spans()
	if len(spans) < plan.Entries {
		return Group{Labels: len(g.records), Top: 1, Why: WhyPlanWaiting, LabelsNeeded: plan.Entries - len(spans),
			PlanEntries: plan.Entries, PlanCreated: plan.Created}
	}
	g.records = g.records[:spans[plan.Entries-1].hi]
	out := g.walkUniform(opts.Target, opts.Delta)
	if !out.HasThreshold {
		out.LabelsNeeded, out.LabelsExpected, out.HasLabelsExpected = 0, 0, false // the one look is spent
	}
	out.PlanEntries, out.PlanCreated = plan.Entries, plan.Created
	return out
}

// planWhy is the line under the table for a planned group without a
// threshold; false for other groups.
func planWhy(g Group) (string, bool) {
	switch g.Why {
	case WhyNoPlan:
		return groupLabel(g) + ": no threshold: no plan fixes its one look (--method uniform --plan: plan it with PUT /plans before labelling)", true
	case WhyPlanWaiting:
		return fmt.Sprintf("%s: no threshold yet: its plan's one look takes %d complete entries, %d more to come", groupLabel(g), g.PlanEntries, g.LabelsNeeded), true
	}
	return "", false
}

// LoadPlans reads plans from src: the http(s) URL of the review API's
// /plans (user info sent as basic auth), or a file holding its answer.
func LoadPlans(ctx context.Context, src string) (*PlanSet, error) {
	var raw []byte
	err := read(ctx, src, nil, func(r io.Reader) (err error) {
		raw, err = io.ReadAll(io.LimitReader(r, MaxLineBytes*16))
		return err
	})
	if err != nil {
		return nil, err
	}
	plans, err := record.ParsePlans(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", sourceName(src), err)
	}
	return NewPlanSet(plans), nil
}

// plansBeside is the /plans URL beside a /labels URL; "" when src is not
// the URL of a /labels endpoint.
func plansBeside(src string) string {
	if !hasPrefixFold(src, "http://") && !hasPrefixFold(src, "https://") {
		return ""
	}
	head, query, _ := strings.Cut(src, "?")
	base, ok := strings.CutSuffix(strings.TrimRight(head, "/"), "/labels")
	if !ok {
		return ""
	}
	_ = query // /plans takes no query
	return base + "/plans"
}

// checkPlan is what verify finds wrong with a uniform certificate's plan:
// none recorded, none such in plans, or one stored after the group's
// first label (the earliest `ts` of its model and type in raw).
func checkPlan(c certWithPlan, plans *PlanSet, firstLabel map[[2]string]time.Time) []string {
	if c.planEntries == 0 {
		return []string{"a uniform certificate without a plan: valid for one look fixed in advance only, refused"}
	}
	if plans == nil {
		return []string{"a uniform certificate: its plan cannot be checked without the review API's /plans (--plan)"}
	}
	p, ok := plans.of(groupKey{c.model, c.typ, c.question, c.org, ""}) // a plan is of a first stage's group
	if !ok {
		return []string{"its plan is not in /plans"}
	}
	var out []string
	if p.Entries != c.planEntries || p.Created != c.planCreated {
		out = append(out, fmt.Sprintf("plan of %d entries stored %s, /plans holds %d entries stored %s", c.planEntries, c.planCreated, p.Entries, p.Created))
	}
	created, _ := p.CreatedAt()
	if first, ok := firstLabel[[2]string{c.model, c.typ}]; ok && !created.Before(first) {
		out = append(out, fmt.Sprintf("plan stored %s, not before the first label of %s %s (%s): the look was not fixed before labelling began",
			p.Created, c.model, c.typ, first.UTC().Format(time.RFC3339Nano)))
	}
	return out
}

// certWithPlan is what checkPlan reads of a certificate.
type certWithPlan struct {
	model, typ, question, org string
	planEntries               int
	planCreated               string
}

// planUsage checks --plan against the method and --certificates: a
// uniform calibration's certificates need a plan, and a plan fixes only
// a uniform look.
func planUsage(method, certFile, plan string) error {
	switch {
	case plan != "" && method != MethodUniform:
		return fmt.Errorf("--plan fixes the one look of --method uniform; --method %s holds under any looks and takes no plan", method)
	case plan == "-":
		return errors.New("--plan - : give the URL of the review API's /plans, or a file of its answer")
	case method == MethodUniform && certFile != "" && plan == "":
		return ErrUniformUnplanned
	}
	return nil
}

// verifyPlans reads the plans uniform certificates are checked against:
// src (--plan), else the /plans beside a /labels URL; nil when no certificate
// is uniform, or neither is given (each uniform one is then a mismatch).
func verifyPlans(ctx context.Context, src, labels string, certs []certificate.Certificate) (*PlanSet, error) {
	if !slices.ContainsFunc(certs, func(c certificate.Certificate) bool { return c.Method == MethodUniform }) {
		return nil, nil
	}
	if src == "" {
		src = plansBeside(labels)
	}
	if src == "" {
		return nil, nil
	}
	return LoadPlans(ctx, src)
}
