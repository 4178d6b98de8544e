package calibrate

import (
	"math"
	"slices"
)

// MethodAnytime's construction. The guarantee: for any rule for when to
// look (after every label included), the chance that a threshold the
// method ever reports for a group has agreement below the target is at
// most delta. Four parts:
//
//  1. The entry is the unit. The questions of one entry share a state, so
//     their agreements are not independent; an entry's questions in the
//     group are one observation. At a candidate t, with N_t the entry's
//     labelled questions in the group with confidence >= t and A_t those
//     of them that agree, the observation is
//     Y(t) = (A_t - target N_t) / M, where M is max_questions, the most
//     questions of the group an entry may hold, fixed in advance (an
//     entry with more is refused and counted): Y is in
//     [-target, 1 - target]. Its mean over entries is at least 0 exactly
//     when E[A_t] >= target E[N_t], that is when the agreement of the
//     distinct answers at or above t is at least the target, however the
//     number of questions per entry varies and however it relates to
//     difficulty: each answer weighs the same. (Weighing each entry 1/N,
//     its share of agreeing answers, would promise an average over
//     entries, which long hard entries break.) The price is power: an
//     entry of one question moves the wealth 1/M as far as one of M. An
//     entry with no answer at or above t gives Y = 0 and leaves the
//     evidence as it is: the share of traffic at or above t needs no
//     estimate.
//  2. Per candidate, a betting e-process (Waudby-Smith and Ramdas,
//     "Estimating means of bounded random variables by betting", JRSSB
//     2023) for H0(t): E[Y(t)] < 0, the wealth prod(1 + l_i Y_i(t)) with
//     l_i in [0, betCap/target] set from the earlier entries only (aGRAPA,
//     section 5 of the paper, with one pseudo-observation at an agreement
//     halfway between the target and 1). Under H0 it is a nonnegative
//     supermartingale, so by Ville's inequality the chance it ever reaches
//     1/a is at most a, however long it runs and whenever anyone looks: a
//     candidate is rejected at level a once its wealth has ever reached
//     1/a (its running maximum), and stays rejected. When every entry
//     agrees the bet sits at its cap, so full agreement passes in about
//     ln(1/a) / ln(1 + betCap (1 - target) / target) entries.
//  3. The candidates are a grid fixed in advance, the confidences k/100
//     (k = 100 down to 0), tested in a fixed sequence from a start down
//     (Learn then Test: Angelopoulos, Bates, Candès, Jordan and Lei, 2021),
//     with two starting points and delta split between them: the fallback
//     procedure (Wiens and Dmitrienko, "The fallback procedure for
//     evaluating a single family of hypotheses", J. Biopharm. Stat. 2005).
//     The first start A is tested at delta/2; each candidate below it at
//     the level of the one above when that one is rejected (else it is not
//     reachable from A); the second start S at delta/2 plus what reaches
//     it. It is a shortcut of closed testing with weighted Bonferroni
//     tests, so the chance that any candidate whose agreement is below the
//     target is ever rejected is at most delta; with e-processes and their
//     running maxima this holds at every time at once. The threshold is
//     the lowest rejected candidate.
//  4. The starts are set once, from the confidences (never the labels) of
//     the group's first BurnIn entries in entry order, and those entries
//     are then not used as evidence, so the starts are independent of the
//     evidence and never move as labels accrue: A at the highest fifth of
//     their top confidences, S at their median, each rounded down to the
//     grid. (A start chosen afresh at each look, as the one-look method
//     does, would be a new test at each look.)
//
// Evidence is taken in entry order (the stream's, fixed before any label
// exists), never in the order labels were stored.

// gridSteps is the grid's resolution: candidates k/gridSteps.
const gridSteps = 100

func gridValue(k int) float64 { return float64(k) / gridSteps }

// gridIndex is the highest grid candidate at or below c.
func gridIndex(c float64) int {
	k := min(max(int(math.Floor(c*gridSteps)), 0), gridSteps)
	for k < gridSteps && gridValue(k+1) <= c {
		k++
	}
	for k > 0 && gridValue(k) > c {
		k--
	}
	return k
}

