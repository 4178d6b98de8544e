package calibrate

import (
	"cmp"
	"fmt"
	"slices"
)

// --family: the guarantee for all the groups of one calibration together.
//
// Each group's promise is its own: the chance that its threshold is
// wrong is at most delta. Over many groups (thirteen organizations of
// their own, say) the chance that any of them is wrong is larger, up to
// their sum. With Options.Family, delta is split between the groups, so
// that the chance that any threshold the calibration reports is wrong is
// at most delta: the k-th group gets
//
//	delta_k = delta * familyHead / ((k + familyHead - 1)(k + familyHead)),
//
// which sum to delta over any number of groups (a union bound: online
// Bonferroni, the alpha-spending rule of Tian and Ramdas, "Online control
// of the familywise error rate", Statistical Methods in Medical Research
// 2021). The first group gets delta/11, the 14th delta/55, the 40th
// delta/245: an anytime group needs about ln(1/delta_k) / ln(1/delta) as
// much evidence, so the split costs labels slowly as the family grows.
//
// The order k must not depend on the labels, or a share could be chosen
// after seeing them, and a group's share must never change between looks,
// or each look would be a new test. So groups are ordered by where they
// form in the stream, which is fixed before any label exists: a (model,
// type) group at its first audited entry; a question group (ByQuestion)
// at its MinLabels-th audited line, an org group (ByOrg) at its
// MinLabels-th audited entry, counting the questions not labelled yet
// (the export holds them), so that a group that has not formed yet (too
// few labelled) already holds its place. A group that forms later in the
// stream comes later, so the shares of the groups formed before it never
// move; ties (one entry forming two groups) go by name.

// familyHead shapes the split: the larger, the more even the shares of
// the first groups (at the cost of later ones). 10 makes the first 14
// groups' shares between delta/11 and delta/55.
const familyHead = 10

// familyShare is the k-th group's share of delta (k from 1).
func familyShare(k int) float64 {
	a := float64(familyHead)
	return a / ((float64(k) + a - 1) * (float64(k) + a))
}

// familyDeltas returns the delta each group of gs is walked at: opts.Delta,
// or with opts.Family its share in the stream order of where the groups
// form. The records must be in entry order (markComplete's).
func (s *Sample) familyDeltas(gs *grouping, opts Options) []float64 {
	out := make([]float64, len(gs.keys))
	if !opts.Family {
		for g := range out {
			out[g] = opts.Delta
		}
		return out
	}
	type formed struct {
		at  int // index of the record where the group forms
		key groupKey
	}
	var order []formed
	seen := map[groupKey]bool{}
	form := func(k groupKey, at int) {
		if !seen[k] {
			seen[k] = true
			order = append(order, formed{at, k})
		}
	}
	lines := map[groupKey]int{}
	entries := map[groupKey]map[[2]uint64]bool{}
	for i := range s.records {
		r := &s.records[i]
		if !r.is(audited) {
			continue
		}
		n := s.names[r.name]
		form(groupKey{n.model, n.typ, "", ""}, i)
		switch {
		case opts.By == ByQuestion && n.question != "":
			k := groupKey{n.model, n.typ, n.question, ""}
			if lines[k]++; lines[k] == opts.MinLabels {
				form(k, i)
			}
		case opts.By == ByOrg && s.orgs[r.org] != "":
			k := groupKey{n.model, n.typ, "", s.orgs[r.org]}
			if entries[k] == nil {
				entries[k] = map[[2]uint64]bool{}
			}
			id := [2]uint64{r.entryMs, r.entrySeq}
			if !r.is(hasEntry) {
				id = [2]uint64{^uint64(0), uint64(r.line)} // an entry of its own
			}
			if !entries[k][id] {
				entries[k][id] = true
				if len(entries[k]) == opts.MinLabels {
					form(k, i)
				}
			}
		}
	}
	slices.SortStableFunc(order, func(a, b formed) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.key.model, b.key.model), compareTypes(a.key.typ, b.key.typ),
			cmp.Compare(a.key.question, b.key.question), cmp.Compare(a.key.org, b.key.org))
	})
	rank := make(map[groupKey]int, len(order))
	for i, f := range order {
		rank[f.key] = i + 1
	}
	for g, k := range gs.keys {
		// Every group the labels form has formed in the stream (it counts
		// the questions not labelled yet too); none gets a share of
		// nothing but by a mistake, which then gives it no threshold.
		if r, ok := rank[k]; ok {
			out[g] = opts.Delta * familyShare(r)
		}
	}
	return out
}

// familyNote is what the table's first line says of the family: nothing
// without Family.
func familyNote(r Result) string {
	if !r.Family {
		return ""
	}
	return fmt.Sprintf(" for all %d groups together (--family: each group at its share)", len(r.Groups))
}

// promiseComment is what the fragment says of its promise where it holds
// groups of organizations, or a family: per group, or family-wise.
func promiseComment(r Result) []string {
	byOrg := slices.ContainsFunc(r.Groups, func(g Group) bool { return g.Org != "" })
	switch {
	case r.Family:
		return []string{fmt.Sprintf("family-wise: the chance that any threshold below is wrong (agreement under %v) is at most %v", r.Target, r.Delta)}
	case byOrg:
		return []string{
			fmt.Sprintf("per group: each threshold below (each org's, each pooled line) is wrong (agreement under %v) with chance at most %v on its own;", r.Target, r.Delta),
			"the chance that one of them is wrong is larger: calibrate --family holds them together",
		}
	}
	return nil
}
