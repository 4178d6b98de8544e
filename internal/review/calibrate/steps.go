package calibrate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Sample.Calibrate, step by step: count and check the lines, mark which
// entries are complete, find each line's group (question groups, org
// groups), sort the records by group and entry order, and walk each
// group's complete prefix under the method.

// Calibrate computes a threshold for each group of the sample's lines, as
// the package function does. It reorders the sample's records.
func (s *Sample) Calibrate(opts Options) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	method := opts.method()
	s.dedupe()
	res := Result{Target: opts.Target, Delta: opts.Delta, Method: method, Duplicates: s.duplicates, Since: opts.Since}
	before := s.keepSince(opts.Since)
	defer func() { s.records = append(s.records, before...) }()
	if opts.Since.Set {
		res.Notes = append(res.Notes, sinceNote(opts.Since, before))
	}
	if err := s.checkLines(&res, method); err != nil {
		return Result{}, err
	}
	s.markComplete(opts.asOf(), opts.CorrectWithin.Nanoseconds())
	gs := s.groups(opts, &res)
	deltas := s.familyDeltas(gs, opts) // before sortRecords: in entry order
	res.Family = opts.Family
	ranges := gs.sortRecords(s)
	for g, k := range gs.keys {
		o := opts
		o.Delta = deltas[g]
		res.Groups = append(res.Groups, s.walkGroup(k, s.records[ranges[g].lo:ranges[g].hi], o, method))
		res.Groups[len(res.Groups)-1].Delta = deltas[g]
	}
	s.markInForce(res.Groups, gs, ranges, before)
	slices.SortFunc(res.Groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), compareTypes(a.Type, b.Type), cmp.Compare(a.Question, b.Question), cmp.Compare(a.Org, b.Org))
	})
	res.Notes = append(res.Notes, questionNotes(res.Groups)...)
	return res, nil
}

// checkLines counts the lines not audited and refuses draws the method
// cannot read.
func (s *Sample) checkLines(res *Result, method string) error {
	drawCounts := make([]int, len(s.draws)) // audited lines per draw
	for i := range s.records {
		switch r := &s.records[i]; {
		case r.is(pending):
		case r.is(audited):
			drawCounts[r.draw]++
		default:
			res.Ignored++
		}
	}
	return checkDraws(s.draws, drawCounts, method)
}

// prefixOff, for the simulations only, takes every labelled entry as
// evidence whether complete or not: what the walk did before the complete
// prefix, to show that the premises fail without it.
var prefixOff bool

// markComplete marks the records of each entry that is not complete at
// asOf: one with a question not labelled yet (a pending line, or a label
// stored after asOf, which did not exist then), or whose newest label is
// less than window old. An entry is all its lines, of whatever group.
func (s *Sample) markComplete(asOf, window int64) {
	if !slices.IsSortedFunc(s.records, entryOrder) {
		slices.SortFunc(s.records, entryOrder)
	}
	for _, sp := range (groupView{records: s.records}).spans() {
		lo, hi := sp.lo, sp.hi
		complete := true
		for i := lo; i < hi; i++ {
			r := &s.records[i]
			if !r.is(audited) {
				continue
			}
			switch {
			case r.is(pending), r.labelled > asOf:
				complete = false
			case r.labelled != 0 && asOf-r.labelled < window:
				complete = false
			}
		}
		for i := lo; i < hi; i++ {
			if complete || prefixOff {
				s.records[i].flags &^= incomplete
			} else {
				s.records[i].flags |= incomplete
			}
		}
	}
}

// groupKey names a group.
type groupKey struct{ model, typ, question, org string }

// grouping is each record's group: its name's group, or its org's.
type grouping struct {
	keys     []groupKey
	index    map[groupKey]int
	groupOf  []int             // per name: its group, -1 for a name with no audited line
	orgGroup map[[2]uint32]int // (type group, org) -> group
}

func (gs *grouping) add(k groupKey) int {
	g, ok := gs.index[k]
	if !ok {
		g = len(gs.keys)
		gs.keys = append(gs.keys, k)
		gs.index[k] = g
	}
	return g
}

// of is the group of a record; len(keys) for a record of no group (not
// audited).
func (gs *grouping) of(r *compactLine) int {
	if !r.is(audited) {
		return len(gs.keys)
	}
	g := gs.groupOf[r.name]
	if og, ok := gs.orgGroup[[2]uint32{uint32(g), r.org}]; ok {
		return og
	}
	return g
}

