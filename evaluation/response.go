package evaluation

import (
	"errors"
	"strconv"
)

// Response is what the gateway reads of a 200 evaluation response.
type Response struct {
	// Model is the concrete version that answered.
	Model string
	// InputTokens is usage.input_tokens, the basis of billing; HasUsage
	// reports whether the response carried it.
	InputTokens int64
	HasUsage    bool
	// OutputTokens is usage.output_tokens, which is not billed (traces
	// report it); HasOutputTokens reports whether the response carried it.
	OutputTokens    int64
	HasOutputTokens bool
	// Answers are in the order the body lists them.
	Answers []Answer
}

// Answer is one entry of the response's `answers` map.
type Answer struct {
	ID   string
	Type string
	// Noul is the probability of yes (noul answers); Confidence is the
	// choice or score confidence. HasNoul and HasConfidence report whether
	// the field was a number.
	Noul, Confidence       float64
	HasNoul, HasConfidence bool
	// Choice is the option key a choice answer picked, HasChoice whether
	// the field was a string. Score is a score answer's probability-weighted
	// tier number, HasScore whether the field was a number. The review queue
	// stores them as the model's answer.
	Choice    string
	HasChoice bool
	Score     float64
	HasScore  bool
}

// Find returns the answer to question id. A repeated id is answered by its
// last occurrence, as JSON decoders read repeated keys.
func (r *Response) Find(id string) (Answer, bool) {
	for i := len(r.Answers) - 1; i >= 0; i-- {
		if r.Answers[i].ID == id {
			return r.Answers[i], true
		}
	}
	return Answer{}, false
}

// AnswersAll reports whether the response answers every question of qs:
// each has an answer of its type that carries the type's value (the noul
// probability, the choice key, the score). A body that says something
// else with a 200 (an error's detail, an empty answers map) answers
// nothing. Linear in the questions and answers.
func (r *Response) AnswersAll(qs []Question) bool {
	last := make(map[string]Answer, len(r.Answers))
	for _, a := range r.Answers {
		last[a.ID] = a // a repeated id is answered by its last occurrence
	}
	for _, q := range qs {
		a, ok := last[q.ID]
		if !ok || a.Type != q.Type {
			return false
		}
		switch q.Type {
		case TypeNoul:
			ok = a.HasNoul
		case TypeChoice:
			ok = a.HasChoice
		case TypeScore:
			ok = a.HasScore
		}
		if !ok {
			return false
		}
	}
	return true
}

// ErrUnreadable is a response body that is not a readable evaluation answer.
var ErrUnreadable = errors.New("unreadable evaluation response")

// ParseResponse reads model, usage and the answers' types, numbers and
// choices from a (decompressed) 200 body in one pass, skipping everything
// else (the probabilities and legends).
func ParseResponse(body []byte) (*Response, error) {
	s := scanner{b: body}
	resp := &Response{}
	var (
		cur                                 Answer
		visitAnswer, visitAnswers, visitTop func(key span) bool
		visitUsage                          func(key span) bool
	)
	number := func(sp span) (float64, bool) {
		if sp.kind != kindNumber || s.err != nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(string(raw(body, sp)), 64)
		return v, err == nil
	}
	visitAnswer = func(key span) bool {
		switch {
		case s.keyIs(key, "type"):
			cur.Type = ""
			if sp := s.value(nil); sp.kind == kindString && s.err == nil {
				cur.Type = s.typeName(sp)
			}
		case s.keyIs(key, "noul"):
			cur.Noul, cur.HasNoul = number(s.value(nil))
		case s.keyIs(key, "confidence"):
			cur.Confidence, cur.HasConfidence = number(s.value(nil))
		case s.keyIs(key, "score"):
			cur.Score, cur.HasScore = number(s.value(nil))
		case s.keyIs(key, "choice"):
			cur.Choice, cur.HasChoice = "", false
			if sp := s.value(nil); sp.kind == kindString && s.err == nil {
				cur.Choice, cur.HasChoice = s.text(sp), true
			}
		default:
			return false
		}
		return true
	}
	visitAnswers = func(key span) bool {
		cur = Answer{ID: s.text(key)}
		// A value that is no answer object is kept as an answer with no
		// type, so a repeated id's last value wins whatever it is.
		s.value(visitAnswer)
		resp.Answers = append(resp.Answers, cur)
		return true
	}
	count := func(sp span) (int64, bool) {
		if sp.kind != kindNumber || s.err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(string(raw(body, sp)), 10, 64)
		return v, err == nil && v >= 0
	}
	visitUsage = func(key span) bool {
		switch {
		case s.keyIs(key, "input_tokens"):
			resp.InputTokens, resp.HasUsage = count(s.value(nil))
		case s.keyIs(key, "output_tokens"):
			resp.OutputTokens, resp.HasOutputTokens = count(s.value(nil))
		default:
			return false
		}
		return true
	}
	visitTop = func(key span) bool {
		switch {
		case s.keyIs(key, "model"):
			resp.Model = ""
			if sp := s.value(nil); sp.kind == kindString && s.err == nil {
				resp.Model = s.text(sp)
			}
		case s.keyIs(key, "answers"):
			resp.Answers = resp.Answers[:0]
			s.value(visitAnswers)
		case s.keyIs(key, "usage"):
			s.value(visitUsage)
		default:
			return false
		}
		return true
	}
	root := s.document(visitTop)
	if s.err != nil || root.kind != kindObject {
		return nil, ErrUnreadable
	}
	return resp, nil
}
