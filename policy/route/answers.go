package route

import "github.com/systemone/systemone-gateway/evaluation"

// readAnswers sets the confidence and the answer on each question of qs
// whose answer in answers is readable (evaluation.Answer.Read). A repeated
// id is answered by its last occurrence, as evaluation.Response.Find reads
// it. It walks the answers once rather than calling Find per question,
// which would be quadratic in the question count, a number only the
// request's size bounds.
func readAnswers(answers []evaluation.Answer, qs []QuestionRoute) {
	index := questionIndex{qs: qs}
	for _, a := range answers {
		if i := index.find(a.ID); i >= 0 {
			q := &qs[i]
			r, ok := a.Read(q.Type)
			q.Confidence, q.HasConfidence = r.Confidence, ok
			q.Answer, q.Choice, q.HasAnswer = r.Answer, r.Choice, r.HasAnswer
		}
	}
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