// groups finds each record's group under opts.By.
func (s *Sample) groups(opts Options, res *Result) *grouping {
	count := make([]int, len(s.names)) // audited labelled lines per name
	present := make([]bool, len(s.names))
	for i := range s.records {
		if r := &s.records[i]; r.is(audited) {
			present[r.name] = true
			if !r.is(pending) {
				count[r.name]++
			}
		}
	}
	own := map[groupKey]bool{}
	if opts.By == ByQuestion {
		own = s.ownQuestions(count, opts.MinLabels, res)
	}
	// Each name's group; the type group exists even when every question
	// of the type has a group of its own: empty, it says what a new
	// question id gets.
	gs := &grouping{index: map[groupKey]int{}, groupOf: make([]int, len(s.names)), orgGroup: map[[2]uint32]int{}}
	for i, n := range s.names {
		if !present[i] {
			gs.groupOf[i] = -1
			continue
		}
		gs.groupOf[i] = gs.add(groupKey{n.model, n.typ, "", ""})
		if own[groupKey{n.model, n.typ, n.question, ""}] {
			gs.groupOf[i] = gs.add(groupKey{n.model, n.typ, n.question, ""})
		}
	}
	if opts.By == ByOrg {
		s.orgGroups(gs, opts.MinLabels)
	}
	return gs
}

// ownQuestions finds the question ids of their own, with ByQuestion:
// enough audited lines, and one type within its model. A pin's `question
// <id>` threshold applies to the id whatever the question's type, so an
// id asked as two types cannot get a threshold of its own without
// imposing it on the other type's answers, which the threshold was not
// computed from.
func (s *Sample) ownQuestions(count []int, minLabels int, res *Result) map[groupKey]bool {
	own := map[groupKey]bool{}
	types := map[groupKey][]string{} // (model, "", question) -> types
	for i, n := range s.names {
		if count[i] == 0 {
			continue
		}
		k := groupKey{n.model, "", n.question, ""}
		if !slices.Contains(types[k], n.typ) {
			types[k] = append(types[k], n.typ)
		}
	}
	var notes []string
	for i, n := range s.names {
		if count[i] < minLabels || n.question == "" {
			continue // an empty id is the type group's key: stays there
		}
		if ts := types[groupKey{n.model, "", n.question, ""}]; len(ts) > 1 {
			slices.SortFunc(ts, compareTypes)
			notes = append(notes, fmt.Sprintf(
				"question %s of %s is asked as %s: kept in its type groups, since a pin's question threshold applies to every type",
				quoteNote(n.question), quoteNote(n.model), strings.Join(ts, " and ")))
			continue
		}
		own[groupKey{n.model, n.typ, n.question, ""}] = true
	}
	slices.Sort(notes)
	res.Notes = append(res.Notes, slices.Compact(notes)...)
	return own
}

// orgGroups gives an org of its own, with ByOrg, enough audited labelled
// entries in its (model, type): counted in entries, the unit of evidence.
func (s *Sample) orgGroups(gs *grouping, minLabels int) {
	type seen struct {
		group int
		org   uint32
	}
	entries := map[seen]map[[2]uint64]bool{}
	for i := range s.records {
		r := &s.records[i]
		if !r.is(audited) || r.is(pending) {
			continue
		}
		k := seen{gs.groupOf[r.name], r.org}
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
		if org == "" || len(ids) < minLabels {
			continue // "" is the pooled group's key: stays there
		}
		tk := gs.keys[k.group]
		gs.orgGroup[[2]uint32{uint32(k.group), k.org}] = gs.add(groupKey{tk.model, tk.typ, "", org})
	}
}

// sortRecords puts the audited records by group, then entry order, the
// others last, and returns each group's range.
func (gs *grouping) sortRecords(s *Sample) []span {
	if slices.IsSortedFunc(s.records, entryOrder) {
		gs.bucketRecords(s) // in entry order already (markComplete's): a stable pass by group
	} else {
		slices.SortFunc(s.records, func(a, b compactLine) int {
			return cmp.Or(cmp.Compare(gs.of(&a), gs.of(&b)), entryOrder(a, b))
		})
	}
	ranges := make([]span, len(gs.keys)) // a group with no records (an empty type group) keeps {0, 0}
	for lo := 0; lo < len(s.records); {
		g := gs.of(&s.records[lo])
		if g == len(gs.keys) {
			break
		}
		hi := lo
		for hi < len(s.records) && gs.of(&s.records[hi]) == g {
			hi++
		}
		ranges[g] = span{lo, hi}
		lo = hi
	}
	return ranges
}

