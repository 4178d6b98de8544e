package calibrate

import (
	"fmt"
	"slices"

	"github.com/systemone/systemone-gateway/internal/review/certificate"
)

// Escalation: an `escalate A to B` block asks version B again the
// questions A's pin routes to a person for their confidence (or for a
// missing threshold), and B's answer routes auto when its confidence
// reaches the block's threshold. The lines of those second answers
// (`stage` 2, `escalated_from` A) form groups of their own, (A -> B, type
// [, question]), never B's own groups, and the fragment writes them as the
// escalate block.
//
// The promise is about all the auto answers of a first-stage group
// together: A's answers at or above A's threshold t1, and B's answers, at
// or above B's threshold t2, to the questions A answered below t1. Their
// agreement is at least the target with probability at least 1 - delta.
// The construction splits delta between the stages:
//
//  1. Each first-stage group of (A, type) (its type group, and its
//     question and org groups) is calibrated at delta/2 when the sample
//     holds audited second answers escalated from A for that type: the
//     split follows where escalation happens, never the labels.
//  2. Each second-stage group is calibrated at delta/2, by the same method
//     (its e-processes, grid, fallback starts and entry order), on the
//     second answers of exactly the questions escalated under the
//     threshold t1 the first stage reports here, as the fragment writes it:
//     a second answer whose first answer's confidence is at or above t1
//     is left out (under t1 that question routes auto at the first stage,
//     and is not asked again), and so is one whose first answer is not in
//     the input (its place relative to t1 is unknown).
//  3. The union. Let S1 be A's answers at or above t1, with agreement a1,
//     and S2 the escalated questions B answers at or above t2, with
//     agreement a2. The union's agreement is the mix
//     (|S1| a1 + |S2| a2) / (|S1| + |S2|), at least the target whenever
//     both a1 and a2 are (and when one stage has no threshold, the union
//     is the other stage alone). So the union falls below the target only
//     if the first stage reports a wrong threshold (chance at most
//     delta/2, the method's own guarantee) or the second does (at most
//     delta/2): at most delta, by the union bound, however often anyone
//     looks (each stage's method is anytime-valid).
//
// The second stage's guarantee is for the t1 it was computed under; t1 is
// chosen from the first answers of the same entries, whose labels the
// second answers share (the label is about the content). The simulation
// (escalate_sim_test.go) runs the two together, as `calibrate` does, and
// checks the union.
//
// The cascade is Trust or Escalate's (Jung, Brahman and Choi, "Trust or
// Escalate: LLM Judges with Provable Guarantees for Human Agreement", ICLR
// 2025): a cheaper judge first, a stronger one on what it abstains from,
// each judge's threshold calibrated on what reaches it. It differs in two
// ways: a stage (or a type) with no threshold abstains (its questions go
// to a person), where the paper's calibration falls back to the strictest
// candidate; and delta is split between the stages, where the paper
// calibrates each at the whole delta. (Its thresholds are also anytime-
// valid here, with the entry as the unit, where the paper's are for one
// look at a fixed calibration set.)

// noSplit, for the simulations only, calibrates each stage at the whole
// delta, as the paper does: to show the union's guarantee fails without
// the split.
var noSplit bool

// escalationCounts are what a second-stage group left out, and why.
type escalationCounts struct {
	// above counts second answers to questions the first version answers
	// at or above its threshold here: not escalated under it.
	above int
	// unjoined counts second answers whose first answer (same entry and
	// question, the first version's line) is not in the input, or has no
	// confidence.
	unjoined int
}

// firstAnswer is what the second stage reads of a question's first
// answer.
type firstAnswer struct {
	confidence    float64
	hasConfidence bool
	labelled      bool // not pending
	second        bool // a second answer was joined to it
}

// answerKey names a question's first answer: its entry and its name.
type answerKey struct {
	ms, seq uint64
	name    uint32
}

// stages is what a sample with second answers needs for its walk; nil
// without any.
type stages struct {
	// split holds the (first version, type) pairs with audited second
	// answers: their first-stage groups are calibrated at delta/2.
	split map[[2]string]bool
	// first holds the audited first answers of the split types.
	first map[answerKey]*firstAnswer
	// asked holds the names (question ids) of first answers some second
	// answer was joined to: ids the escalate block asks again.
	asked map[uint32]bool
	// gaps are the notes of first answers left unasked (see gapNotes).
	gaps []string
}

// findStages finds the escalated types of the sample's audited records,
// and indexes the first answers of those types; nil when no audited
// record is a second answer.
func (s *Sample) findStages(gs *grouping, ranges []span) *stages {
	var st *stages
	for g, k := range gs.keys {
		if k.from == "" || ranges[g].hi == ranges[g].lo {
			continue
		}
		if st == nil {
			st = &stages{split: map[[2]string]bool{}, first: map[answerKey]*firstAnswer{}, asked: map[uint32]bool{}}
		}
		st.split[[2]string{k.from, k.typ}] = true
	}
	if st == nil {
		return nil
	}
	for i := range s.records {
		r := &s.records[i]
		n := s.names[r.name]
		if !r.is(audited) || !r.is(hasEntry) || n.from != "" || !st.split[[2]string{n.model, n.typ}] {
			continue
		}
		st.first[answerKey{r.entryMs, r.entrySeq, r.name}] = &firstAnswer{
			confidence: r.confidence, hasConfidence: r.is(hasConfidence), labelled: !r.is(pending)}
	}
	return st
}

