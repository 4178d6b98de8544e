package calibrate

import (
	"errors"
	"fmt"
	"math"
)

// Methods of Options.Method.
const (
	// MethodAnytime, the default, is anytime.go's: valid for any rule for
	// when to look, each entry one observation, in entry order.
	MethodAnytime = "anytime"
	// MethodUniform is the documented one-look method: audited lines are a
	// uniform sample, each labelled question one observation, each
	// candidate tested with the Clopper-Pearson bound. Valid for one look
	// at a number of labels fixed in advance.
	MethodUniform = "uniform"
	// MethodWeighted reads lines of the active audit (`audit active`),
	// drawn with probabilities that depend on their confidence, and keeps
	// MethodAnytime's guarantee and premises. It is MethodAnytime's walk
	// and e-processes with importance weights (Xu, Karampatziakis and
	// Mineiro, "Active, anytime-valid risk controlling prediction sets",
	// NeurIPS 2024; Zrnic and Candès, "Active statistical inference",
	// ICML 2024): over every routed entry i, drawn or not, the observation
	// is (D_i / p_i) Y_i, where D_i is 1 when the entry was drawn with
	// probability p_i (its audit_p) and Y_i the anytime method's
	// observation; its mean is the mean of Y over the traffic, so the
	// nulls are the same. An entry not drawn leaves the wealth as it is, so
	// only the drawn entries are needed, with no count of the others.
	// Each bet is l_i f_i, where f_i is the least probability with which
	// any entry holding an answer at or above the candidate t could have
	// been drawn (audit_p when t >= audit_from, since the active audit
	// draws by an entry's highest confidence; else audit_floor), so that
	// f_i / p_i <= 1 and every factor stays at least 1 - betCap.
	//
	// A replayed line (route "replay") keeps the original entry's audit_p
	// but carries the new version's confidence, which says nothing of the
	// original's: its weight is still 1/audit_p (the sample was drawn by
	// the original, and the labels are about the content), and f_i is the
	// least probability the audit could have drawn any entry with
	// (audit_floor), never one read off the new confidence.
	//
	// Coverage is the share of the traffic at or above the threshold,
	// estimated with the weights 1/audit_p (the Hájek ratio).
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

// ErrNeedsWeighted is the refusal of the anytime and uniform methods for
// audited lines not drawn with one probability (the active audit, or
// audits of different shares): only the weighted method reads them
// without bias. Callers that choose the method for the user (the review
// page's /progress) tell it apart with errors.Is.
var ErrNeedsWeighted = errors.New("run with --method weighted")

// makeDraw checks and assembles a line's draw from its audit_p,
// audit_floor and audit_from, each nil when absent or null.
func makeDraw(p, floor, from *float64) (Draw, error) {
	var d Draw
	for _, v := range []*float64{p, floor, from} {
		if v != nil && !(*v >= 0 && *v <= 1) {
			return Draw{}, fmt.Errorf("an audit field is %v, want a number from 0 to 1", *v)
		}
	}
	if p != nil {
		d.P, d.HasP = *p, true
	}
	switch {
	case (floor == nil) != (from == nil):
		return Draw{}, errors.New(`"audit_floor" and "audit_from" come together, or not at all`)
	case floor != nil && p == nil:
		return Draw{}, errors.New(`"audit_floor" without "audit_p"`)
	case floor != nil && !(*floor > 0 && *floor <= d.P):
		return Draw{}, fmt.Errorf(`"audit_floor" %v is not above 0 and at most "audit_p" %v`, *floor, d.P)
	}
	if floor != nil {
		d.Active, d.Floor, d.From = true, *floor, *from
	}
	return d, nil
}

// checkDraws refuses what a method cannot read validly, given how many
// audited lines each draw has (counts[i] for draws[i]). The uniform and
// anytime methods assume a uniform draw: lines of the active audit, or
// drawn with different probabilities, are refused, never silently treated
// as uniform. The weighted method needs every audited line's probability,
// or none (lines of a gateway older than audit_p, then all taken as drawn
// uniformly, which the other methods assume too).
func checkDraws(draws []Draw, counts []int, method string) error {
	var with, active, total int
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, d := range draws {
		n := counts[i]
		if n == 0 {
			continue
		}
		total += n
		if d.HasP {
			with += n
			lo, hi = min(lo, d.P), max(hi, d.P)
		}
		if d.Active {
			active += n
		}
	}
	if method != MethodWeighted {
		switch {
		case active > 0:
			return fmt.Errorf("%d audited lines were drawn by the active audit (audit_floor, audit_from): their draw depends on confidence, so the %s method would be biased; %w", active, method, ErrNeedsWeighted)
		case with > 0 && lo != hi:
			return fmt.Errorf("the audited lines were drawn with different probabilities (audit_p from %v to %v): the %s method assumes one; %w", lo, hi, method, ErrNeedsWeighted)
		}
		return nil
	}
	if with > 0 && with < total {
		return fmt.Errorf("%d of %d audited lines have no audit_p (written before the gateway recorded it): they cannot be weighed with the others; calibrate them apart", total-with, total)
	}
	if with > 0 && lo <= 0 {
		return errors.New("an audited line has audit_p 0: it could not have been drawn")
	}
	return nil
}

// p is the line's probability; 1 for a line without one (all lines are
// then without, and a constant is all the weights need).
func (d Draw) p() float64 {
	if !d.HasP {
		return 1
	}
	return d.P
}

// floorAt is the least probability with which the line's audit could have
// drawn an entry holding an answer at or above t: its own probability when
// t is in the uniform part of the draw (t >= from: such an entry's highest
// confidence is at or above from), else the floor. For a replayed line the
// confidence is the new version's, so the original entry could have been
// anywhere: the floor.
func (d Draw) floorAt(t float64, replay bool) float64 {
	if !d.Active || (!replay && t >= d.From) {
		return d.p()
	}
	return d.Floor
}

// betCap bounds the learned bet at betCap/target, so that each factor of
// the wealth is at least 1 - betCap = 0.1: one disagreement never ruins
// it.
const betCap = 0.9