// bucketRecords orders records already in entry order by group, each
// group's in the order they were: a counting sort on each record's group,
// found once, and the permutation applied in place. The same order as
// sorting by group then entry order, without a comparison per pair.
func (gs *grouping) bucketRecords(s *Sample) {
	starts := make([]int, len(gs.keys)+2) // by group, with one for the records of none
	of := make([]int32, len(s.records))
	for i := range s.records {
		g := gs.of(&s.records[i])
		of[i] = int32(g)
		starts[g+1]++
	}
	for g := 1; g < len(starts); g++ {
		starts[g] += starts[g-1]
	}
	dest := of // each record's place, written over its group
	for i, g := range of {
		dest[i] = int32(starts[g])
		starts[g]++
	}
	for i := range dest {
		for int(dest[i]) != i {
			j := dest[i]
			s.records[i], s.records[j] = s.records[j], s.records[i]
			dest[i], dest[j] = dest[j], dest[i]
		}
	}
}

// entryOrder orders records as the stream does, the input's order among
// the lines of one entry.
func entryOrder(a, b compactLine) int {
	return cmp.Or(cmp.Compare(a.entryMs, b.entryMs), cmp.Compare(a.entrySeq, b.entrySeq), cmp.Compare(a.index, b.index))
}

// walkGroup walks one group's complete prefix under the method. records
// are the group's audited records in entry order, pending lines included.
func (s *Sample) walkGroup(k groupKey, records []compactLine, opts Options, method string) Group {
	all := groupView{sample: s, records: records}
	spans := all.spans()
	end := len(records) // the prefix is records[:end]
	var out Group
	for i, sp := range spans {
		if records[sp.lo].is(incomplete) {
			end = sp.lo
			out.WaitingOn = records[sp.lo].entryID()
			break
		}
		if records[sp.lo].is(hasEntry) {
			out.CompleteThrough = records[spans[i].lo].entryID()
		}
	}
	prefix := slices.Clone(records[:end])
	prefix = slices.DeleteFunc(prefix, func(r compactLine) bool { return r.is(pending) })
	most := opts.maxQuestions()
	if k.question != "" {
		most = 1 // an entry asks a question id once: one question of the group at most
	}
	gv := groupView{sample: s, records: prefix, seed: groupSeed(k.model, k.typ, k.question, k.org),
		expect: opts.Expect, maxQuestions: most}
	var walked Group
	switch method {
	case MethodUniform:
		walked = gv.walkUniform(opts.Target, opts.Delta)
	default:
		walked = gv.walkAnytime(opts.Target, opts.Delta, method == MethodWeighted)
	}
	walked.CompleteThrough, walked.WaitingOn = out.CompleteThrough, out.WaitingOn
	walked.Model, walked.Type, walked.Question, walked.Org = k.model, k.typ, k.question, k.org
	walked.lines = make([]uint32, 0, len(records))
	for _, r := range records {
		if r.is(pending) {
			continue
		}
		walked.lines = append(walked.lines, r.line)
	}
	walked.Waiting = len(walked.lines) - len(prefix)
	walked.Bins = s.binsOf(records, method == MethodWeighted)
	return walked
}

// questionNotes: a question group without a threshold has no line in the
// fragment, so the gateway gives it its type's threshold, if there is
// one: a threshold its labels did not count toward. The route block
// cannot send one question id to a human, so the operator is told.
func questionNotes(groups []Group) []string {
	var notes []string
	for _, q := range groups {
		if q.Question == "" || q.HasThreshold {
			continue
		}
		if tg, ok := typeGroup(groups, q); ok && tg.HasThreshold {
			notes = append(notes, fmt.Sprintf(
				"question %s of %s has no threshold of its own, so it takes its type's (%s %s), computed without its labels; run with --by type, or label more of it",
				quoteNote(q.Question), quoteNote(q.Model), q.Type, FormatThreshold(tg.Threshold)))
		}
	}
	return notes
}