// delta is the risk group k is walked at, d being what it would be
// without escalation (the calibration's delta, or its family share): half
// of d for both stages of an escalated type. With --family each group,
// the second stage's too, has a share of its own already, and the chance
// that any of them is wrong, the two stages of a type among them, is at
// most delta: the family's split holds the union, and d is kept.
func (st *stages) delta(k groupKey, d float64, family bool) float64 {
	if st == nil || noSplit || family {
		return d
	}
	if k.from != "" || st.split[[2]string{k.model, k.typ}] {
		return d / 2
	}
	return d
}

// walkSecond walks each second-stage group, groups[g] for gs.keys[g], on
// the questions escalated under the first stage's thresholds (the other
// groups, walked), deltas[g] being its walk's risk without escalation.
func (st *stages) walkSecond(s *Sample, gs *grouping, ranges []span, groups []Group, deltas []float64, opts Options, method string) {
	if st == nil {
		return
	}
	var first []Group // the first stage's, sorted for the look-ups
	for g, k := range gs.keys {
		if k.from == "" {
			first = append(first, groups[g])
		}
	}
	sortGroups(first)
	highest := map[[2]string]float64{} // (first version, type) -> highest first confidence escalated
	for g, k := range gs.keys {
		if k.from == "" {
			continue
		}
		var counts escalationCounts
		var kept []compactLine
		for _, r := range s.records[ranges[g].lo:ranges[g].hi] {
			n := s.names[r.name]
			answer := st.firstOf(s, &r, n)
			if answer == nil || !answer.hasConfidence {
				counts.unjoined++
				continue
			}
			answer.second = true
			if t, ok := appliedThreshold(first, n.from, n.typ, n.question, s.orgs[r.org], opts.By); ok && answer.confidence >= t {
				counts.above++
				continue
			}
			key := [2]string{n.from, n.typ}
			if c, seen := highest[key]; !seen || answer.confidence > c {
				highest[key] = answer.confidence
			}
			kept = append(kept, r)
		}
		o := opts
		o.Delta = st.delta(k, deltas[g], opts.Family)
		walked := s.walkGroup(k, kept, o, method)
		walked.escalation = counts
		under := underGroup(first, k)
		walked.under = under.key()
		if under.HasThreshold {
			walked.UnderThreshold, walked.HasUnderThreshold = certificate.Written(under.Threshold), true
		}
		groups[g] = walked
	}
	st.gaps = st.gapNotes(s, first, highest, opts.By)
}

// firstOf is the first answer of the question of r, a second answer; nil
// when the input does not hold it.
func (st *stages) firstOf(s *Sample, r *compactLine, n groupName) *firstAnswer {
	if !r.is(hasEntry) {
		return nil
	}
	name, ok := s.nameIndex[groupName{model: n.from, typ: n.typ, question: n.question}]
	if !ok {
		return nil
	}
	first := st.first[answerKey{r.entryMs, r.entrySeq, name}]
	if first != nil {
		st.asked[name] = true
	}
	return first
}

// appliedThreshold is the first version's threshold, as the fragment
// writes it, for a question of type typ and id question from org: its
// question group's, else (by org) its org group's (none for an org whose
// own evidence falls short: its line is `human`), else its type group's.
// false when none applies: the question is escalated whatever its first
// answer.
func appliedThreshold(groups []Group, from, typ, question, org, by string) (float64, bool) {
	if question != "" {
		if g, ok := findGroup(groups, groupKey{model: from, typ: typ, question: question}); ok && g.HasThreshold {
			return certificate.Written(g.Threshold), true
		}
	}
	if by == ByOrg && org != "" {
		if g, ok := findGroup(groups, groupKey{model: from, typ: typ, org: org}); ok {
			return certificate.Written(g.Threshold), g.HasThreshold
		}
	}
	if g, ok := findGroup(groups, groupKey{model: from, typ: typ}); ok && g.HasThreshold {
		return certificate.Written(g.Threshold), true
	}
	return 0, false
}

// underGroup is the first-stage group whose threshold a second-stage
// group k is calibrated under, as its certificate names it: a question's
// own group when it has a threshold, else the pooled type group.
func underGroup(groups []Group, k groupKey) Group {
	if k.question != "" {
		if g, ok := findGroup(groups, groupKey{model: k.from, typ: k.typ, question: k.question}); ok && g.HasThreshold {
			return g
		}
	}
	g, _ := findGroup(groups, groupKey{model: k.from, typ: k.typ})
	return g
}

