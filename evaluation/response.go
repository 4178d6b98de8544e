package evaluation

import (
	"errors"
	"strconv"
	"sync"
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

	// inline holds the answers of a response with few: the Response and
	// its answers in one allocation.
	inline [2]Answer
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
// else (the probabilities and legends). It allocates the Response (with
// its answers, when they are few) and one string for every text it keeps.
func ParseResponse(body []byte) (*Response, error) {
	p := responseScans.Get().(*responseScan)
	defer p.release()
	p.s = scanner{b: body}
	root := p.s.document(p.visitTop)
	if p.s.err != nil || root.kind != kindObject {
		return nil, ErrUnreadable
	}
	resp := &Response{InputTokens: p.input, HasUsage: p.hasInput, OutputTokens: p.output, HasOutputTokens: p.hasOutput}
	// The model, and each answer's id and choice, decoded, in one string.
	p.text = p.s.appendText(p.text[:0], p.model)
	for _, t := range p.texts {
		p.text = p.s.appendText(p.s.appendText(p.text, t.id), t.choice)
	}
	text := string(p.text)
	at := 0
	next := func(sp span) string {
		n := p.s.textLen(sp)
		at += n
		return text[at-n : at]
	}
	resp.Model = next(p.model)
	resp.Answers = resp.inline[:0]
	if len(p.answers) > len(resp.inline) {
		resp.Answers = make([]Answer, 0, len(p.answers))
	}
	for i, a := range p.answers {
		a.ID, a.Choice = next(p.texts[i].id), next(p.texts[i].choice)
		resp.Answers = append(resp.Answers, a)
	}
	return resp, nil
}

// responseScan is ParseResponse's scan state: what it found so far, with
// the answers' texts as spans until the scan is done, and the methods
// that visit each level of the body as method values made once.
type responseScan struct {
	s                    scanner
	model                span // of a string; zero when none
	input, output        int64
	hasInput, hasOutput  bool
	cur                  Answer
	curText              answerText
	answers              []Answer
	texts                []answerText // answers[i]'s
	text                 []byte
	visitTop, visitUsage func(key span) bool
	visitAnswers         func(key span) bool
	visitAnswer          func(key span) bool
}

// answerText is the spans of an answer's id and choice (a zero span for
// no choice).
type answerText struct{ id, choice span }

// responseScans recycles ParseResponse's scan state.
var responseScans = sync.Pool{New: func() any {
	p := new(responseScan)
	p.visitTop, p.visitUsage, p.visitAnswers, p.visitAnswer = p.top, p.usage, p.answer, p.answerField
	return p
}}

// release puts p back in responseScans, holding nothing of the body.
func (p *responseScan) release() {
	top, usage, answers, answer := p.visitTop, p.visitUsage, p.visitAnswers, p.visitAnswer
	*p = responseScan{answers: p.answers[:0], texts: p.texts[:0], text: p.text[:0],
		visitTop: top, visitUsage: usage, visitAnswers: answers, visitAnswer: answer}
	clear(p.answers[:cap(p.answers)]) // their Type strings
	responseScans.Put(p)
}

// number reads a number span.
func (p *responseScan) number(sp span) (float64, bool) {
	if sp.kind != kindNumber || p.s.err != nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(raw(p.s.b, sp)), 64)
	return v, err == nil
}

// count reads a count: a number that is a whole, not negative int64.
func (p *responseScan) count(sp span) (int64, bool) {
	if sp.kind != kindNumber || p.s.err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(string(raw(p.s.b, sp)), 10, 64)
	return v, err == nil && v >= 0
}

// answerField takes a field of the answer being read.
func (p *responseScan) answerField(key span) bool {
	s := &p.s
	switch {
	case s.keyIs(key, "type"):
		p.cur.Type = ""
		if sp := s.value(nil); sp.kind == kindString && s.err == nil {
			p.cur.Type = s.typeName(sp)
		}
	case s.keyIs(key, "noul"):
		p.cur.Noul, p.cur.HasNoul = p.number(s.value(nil))
	case s.keyIs(key, "confidence"):
		p.cur.Confidence, p.cur.HasConfidence = p.number(s.value(nil))
	case s.keyIs(key, "score"):
		p.cur.Score, p.cur.HasScore = p.number(s.value(nil))
	case s.keyIs(key, "choice"):
		p.cur.HasChoice, p.curText.choice = false, span{}
		if sp := s.value(nil); sp.kind == kindString && s.err == nil {
			p.cur.HasChoice, p.curText.choice = true, sp
		}
	default:
		return false
	}
	return true
}

// answer takes one member of `answers`.
func (p *responseScan) answer(key span) bool {
	p.cur, p.curText = Answer{}, answerText{id: key}
	// A value that is no answer object is kept as an answer with no
	// type, so a repeated id's last value wins whatever it is.
	p.s.value(p.visitAnswer)
	p.answers, p.texts = append(p.answers, p.cur), append(p.texts, p.curText)
	return true
}

// usage takes a member of `usage`.
func (p *responseScan) usage(key span) bool {
	switch {
	case p.s.keyIs(key, "input_tokens"):
		p.input, p.hasInput = p.count(p.s.value(nil))
	case p.s.keyIs(key, "output_tokens"):
		p.output, p.hasOutput = p.count(p.s.value(nil))
	default:
		return false
	}
	return true
}

// top takes a top-level member.
func (p *responseScan) top(key span) bool {
	s := &p.s
	switch {
	case s.keyIs(key, "model"):
		p.model = span{}
		if sp := s.value(nil); sp.kind == kindString && s.err == nil {
			p.model = sp
		}
	case s.keyIs(key, "answers"):
		p.answers, p.texts = p.answers[:0], p.texts[:0]
		s.value(p.visitAnswers)
	case s.keyIs(key, "usage"):
		s.value(p.visitUsage)
	default:
		return false
	}
	return true
}
