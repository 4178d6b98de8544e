package route

import (
	"math"

	"github.com/systemone/systemone-gateway/evaluation"
)

// readAnswers sets the confidence and the answer on each question of qs
// whose answer in answers is readable: of the question's type, with its
// number in 0..1. The answer itself is set only with the confidence, so a
// queue entry never holds an answer whose confidence was unreadable. A repeated id is answered by its last occurrence, as
// evaluation.Response.Find reads it. It walks the answers once rather than
// calling Find per question, which would be quadratic in the question count,
// a number only the request's size bounds.
func readAnswers(answers []evaluation.Answer, qs []QuestionRoute) {
	index := questionIndex{qs: qs}
	for _, a := range answers {
		if i := index.find(a.ID); i >= 0 {
			q := &qs[i]
			q.Confidence, q.HasConfidence = confidence(a, q.Type)
			q.Answer, q.Choice, q.HasAnswer = 0, "", false
			if q.HasConfidence {
				q.Answer, q.Choice, q.HasAnswer = answer(a)
			}
		}
	}
}

// confidence returns the answer's confidence (`confidence` for choice and
// score, |2p-1| for noul p), and whether the answer is readable for a
// question of type typ.
func confidence(a evaluation.Answer, typ string) (float64, bool) {
	if a.Type != typ {
		return 0, false
	}
	switch typ {
	case evaluation.TypeNoul:
		if !a.HasNoul || !inUnit(a.Noul) {
			return 0, false
		}
		return noulConfidence(a.Noul), true
	case evaluation.TypeChoice, evaluation.TypeScore:
		if !a.HasConfidence || !inUnit(a.Confidence) {
			return 0, false
		}
		return math.Abs(a.Confidence), true // -0 is in range, but would print as "-0.00"
	}
	return 0, false
}

// answer returns the model's answer of a, a readable answer: the noul
// probability, the score, or the choice key, and whether the field was there.
func answer(a evaluation.Answer) (float64, string, bool) {
	switch a.Type {
	case evaluation.TypeNoul:
		return a.Noul, "", true // confidence checked it
	case evaluation.TypeChoice:
		return 0, a.Choice, a.HasChoice
	case evaluation.TypeScore:
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

// questionIndex finds questions by id. Answers usually come in the
// questions' order, so it tries the one after the last match first; it
// builds a map only for large requests whose answers come out of order, to
// stay linear whatever the body holds.
type questionIndex struct {
	qs   []QuestionRoute
	next int
	byID map[string]int
}

// find returns the index of the first question whose id is id, or -1.
func (x *questionIndex) find(id string) int {
	if x.next < len(x.qs) && x.qs[x.next].ID == id {
		x.next++
		return x.next - 1
	}
	if len(x.qs) <= 16 {
		for i := range x.qs {
			if x.qs[i].ID == id {
				x.next = i + 1
				return i
			}
		}
		return -1
	}
	if x.byID == nil {
		x.byID = make(map[string]int, len(x.qs))
		for i := len(x.qs) - 1; i >= 0; i-- {
			x.byID[x.qs[i].ID] = i
		}
	}
	i, ok := x.byID[id]
	if !ok {
		return -1
	}
	x.next = i + 1
	return i
}
