package calibrate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Methods of Options.Method.
const (
	// MethodUniform is the contract's method: audited lines are a uniform
	// sample, each candidate is tested with the Clopper-Pearson bound. The
	// default ("" means it too).
	MethodUniform = "uniform"
	// MethodWeighted reads lines of the active audit (`audit active`),
	// drawn with probabilities that depend on their confidence, and keeps
	// the same guarantee: with probability at least 1 - Delta, the
	// agreement of the traffic's answers at or above a chosen threshold is
	// at least Target.
	//
	// The walk is the contract's (same candidates, same start, fixed
	// sequence from the top, stop at the first failure: Learn then Test,
	// Angelopoulos, Bates, Candès, Jordan and Lei, 2021). Only the test of a
	// candidate t changes, and each test is valid at level Delta on its own:
	//
	//   - When the draw is uniform over the answers at or above t (every
	//     line's `audit_from` <= t, and every line at or above t drawn with
	//     the same `audit_p`), the drawn lines at or above t are a uniform
	//     sample of the traffic at or above t, and the Clopper-Pearson bound
	//     applies exactly as in the uniform method. Lines of the uniform
	//     audit are always in this case: on them both methods give the same
	//     thresholds.
	//   - Otherwise the test is an importance-weighted betting e-process
	//     (Waudby-Smith and Ramdas, "Estimating means of bounded random
	//     variables by betting", JRSSB 2023; with importance weights as in
	//     Xu et al., "Active, anytime-valid risk controlling
	//     prediction sets", NeurIPS 2024, and Zrnic and Candès, "Active
	//     statistical inference", ICML 2024). Over every routed answer i,
	//     drawn or not, Z_i = (D_i / p_i) 1{c_i >= t} (agree_i - Target),
	//     where D_i is 1 when the answer was drawn with probability p_i.
	//     Its mean is E[1{c >= t} (agree - Target)], which is below 0
	//     exactly when the agreement at or above t is below Target: the
	//     ratio is tested through its numerator, with no estimate of the
	//     share of traffic at or above t. The wealth prod(1 + b_i Z_i), with
	//     bets b_i >= 0 fixed before answer i is seen, is then a nonnegative
	//     supermartingale under the null, so by Ville's inequality it
	//     reaches 1/Delta with probability at most Delta; t passes when it
	//     does. An answer not drawn has Z_i = 0 and leaves the wealth as it
	//     is, so the test needs the drawn lines only, in their order, and no
	//     count of the answers not drawn. Each bet is b_i = l_i * f_i, where
	//     l_i in [0, 0.9/Target] is learned from the earlier lines (aGRAPA)
	//     and f_i is the least probability with which any answer at or above
	//     t could have been drawn under the line's audit (its audit_p when
	//     t >= audit_from, else audit_floor), so that every factor stays
	//     above 0.1.
	//
	// Lines are taken in the order given (the /labels export is in entry
	// order); as in the uniform method each labelled question is one
	// observation. Coverage is the share of the traffic at or above the
	// threshold, estimated with the weights 1/audit_p (the Hájek ratio);
	// it is reported, not guaranteed, as in the uniform method.
	MethodWeighted = "weighted"
)

// Draw is how the audit drew a line: the `/labels` fields audit_p,
// audit_floor and audit_from.
type Draw struct {
	// P is the probability the entry was drawn with; HasP is false when the
	// line has no audit_p (a gateway older than the field).
	P    float64
	HasP bool
	// Active is true for a line of the active audit, which draws every
	// answer whose response has a confidence at or above From with
	// probability P's share, and the others with Floor.
	Active      bool
	Floor, From float64
}