// BurnIn is how many of a group's first entries (those with a confidence)
// set MethodAnytime's starting points and are then not evidence: a quarter
// of MinLines(target, delta), at least 1. Small enough that with every
// entry agreeing at one confidence the method needs at most twice the
// entries the one-look method needs (for targets of 0.5 and above).
func BurnIn(target, delta float64) int {
	return max(1, (MinLines(target, delta)+3)/4)
}

// eprocess is one candidate's betting e-process, in logarithms so that
// neither wealth nor evidence overflows at any delta.
type eprocess struct {
	logWealth, logMax float64
	// sum, sumSq and sumScale are running sums of Y, Y^2 and the
	// observations' scale (f/p, 1 unweighted), and count their number, each
	// with one prior pseudo-observation; the bet is set from them.
	sum, sumSq, sumScale, count float64
	// n and agree count the questions at or above the candidate in the
	// entries observed, entries those entries.
	n, agree, entries int
}

// newEprocess starts a candidate's e-process with its prior
// pseudo-observation: an entry agreeing halfway between the target and 1.
func newEprocess(target float64) eprocess {
	prior := (1 + target) / 2
	return eprocess{
		sum:      prior - target,
		sumSq:    prior*(1-target)*(1-target) + (1-prior)*target*target,
		sumScale: 1,
		count:    1,
	}
}

// bet is the growth-optimal (Kelly) bet against the two-point
// distribution on the observations' extremes u = s(1 - target) and
// -d = -s target with the mean seen so far: mean / (u d), where u d is
// estimated as E[Y^2] - mean (u - d), exact for two points. It is the
// predictable plug-in of Waudby-Smith and Ramdas (2023), with the
// two-point denominator in place of aGRAPA's E[Y^2], which overbets a
// skewed observation (at 95% agreement against a target of 0.9, aGRAPA
// bets 1 where the optimum is 0.56, and its wealth shrinks). With every
// entry agreeing, the bet goes to its cap, betCap/target; any bet in
// [0, betCap/target] keeps the wealth a supermartingale under the null.
func (e *eprocess) bet(target float64) float64 {
	mean := e.sum / e.count
	if mean <= 0 {
		return 0
	}
	limit := betCap / target
	den := e.sumSq/e.count - mean*(e.sumScale/e.count)*(1-2*target)
	if den <= 0 {
		return limit
	}
	return min(mean/den, limit)
}

// observe multiplies the wealth by 1 + bet Y for an observation y of
// scale s.
func (e *eprocess) observe(y, s, target float64) {
	e.logWealth += math.Log1p(e.bet(target) * y)
	e.logMax = max(e.logMax, e.logWealth)
	e.sum += y
	e.sumSq += y * y
	e.sumScale += s
	e.count++
}

// rejected reports whether the wealth has ever reached 1/level.
func (e *eprocess) rejected(level float64) bool {
	return level > 0 && e.logMax >= -math.Log(level)
}

// obsLine is one labelled question of an entry, as the walk reads it.
type obsLine struct {
	confidence float64
	agree      bool
}

// perEntryWeights, for the simulations only, weighs each entry's answers
// 1/N (N its questions in the group), as the walk did before it weighed
// them against max_questions: to show the per-answer premise fails so.
var perEntryWeights bool

// walker holds one group's e-processes as entries arrive in entry order.
type walker struct {
	target, delta float64
	weighted      bool
	// maxQuestions is the most questions of the group an entry may hold
	// (Options.MaxQuestions): each observation is weighed against it, and
	// an entry above it is refused, counted in refused.
	maxQuestions int
	refused      int
	burn         int
	tops         []float64 // the burn-in entries' top confidences
	started      bool
	startA       int // grid index of the first start
	startS       int // grid index of the second start, <= startA
	// barA and barS are -ln of the starts' own levels (hasThreshold's).
	barA, barS float64
	procs      []eprocess
	last       Draw // the last entry's draw, for labels_needed
	scratch    []obsLine
}

func newWalker(target, delta float64, weighted bool, maxQuestions int) *walker {
	return &walker{target: target, delta: delta, weighted: weighted, burn: BurnIn(target, delta), maxQuestions: max(maxQuestions, 1)}
}

