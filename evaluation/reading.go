package evaluation

import "math"

// Reading is the gateway's reading of a readable answer: the confidence it
// routes by and the model's answer. The routing policy reads every answer
// of a response through it, and `replay` reads a candidate version's
// answers the same way.
type Reading struct {
	// Confidence is `confidence` for choice and score, |2p-1| for noul p.
	Confidence float64
	// Answer is the noul probability of yes or the score
	// (probability-weighted tier number), Choice the option key a choice
	// answer picked; HasAnswer reports whether the answer's field was there.
	Answer    float64
	Choice    string
	HasAnswer bool
}

// Read returns the gateway's reading of a for a question of type typ; ok
// is false when a is unreadable for it: of another type, or without its
// number in 0..1. The answer itself is read only with the confidence, so
// that nothing downstream holds an answer whose confidence was unreadable.
func (a Answer) Read(typ string) (r Reading, ok bool) {
	r.Confidence, ok = confidence(a, typ)
	if ok {
		r.Answer, r.Choice, r.HasAnswer = answer(a)
	}
	return r, ok
}

// confidence returns the answer's confidence (`confidence` for choice and
// score, |2p-1| for noul p), and whether the answer is readable for a
// question of type typ.
func confidence(a Answer, typ string) (float64, bool) {
	if a.Type != typ {
		return 0, false
	}
	switch typ {
	case TypeNoul:
		if !a.HasNoul || !inUnit(a.Noul) {
			return 0, false
		}
		return noulConfidence(a.Noul), true
	case TypeChoice, TypeScore:
		if !a.HasConfidence || !inUnit(a.Confidence) {
			return 0, false
		}
		return math.Abs(a.Confidence), true // -0 is in range, but would print as "-0.00"
	}
	return 0, false
}

// answer returns the model's answer of a, a readable answer: the noul
// probability, the score, or the choice key, and whether the field was there.
func answer(a Answer) (float64, string, bool) {
	switch a.Type {
	case TypeNoul:
		return a.Noul, "", true // confidence checked it
	case TypeChoice:
		return 0, a.Choice, a.HasChoice
	case TypeScore:
		return a.Score, "", a.HasScore
	}
	return 0, "", false
}

// noulConfidence returns |2p-1| for p in 0..1, rounded to 9 decimal places.
// p is the binary neighbour of the decimal the service wrote, so the float64
// result can miss the decimal one by an ulp: 2*0.95-1 is 0.8999999999999999,
// which would fail a threshold of 0.9 that the answer meets exactly. The
// service writes probabilities with two decimals; rounding to 9, far finer
// than that and far coarser than float64's error (about 1e-16), gives back
// the decimal result exactly and changes nothing at the precision thresholds
// are written in.
func noulConfidence(p float64) float64 {
	return math.Round(math.Abs(2*p-1)*1e9) / 1e9
}

// inUnit reports whether v is in 0..1; NaN is not.
func inUnit(v float64) bool { return v >= 0 && v <= 1 }