// readDraw reads the optional audit_p, audit_floor and audit_from of a
// `/labels` line: numbers in 0..1, floor and from together, a floor above
// 0 and at most audit_p.
func readDraw(fields map[string]json.RawMessage) (Draw, error) {
	var d Draw
	num := func(name string) (float64, bool, error) {
		raw, ok := fields[name]
		if !ok || bytes.Equal(raw, []byte("null")) {
			return 0, false, nil
		}
		var v float64
		if json.Unmarshal(raw, &v) != nil || !(v >= 0 && v <= 1) {
			return 0, false, fmt.Errorf("%q is %s, want a number from 0 to 1", name, abbreviate(raw))
		}
		return v, true, nil
	}
	var hasFloor, hasFrom bool
	var err error
	if d.P, d.HasP, err = num("audit_p"); err != nil {
		return Draw{}, err
	}
	if d.Floor, hasFloor, err = num("audit_floor"); err != nil {
		return Draw{}, err
	}
	if d.From, hasFrom, err = num("audit_from"); err != nil {
		return Draw{}, err
	}
	switch {
	case hasFloor != hasFrom:
		return Draw{}, errors.New(`"audit_floor" and "audit_from" come together, or not at all`)
	case hasFloor && !d.HasP:
		return Draw{}, errors.New(`"audit_floor" without "audit_p"`)
	case hasFloor && !(d.Floor > 0 && d.Floor <= d.P):
		return Draw{}, fmt.Errorf(`"audit_floor" %v is not above 0 and at most "audit_p" %v`, d.Floor, d.P)
	}
	d.Active = hasFloor
	return d, nil
}

// checkDraws refuses what a method cannot read validly. The uniform
// method assumes a uniform draw: lines of the active audit, or drawn with
// different probabilities, are refused, never silently treated as
// uniform. The weighted method needs every audited line's probability, or
// none (lines of a gateway older than audit_p, then all taken as drawn
// uniformly, which the uniform method assumes too).
func checkDraws(audited []Line, method string) error {
	var with, active int
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range audited {
		if l.Draw.HasP {
			with++
			lo, hi = min(lo, l.Draw.P), max(hi, l.Draw.P)
		}
		if l.Draw.Active {
			active++
		}
	}
	if method != MethodWeighted {
		switch {
		case active > 0:
			return fmt.Errorf("%d audited lines were drawn by the active audit (audit_floor, audit_from): their draw depends on confidence, so the uniform method would be biased; run with --method weighted", active)
		case with > 0 && lo != hi:
			return fmt.Errorf("the audited lines were drawn with different probabilities (audit_p from %v to %v): the uniform method assumes one; run with --method weighted", lo, hi)
		}
		return nil
	}
	if with > 0 && with < len(audited) {
		return fmt.Errorf("%d of %d audited lines have no audit_p (written before the gateway recorded it): they cannot be weighed with the others; calibrate them apart", len(audited)-with, len(audited))
	}
	if with > 0 && lo <= 0 {
		return errors.New("an audited line has audit_p 0: it could not have been drawn")
	}
	return nil
}

// p is the line's probability; 1 for a line without one (all lines are
// then without, and a constant is all the walk needs).
func (d Draw) p() float64 {
	if !d.HasP {
		return 1
	}
	return d.P
}

// from is the confidence from which the line's audit drew uniformly: 0
// for the uniform audit.
func (d Draw) from() float64 {
	if !d.Active {
		return 0
	}
	return d.From
}

// floorAt is the least probability with which the line's audit could draw
// an answer at or above t: its own probability when t is in the uniform
// part of the draw (its entry, at or above t >= from, was drawn with the
// share), else the floor.
func (d Draw) floorAt(t float64) float64 {
	if !d.Active || t >= d.From {
		return d.p()
	}
	return d.Floor
}

// betCap bounds the learned bet l_i at 0.9/m, so that each factor of the
// wealth is at least 0.1: one disagreement never ruins it.
const betCap = 0.9