// gapNotes: first answers below the threshold here, above every first
// answer that was escalated, with no second answer. They were not asked
// again when they were answered (a lower threshold was in force then), so
// the second stage's evidence says nothing of them, though under this
// threshold they will be escalated.
func (st *stages) gapNotes(s *Sample, groups []Group, highest map[[2]string]float64, by string) []string {
	gap := map[[2]string]int{}
	for k, a := range st.first {
		n := s.names[k.name]
		key := [2]string{n.model, n.typ}
		top, seen := highest[key]
		if a.second || !a.labelled || !a.hasConfidence || !seen || a.confidence <= top || !st.asked[k.name] {
			continue // (a question id never asked again has no line in the block)
		}
		// An org's own threshold is not known here (the first answer's
		// org is not kept): the pooled one decides.
		if t, ok := appliedThreshold(groups, n.model, n.typ, n.question, "", by); ok && a.confidence >= t {
			continue
		}
		gap[key]++
	}
	var notes []string
	for key, count := range gap {
		notes = append(notes, fmt.Sprintf(
			"%d first answers of %s (%s) lie between the highest one escalated (confidence %s) and its threshold here, with no second answer: they were not escalated when answered, and under this threshold they will be; ask the second version them (replay --escalate) and calibrate again, since the escalate block's threshold says nothing of them",
			count, quoteNote(key[0]), key[1], FormatThreshold(highest[key])))
	}
	slices.Sort(notes)
	return notes
}

// notes are the second stage's notes: second answers left out for want of
// their first answer, and first answers never asked again.
func (st *stages) notes(groups []Group) []string {
	if st == nil {
		return nil
	}
	var notes []string
	for _, g := range groups {
		if g.escalation.unjoined > 0 {
			notes = append(notes, fmt.Sprintf(
				"%d second answers of %s to questions of %s (%s) have no line of the first answer (same entry and question) in the input: left out; calibrate them together with the labels they answer",
				g.escalation.unjoined, quoteNote(g.Model), quoteNote(g.EscalatedFrom), g.Type))
		}
	}
	return append(notes, st.gaps...)
}

// Stage is 2 for a group of second answers, 1 otherwise.
func (g Group) Stage() int {
	if g.EscalatedFrom != "" {
		return 2
	}
	return 1
}

// modelLabel names a group's version in the table: "A -> B" for the
// second answers B gave to questions escalated from A.
func modelLabel(g Group) string {
	if g.EscalatedFrom == "" {
		return display(g.Model)
	}
	return display(g.EscalatedFrom) + " -> " + display(g.Model)
}

// noteModel names a group's version in a note: quoted, and for second
// answers "A" -> "B".
func noteModel(g Group) string {
	if g.EscalatedFrom == "" {
		return quoteNote(g.Model)
	}
	return quoteNote(g.EscalatedFrom) + " -> " + quoteNote(g.Model)
}

// stageLine says, under the table, what a second-stage group was
// calibrated on and at what risk.
func stageLine(g Group, delta float64) string {
	name := groupLabel(g)
	under := "every question of the type (no threshold of " + display(g.EscalatedFrom) + " here)"
	if g.HasUnderThreshold {
		under = fmt.Sprintf("the questions %s answers below %s (its threshold here)", display(g.EscalatedFrom), FormatThreshold(g.UnderThreshold))
	}
	line := fmt.Sprintf("%s: second answers to %s; both stages at delta %v", name, under, g.Delta)
	if g.Delta != delta {
		line += fmt.Sprintf(" (half of %v each, so that the type's auto answers of both versions together hold the target with risk %v)", delta, delta)
	}
	if g.escalation.above > 0 {
		line += fmt.Sprintf("; %d second answers at or above that threshold left out (not escalated under it)", g.escalation.above)
	}
	return line
}

// underDifferences checks a second-stage certificate against the
// first-stage certificate it names (under_cert) in certs: it must be
// there, of the first version's group (its type, or the question's own),
// and for the threshold the second stage was computed under. None for a
// first-stage certificate, or a second stage computed under no threshold.
func underDifferences(c certificate.Certificate, certs []certificate.Certificate) []string {
	if c.Stage != 2 || c.UnderThreshold == nil {
		return nil
	}
	if c.UnderCert == "" {
		return []string{"it names no certificate of the first version's threshold it was computed under"}
	}
	i := slices.IndexFunc(certs, func(u certificate.Certificate) bool { return u.ID == c.UnderCert })
	if i < 0 {
		return []string{fmt.Sprintf("the first version's certificate %s it names is not in the certificates file", c.UnderCert)}
	}
	u := certs[i]
	var d []string
	if u.Stage != 0 || u.Model != c.EscalatedFrom || u.Type != c.Type || u.Org != "" || (u.Question != "" && u.Question != c.Question) {
		d = append(d, fmt.Sprintf("the certificate %s it names is not of %s's %s threshold", u.ID, quoteNote(c.EscalatedFrom), c.Type))
	}
	if !u.Matches(*c.UnderThreshold) {
		d = append(d, fmt.Sprintf("computed under threshold %v, but the certificate %s it names is for %v", *c.UnderThreshold, u.ID, u.Threshold))
	}
	return d
}