func (w *walker) clone() *walker {
	c := *w
	c.tops = slices.Clone(w.tops)
	c.procs = slices.Clone(w.procs)
	c.scratch = nil
	return &c
}

// observe takes one entry: its labelled questions in the group, its draw,
// and whether its lines were replayed. An entry with no confidence gives
// nothing to any candidate.
func (w *walker) observe(lines []obsLine, draw Draw, replay bool) {
	if len(lines) == 0 {
		return
	}
	if len(lines) > w.maxQuestions {
		// Weighed against maxQuestions, such an entry could take the
		// wealth below 0: refused, and counted.
		w.refused++
		return
	}
	top := -1.0
	for _, l := range lines {
		top = max(top, l.confidence)
	}
	if top < 0 {
		return // no question of the entry has a confidence
	}
	w.last = draw
	if !w.started {
		w.tops = append(w.tops, top)
		if len(w.tops) == w.burn {
			w.start()
		}
		return
	}
	scored := w.scratch[:0]
	for _, l := range lines {
		if l.confidence >= 0 {
			scored = append(scored, l)
		}
	}
	slices.SortFunc(scored, func(a, b obsLine) int {
		switch {
		case a.confidence > b.confidence:
			return -1
		case a.confidence < b.confidence:
			return 1
		}
		return 0
	})
	w.scratch = scored
	total := w.entryTotal(lines)
	nt, at, j := 0, 0, 0
	for k := min(gridIndex(top), w.startA); k >= 0; k-- {
		t := gridValue(k)
		for ; j < len(scored) && scored[j].confidence >= t; j++ {
			nt++
			if scored[j].agree {
				at++
			}
		}
		w.feed(k, nt, at, total, draw, replay)
	}
}

// entryTotal is what an entry's evidence is weighed against: maxQuestions
// (its number of questions under perEntryWeights).
func (w *walker) entryTotal(lines []obsLine) float64 {
	if perEntryWeights {
		return float64(len(lines))
	}
	return float64(w.maxQuestions)
}

// feed gives candidate k an entry's observation: nt of its questions at or
// above the candidate, at of them agreeing, weighed against total. An
// entry with none there leaves the candidate as it is.
func (w *walker) feed(k, nt, at int, total float64, draw Draw, replay bool) {
	if nt == 0 {
		return
	}
	y, s := w.observation(k, nt, at, total, draw, replay)
	e := &w.procs[k]
	e.observe(y, s, w.target)
	e.n += nt
	e.agree += at
	e.entries++
}

// observation is candidate k's observation y of an entry with nt of its
// questions at or above the candidate, at of them agreeing, and its scale
// s (f/p weighted, else 1).
func (w *walker) observation(k, nt, at int, total float64, draw Draw, replay bool) (y, s float64) {
	s = 1.0
	if w.weighted {
		s = draw.floorAt(gridValue(k), replay) / draw.p()
	}
	return s * (float64(at) - w.target*float64(nt)) / total, s
}

// start sets the starting points from the burn-in's top confidences.
func (w *walker) start() { w.startWith(0, 0) }

// startWith sets the starting points from the burn-in's top confidences
// and extra more entries at confidence top (labels_needed's, without
// holding them one by one).
func (w *walker) startWith(extra int, top float64) {
	tops := slices.Clone(w.tops)
	slices.SortFunc(tops, func(a, b float64) int {
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	})
	n := len(tops) + extra
	rank := func(r int) float64 { // the r-th highest, from 1
		above := 0 // tops strictly above top come first, then the extra ones
		for above < len(tops) && tops[above] > top {
			above++
		}
		switch {
		case extra == 0 || r <= above:
			return tops[r-1]
		case r <= above+extra:
			return top
		}
		return tops[r-1-extra]
	}
	w.startA = gridIndex(rank((n + 4) / 5))
	w.startS = gridIndex(rank((n + 1) / 2))
	w.procs = make([]eprocess, w.startA+1)
	for k := range w.procs {
		w.procs[k] = newEprocess(w.target)
	}
	w.barA, w.barS = -math.Log(w.startShare(w.startA)), -math.Log(w.startShare(w.startS))
	w.started = true
}