// walkWeighted runs MethodWeighted's walk over one group's lines.
func (m *tally) walkWeighted(target, delta float64, nmin int) Group {
	g := Group{Labels: m.labels}
	order := m.scored // in the order given, for the e-process
	scored := slices.Clone(m.scored)
	slices.SortFunc(scored, func(a, b point) int { return cmp.Compare(b.confidence, a.confidence) })
	maxFrom, total := 0.0, 0.0
	for _, d := range m.draws {
		maxFrom = max(maxFrom, d.from())
		total += 1 / d.p()
	}

	type outcome struct {
		t       float64
		k, n    int
		weight  float64 // sum of 1/p at or above t
		uniform bool
	}
	var passed, failed *outcome
	n, k := 0, 0
	weight, lo, hi := 0.0, math.Inf(1), math.Inf(-1)
	for i := 0; i < len(scored); {
		t := scored[i].confidence
		for ; i < len(scored) && scored[i].confidence == t; i++ {
			p := m.draws[scored[i].draw].p()
			n++
			weight += 1 / p
			lo, hi = min(lo, p), max(hi, p)
			if scored[i].agree {
				k++
			}
		}
		if n < nmin {
			continue
		}
		o := &outcome{t: t, k: k, n: n, weight: weight, uniform: t >= maxFrom && lo == hi}
		var pass bool
		if o.uniform {
			pass = LowerBound(k, n, delta) >= target
		} else {
			pass = m.rejects(order, t, target, delta)
		}
		if !pass {
			failed = o
			break
		}
		passed = o
	}
	// What the group lacks is said as the uniform method says it: its
	// labels_needed counts lines at the top confidence, which the active
	// audit draws with its share once the top is at or above from.
	cands := candidates(slices.Clone(m.scored))
	for _, c := range cands {
		if c.n >= nmin {
			g.Start = c.confidence
			break
		}
	}
	report := passed
	if report == nil {
		report = failed
	}
	if report == nil {
		g.explain(cands, target, delta, nmin)
		return g
	}
	g.Agree, g.N = report.k, report.n
	if report.uniform {
		g.LowerBound = LowerBound(report.k, report.n, delta)
	} else {
		g.LowerBound = m.lowerBound(order, report.t, target, delta, report == passed)
	}
	if passed != nil {
		g.Threshold, g.HasThreshold = passed.t, true
		g.Coverage = passed.weight / total
	}
	g.explain(cands, target, delta, nmin)
	return g
}

// rejects runs the importance-weighted betting e-process for the null
// "the agreement of answers at or above t is below m" over the group's
// lines in order, and reports whether its wealth reached 1/delta.
//
// With s_i = f_i / p_i (f_i = floorAt(t), so s_i in (0, 1]), the factor of
// line i is 1 + l_i s_i (agree_i - m): the bet on Z_i is b_i = l_i f_i.
// l_i is aGRAPA's (Waudby-Smith and Ramdas 2023, section 5): the mean of
// the earlier Y_j = s_j (agree_j - m) over their mean square, each with
// one pseudo-observation at an agreement halfway between m and 1, clipped
// to [0, betCap/m].
func (m *tally) rejects(order []point, t, target, delta float64) bool {
	goal := 1 / delta
	prior := (1 + target) / 2
	sum := prior - target
	sumSq := prior*(1-target)*(1-target) + (1-prior)*target*target
	count := 1.0
	wealth := 1.0
	for _, x := range order {
		if x.confidence < t {
			continue // Z = 0: the wealth stays
		}
		d := m.draws[x.draw]
		s := d.floorAt(t) / d.p()
		y := -target * s
		if x.agree {
			y = (1 - target) * s
		}
		mean := sum / count
		bet := min(max(mean/(sumSq/count), 0), betCap/target)
		wealth *= 1 + bet*y
		if wealth >= goal {
			return true
		}
		sum += y
		sumSq += y * y
		count++
	}
	return false
}

// lowerBound is the betting lower confidence bound at t: the largest
// agreement m whose null the e-process rejects, found by bisection to
// 1e-6. passed says whether target itself was rejected: the search then
// runs above it, else below, so that the bound is at or above the target
// exactly when the candidate passed.
func (m *tally) lowerBound(order []point, t, target, delta float64, passed bool) float64 {
	lo, hi := 0.0, target
	if passed {
		lo, hi = target, 1
	}
	for hi-lo > 1e-6 {
		mid := (lo + hi) / 2
		if m.rejects(order, t, mid, delta) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