// levels returns the fallback procedure's level of each candidate, given
// the rejections so far, and the lowest rejected candidate (-1: none).
func (w *walker) levels() (levels []float64, lowest int) {
	lowest = -1
	if !w.started {
		return nil, lowest
	}
	levels = make([]float64, w.startA+1)
	carry := 0.0
	for k := w.startA; k >= 0; k-- {
		level := carry + w.startShare(k)
		levels[k] = level
		carry = 0
		if w.procs[k].rejected(level) {
			lowest, carry = k, level
		}
	}
	return levels, lowest
}

// hasThreshold reports whether some candidate is rejected: levels' walk
// reduced to what decides it. Every candidate but a start is tested at
// the level carried down from a rejection above it, so some candidate is
// rejected exactly when a start is: A at its share, or S at delta/2 (the
// carry it would add comes from a rejection, which already answers). The
// bars are the starts' -ln(level), set with the starts, so that the
// futures of labels_expected, which ask after every entry, take no
// logarithm.
func (w *walker) hasThreshold() bool {
	if !w.started {
		return false
	}
	if w.procs[w.startA].logMax >= w.barA {
		return true
	}
	return w.startS != w.startA && w.procs[w.startS].logMax >= w.barS
}

// startShare is candidate k's share of delta before any level carried
// down to it: all of delta for a start both starts share, half for each of
// two starts, none below them.
func (w *walker) startShare(k int) float64 {
	switch {
	case k == w.startA && w.startA == w.startS:
		return w.delta
	case k == w.startA, k == w.startS:
		return w.delta / 2
	}
	return 0
}

// startLevel is the level the first start is tested at.
func (w *walker) startLevel() float64 { return w.startShare(w.startA) }

// needed is labels_needed: the fewest more entries, each one agreeing
// question at confidence top (weighed 1/maxQuestions) drawn like the last entry, after which the
// group has a threshold. Such entries first complete the burn-in; after
// it a threshold exists exactly when a start is rejected (every other
// candidate is reachable only through one), and each start's wealth only
// grows with them, so the count is the burn-in's remainder plus the
// fewer of the two starts' counts, each stepped alone.
func (w *walker) needed(top float64) int {
	if w.hasThreshold() {
		return 0
	}
	c := w.clone()
	m := 0
	if !c.started {
		m = c.burn - len(c.tops)
		c.startWith(m, top)
	}
	if c.hasThreshold() {
		return m
	}
	steps := c.stepsToReject(c.startA, top, c.startLevel())
	if c.startS != c.startA {
		steps = min(steps, c.stepsToReject(c.startS, top, c.delta/2))
	}
	return m + steps
}

// stepsToReject counts the entries, each one agreeing question at
// confidence top, after which candidate k's wealth reaches 1/level. Each
// gives it the same observation y; while the bet is 0 the wealth stays,
// and those steps are skipped at once.
func (w *walker) stepsToReject(k int, top, level float64) int {
	if gridIndex(top) < k {
		return math.MaxInt // never reached by entries at top (not after a burn-in at top)
	}
	e := w.procs[k]
	s := 1.0
	if w.weighted {
		s = w.last.floorAt(gridValue(k), false) / w.last.p()
	}
	y := s * (1 - w.target) / float64(w.maxQuestions)
	steps := 0
	if e.sum <= 0 {
		skip := int(math.Floor(-e.sum/y)) + 1
		e.sum += float64(skip) * y
		e.sumSq += float64(skip) * y * y
		e.sumScale += float64(skip) * s
		e.count += float64(skip)
		steps += skip
	}
	limit := betCap / w.target
	for !e.rejected(level) {
		if e.bet(w.target) >= limit {
			// At its cap the bet stays there (the mean only rises): the
			// wealth grows by the same factor each step, counted at once.
			need := (-math.Log(level) - e.logWealth) / math.Log1p(limit*y)
			return steps + max(1, int(math.Ceil(need-1e-9)))
		}
		e.observe(y, s, w.target)
		steps++
	}
	return steps
}
