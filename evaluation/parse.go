package evaluation

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"
)

// MaxChoices is the most options a choice question may have.
const MaxChoices = 255

// Score questions have between MinTiers and MaxTiers tiers.
const (
	MinTiers = 2
	MaxTiers = 10
)

// tooManyChoices is the upstream's 422 for a choice question over MaxChoices.
var tooManyChoices = []byte(`{"detail":"Too many choices. Must have at most 255 choices."}`)

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// ValidationError is a request the upstream would refuse with 422. Its Body
// is the upstream's own answer: {"detail": [...]} or {"detail": "..."}.
type ValidationError struct {
	body []byte
}

// Error implements error.
func (e *ValidationError) Error() string { return "invalid evaluation request" }

// Body returns the 422 response body the upstream would give.
func (e *ValidationError) Body() []byte { return e.body }

// questionSpans are the parts of one question the rules look at.
type questionSpans struct {
	id, value                  span
	typ, instructions, crit    span
	hasType, hasInstr, hasCrit bool
}

// ParseRequest inspects an evaluation request body in one pass: JSON syntax
// and UTF-8, the upstream's validation rules, and the token estimate. A
// body the upstream would refuse gives a *ValidationError carrying the
// upstream's 422 answer; anything the upstream would accept passes,
// including `"instructions": null`, null tiers and null choice
// descriptions.
func ParseRequest(body []byte) (*Request, error) {
	p := requestScans.Get().(*requestSpans)
	defer p.release()
	p.s = scanner{b: body}
	if bytes.HasPrefix(body, utf8BOM) {
		p.s.pos = len(utf8BOM) // Python's json decodes bytes as utf-8-sig
	}
	root := p.s.document(p.visitMember)
	if p.s.err != nil {
		return nil, jsonInvalid(body, p.s.err)
	}
	e := errorList{nonFinite: p.s.nonFinite}
	if root.kind != kindObject {
		e.add("model_attributes_type", loc(), "Input should be a valid dictionary or object to extract fields from", raw(body, root), "")
		return nil, e.done()
	}
	req := &Request{}
	// The model and every question's id, decoded, in one string.
	p.text = p.s.appendText(p.text[:0], p.model)
	for _, q := range p.qs {
		p.text = p.s.appendText(p.text, q.id)
	}
	p.strings = string(p.text)
	p.checkTop(req, raw(body, root), &e)

	// A repeated id keeps its first place and takes its last value, as a
	// Python dict built from the decoded pairs does: only that value is
	// validated, answered and counted.
	qs, ids := p.distinctQuestions()
	var tokens tokenCount
	tokens.add(p.state)
	tooMany := false
	req.Questions = req.inline[:0]
	if len(qs) > len(req.inline) {
		req.Questions = make([]Question, 0, len(qs))
	}
	for i, q := range qs {
		tokens.add(q.instructions)
		tokens.add(q.crit)
		typ, ok := p.checkQuestion(q, ids[i], &e)
		if !ok {
			continue
		}
		tooMany = tooMany || typ == TypeChoice && p.tooManyChoices(q)
		req.Questions = append(req.Questions, Question{ID: ids[i], Type: typ})
	}
	if e.n > 0 {
		return nil, e.done()
	}
	if tooMany {
		return nil, &ValidationError{body: tooManyChoices}
	}
	req.EstimatedTokens = tokens.estimate()
	return req, nil
}

// requestSpans is what one scan of a request body finds: the spans of the
// top-level fields and of each question's.
type requestSpans struct {
	s                       scanner
	state, model, questions span
	hasState, hasQuestions  bool
	qs                      []questionSpans

	// depth is the object the scan is in: the body, `questions`, or a
	// question; visitMember is p.member.
	depth       scanDepth
	visitMember func(key span) bool

	// text is the model and the questions' ids, decoded, one after the
	// other (see textAt), and strings the same as one string: what the
	// Request keeps of them, one allocation for all. ids are the
	// distinct questions' ids.
	text    []byte
	strings string
	textAt  int
	ids     []string
}

// requestScans recycles the scan state of ParseRequest: its spans, its
// buffers and the method value that visits members, which would otherwise
// be allocated for every request.
var requestScans = sync.Pool{New: func() any {
	p := new(requestSpans)
	p.visitMember = p.member
	return p
}}

// release puts p back in requestScans, holding nothing of the request.
func (p *requestSpans) release() {
	visit, qs, text, ids := p.visitMember, p.qs[:0], p.text[:0], p.ids[:0]
	clear(ids[:cap(ids)])
	*p = requestSpans{visitMember: visit, qs: qs, text: text, ids: ids}
	requestScans.Put(p)
}

// nextText is the next string of p.strings, in the order appended: the
// decoded text of sp, the span it was appended from.
func (p *requestSpans) nextText(sp span) string {
	n := p.s.textLen(sp)
	t := p.strings[p.textAt : p.textAt+n]
	p.textAt += n
	return t
}

type scanDepth int

const (
	inBody scanDepth = iota
	inQuestions
	inQuestion
)

// member takes a member of the object the scan is in.
func (p *requestSpans) member(key span) bool {
	switch p.depth {
	case inQuestions:
		return p.question(key)
	case inQuestion:
		return p.questionField(key)
	}
	return p.topField(key)
}

// topField takes a top-level member's value, scanning into `questions`.
func (p *requestSpans) topField(key span) bool {
	switch {
	case p.s.keyIs(key, "state"):
		p.state, p.hasState = p.s.value(nil), true
	case p.s.keyIs(key, "model"):
		p.model = p.s.value(nil)
	case p.s.keyIs(key, "questions"):
		p.qs = p.qs[:0] // a repeated key replaces the earlier value
		p.depth = inQuestions
		p.questions, p.hasQuestions = p.s.value(p.visitMember), true
		p.depth = inBody
	default:
		return false
	}
	return true
}

// question takes one member of `questions`, scanning into its fields.
func (p *requestSpans) question(key span) bool {
	p.qs = append(p.qs, questionSpans{id: key})
	q := &p.qs[len(p.qs)-1]
	p.depth = inQuestion
	q.value = p.s.value(p.visitMember)
	p.depth = inQuestions
	return true
}

// questionField takes a field of the question being scanned (the last).
func (p *requestSpans) questionField(key span) bool {
	q := &p.qs[len(p.qs)-1]
	switch {
	case p.s.keyIs(key, "type"):
		q.typ, q.hasType = p.s.value(nil), true
	case p.s.keyIs(key, "instructions"):
		q.instructions, q.hasInstr = p.s.value(nil), true
	case p.s.keyIs(key, "criteria"):
		q.crit, q.hasCrit = p.s.value(nil), true
	default:
		return false
	}
	return true
}

// checkTop validates `state`, `model` and the shape of `questions`, and
// sets the request's state and model.
func (p *requestSpans) checkTop(req *Request, top []byte, e *errorList) {
	body := p.s.b
	if !p.hasState {
		e.add("missing", loc("state"), "Field required", top, "")
	} else {
		if !textual(p.state.kind) {
			e.addUnion(loc("state"), raw(body, p.state))
		}
		req.State = raw(body, p.state)
	}
	switch p.model.kind {
	case 0, kindNull:
		// `model` is a string; null is in doubt (it reads as "not given"
		// to many clients), so it is forwarded and the upstream decides.
	case kindString:
		req.Model = p.strings[:p.s.textLen(p.model)]
	default:
		e.add("string_type", loc("model"), "Input should be a valid string", raw(body, p.model), "")
	}
	if !p.hasQuestions {
		e.add("missing", loc("questions"), "Field required", top, "")
	} else if p.questions.kind != kindObject {
		e.add("dict_type", loc("questions"), "Input should be a valid dictionary", raw(body, p.questions), "")
	}
}

// checkQuestion validates one question and returns its type; false when
// its shape or type is wrong (the rest of it is not looked at, as the
// upstream does not).
func (p *requestSpans) checkQuestion(q questionSpans, id string, e *errorList) (string, bool) {
	question := raw(p.s.b, q.value)
	typ, ok := questionType(&p.s, q, id, question, e)
	if !ok {
		return "", false
	}
	// Instructions are text for every question type; null is what
	// clients send for a noul question without text, and the gateway
	// forwards it on any type, leaving the doubt to the upstream.
	if !q.hasInstr {
		e.add("missing", loc("questions", id, typ, "instructions"), "Field required", question, "")
	} else if !textual(q.instructions.kind) && q.instructions.kind != kindNull {
		e.addUnion(loc("questions", id, typ, "instructions"), raw(p.s.b, q.instructions))
	}
	switch typ {
	case TypeNoul:
		p.checkNoulCriteria(q, id, e)
	case TypeChoice:
		p.checkChoiceCriteria(q, id, question, e)
	case TypeScore:
		p.checkScoreCriteria(q, id, question, e)
	}
	return typ, true
}

// criteriaLoc is the error location of a question's criteria, built only
// for an error: it allocates.
func criteriaLoc(id, typ string) string { return loc("questions", id, typ, "criteria") }

// checkNoulCriteria: optional, an object with optional text `true` and
// `false`, validated in that declared order.
func (p *requestSpans) checkNoulCriteria(q questionSpans, id string, e *errorList) {
	switch {
	case !q.hasCrit || q.crit.kind == kindNull:
	case q.crit.kind != kindObject:
		e.add("model_attributes_type", criteriaLoc(id, TypeNoul), "Input should be a valid dictionary or object to extract fields from", raw(p.s.b, q.crit), "")
	case q.crit.odd:
		members := distinctMembers(&p.s, q.crit)
		for _, field := range []string{"true", "false"} {
			for _, m := range members {
				if m.key == field && m.value.scalar() {
					e.addUnion(within(criteriaLoc(id, TypeNoul), quote(m.key)), raw(p.s.b, m.value))
				}
			}
		}
	}
}

// checkChoiceCriteria: required, an object of text descriptions.
func (p *requestSpans) checkChoiceCriteria(q questionSpans, id string, question []byte, e *errorList) {
	switch {
	case !q.hasCrit:
		e.add("missing", criteriaLoc(id, TypeChoice), "Field required", question, "")
	case q.crit.kind != kindObject:
		e.add("dict_type", criteriaLoc(id, TypeChoice), "Input should be a valid dictionary", raw(p.s.b, q.crit), "")
	case q.crit.odd:
		for _, m := range distinctMembers(&p.s, q.crit) {
			if m.value.scalar() {
				e.addUnion(within(criteriaLoc(id, TypeChoice), quote(m.key)), raw(p.s.b, m.value))
			}
		}
	}
}

// tooManyChoices reports a choice question over MaxChoices options, counted
// after repeated keys collapse, as the upstream counts them.
func (p *requestSpans) tooManyChoices(q questionSpans) bool {
	return q.hasCrit && q.crit.kind == kindObject && q.crit.members > MaxChoices && distinctKeys(raw(p.s.b, q.crit)) > MaxChoices
}

// checkScoreCriteria: required, a list of MinTiers to MaxTiers text tiers.
// As pydantic's list validator: the item past the maximum fails the list at
// once, alone; item errors come next; the minimum is checked only when
// every item is valid.
func (p *requestSpans) checkScoreCriteria(q questionSpans, id string, question []byte, e *errorList) {
	switch {
	case !q.hasCrit:
		e.add("missing", criteriaLoc(id, TypeScore), "Field required", question, "")
	case q.crit.kind != kindArray:
		e.add("list_type", criteriaLoc(id, TypeScore), "Input should be a valid list", raw(p.s.b, q.crit), "")
	case q.crit.members > MaxTiers:
		e.add("too_long", criteriaLoc(id, TypeScore),
			"List should have at most 10 items after validation, not "+strconv.Itoa(q.crit.members), raw(p.s.b, q.crit),
			`{"field_type":"List","max_length":10,"actual_length":`+strconv.Itoa(q.crit.members)+`}`)
	case q.crit.odd:
		for i, item := range arrayItems(&p.s, q.crit) {
			if item.scalar() {
				e.addUnion(within(criteriaLoc(id, TypeScore), strconv.Itoa(i)), raw(p.s.b, item))
			}
		}
	case q.crit.members < MinTiers:
		e.add("too_short", criteriaLoc(id, TypeScore),
			"List should have at least 2 items after validation, not "+strconv.Itoa(q.crit.members), raw(p.s.b, q.crit),
			`{"field_type":"List","min_length":2,"actual_length":`+strconv.Itoa(q.crit.members)+`}`)
	}
}

// tokenCount adds up the text of a request for the token estimate.
type tokenCount struct {
	runes, cjkBytes, length int64
}

func (t *tokenCount) add(sp span) {
	t.runes += sp.cjkRunes
	t.cjkBytes += sp.cjkBytes
	t.length += int64(sp.end - sp.start)
}

// estimate is the input token estimate: a token per CJK character and per
// four bytes of other text, rounded up.
func (t tokenCount) estimate() int64 { return t.runes + (t.length-t.cjkBytes+3)/4 }

// questionType checks a question's shape and discriminator and returns its type.
func questionType(s *scanner, q questionSpans, id string, question []byte, e *errorList) (string, bool) {
	if q.value.kind != kindObject {
		e.add("model_attributes_type", loc("questions", id), "Input should be a valid dictionary or object to extract fields from", question, "")
		return "", false
	}
	if !q.hasType {
		e.add("union_tag_not_found", loc("questions", id), "Unable to extract tag using discriminator 'type'", question, `{"discriminator":"'type'"}`)
		return "", false
	}
	var tag string
	if q.typ.kind == kindString {
		tag = s.typeName(q.typ)
		switch tag {
		case TypeNoul, TypeChoice, TypeScore:
			return tag, true
		}
	} else {
		tag = s.pyStr(q.typ)
	}
	const expected = "'noul', 'choice', 'score'"
	e.add("union_tag_invalid", loc("questions", id),
		"Input tag '"+tag+"' found using 'type' does not match any of the expected tags: "+expected, question,
		`{"discriminator":"'type'","tag":`+quote(tag)+`,"expected_tags":`+quote(expected)+`}`)
	return "", false
}

// distinctQuestions returns the questions with a repeated id collapsed
// into its first place and last value, and their ids (substrings of
// p.strings, after the model's).
func (p *requestSpans) distinctQuestions() ([]questionSpans, []string) {
	qs := p.qs
	ids := p.ids[:0]
	var index map[string]int // id -> position, built only for long maps
	out := qs[:0]
	p.textAt = 0
	p.nextText(p.model)
	for _, q := range qs {
		id := p.nextText(q.id)
		if len(out) >= 16 && index == nil {
			index = make(map[string]int, len(qs))
			for i, known := range ids {
				index[known] = i
			}
		}
		at, dup := -1, false
		if index != nil {
			at, dup = index[id]
		} else {
			for i := range ids {
				if ids[i] == id {
					at, dup = i, true
					break
				}
			}
		}
		if dup {
			q.id = out[at].id
			out[at] = q
			continue
		}
		if index != nil {
			index[id] = len(out)
		}
		out = append(out, q)
		ids = append(ids, id)
	}
	p.ids = ids
	return out, ids
}

// member is one member of a scanned object.
type member struct {
	key   string
	value span
}

// distinctMembers returns an object's members, a repeated key in its first
// place with its last value. It scans the object again: only an object
// holding a number or a boolean, which is then in error, gets here.
func distinctMembers(s *scanner, object span) []member {
	var ms []member
	w := scanner{b: s.b, pos: object.start}
	w.value(func(key span) bool {
		m := member{key: w.text(key), value: w.value(nil)}
		for i := range ms {
			if ms[i].key == m.key {
				ms[i].value = m.value
				return true
			}
		}
		ms = append(ms, m)
		return true
	})
	return ms
}

// arrayItems returns the items of a scanned array, scanning it again.
func arrayItems(s *scanner, array span) []span {
	var items []span
	w := scanner{b: s.b, pos: array.start + 1}
	for w.skipSpace(); w.b[w.pos] != ']'; w.skipSpace() {
		items = append(items, w.value(nil))
		if w.skipSpace(); w.b[w.pos] == ',' {
			w.pos++
		}
	}
	return items
}

// distinctKeys counts the distinct keys of an object the scanner accepted:
// the upstream counts options after duplicate keys collapse.
func distinctKeys(object []byte) int {
	var m map[string]json.RawMessage
	if json.Unmarshal(object, &m) != nil {
		return 0
	}
	return len(m)
}

// textual reports the kinds a `state` or `instructions` may take.
func textual(k byte) bool { return k == kindString || k == kindObject || k == kindArray }

func raw(b []byte, sp span) []byte { return b[sp.start:sp.end] }

// jsonInvalid is FastAPI's answer to a body that does not decode. Python
// decodes the bytes to text before it parses: invalid UTF-8 anywhere is the
// error, wherever the syntax broke, and the position counts characters of
// the text, which starts after a byte order mark.
func jsonInvalid(body []byte, err *syntaxError) *ValidationError {
	text := bytes.TrimPrefix(body, utf8BOM)
	pos, msg := err.pos-(len(body)-len(text)), err.msg
	if bad := firstInvalidUTF8(text); bad >= 0 {
		pos, msg = bad, "Invalid UTF-8"
	}
	chars := 0
	for _, c := range text[:pos] {
		if c&0xC0 != 0x80 { // not a continuation byte: a character starts
			chars++
		}
	}
	var e errorList
	e.add("json_invalid", `["body",`+strconv.Itoa(chars)+`]`, "JSON decode error", []byte("{}"), `{"error":`+quote(msg)+`}`)
	return e.done()
}

// firstInvalidUTF8 returns the offset of the first byte Python's UTF-8
// decoder (with surrogatepass) refuses, or -1.
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			if !isEncodedSurrogate(b[i:]) {
				return i
			}
			size = 3
		}
		i += size
	}
	return -1
}

// errorList builds the upstream's list of validation errors.
type errorList struct {
	b []byte
	n int
	// nonFinite: the body holds NaN or Infinity, so an input is checked
	// before it is echoed: one that holds them is written as Python
	// decodes it (echo), or null when they remain in the decoded value.
	nonFinite bool
}

// add appends one error; loc and ctx are JSON texts, ctx may be empty.
func (e *errorList) add(typ, loc, msg string, input []byte, ctx string) {
	if e.n == 0 {
		e.b = append(e.b, `{"detail":[`...)
	} else {
		e.b = append(e.b, ',')
	}
	e.n++
	e.b = append(e.b, `{"type":`...)
	e.b = append(e.b, quote(typ)...)
	e.b = append(e.b, `,"loc":`...)
	e.b = append(e.b, loc...)
	e.b = append(e.b, `,"msg":`...)
	e.b = append(e.b, quote(msg)...)
	e.b = append(e.b, `,"input":`...)
	if e.nonFinite && !json.Valid(input) {
		input = echo(input)
	}
	input = replaceSurrogates(input)
	e.b = append(e.b, input...)
	if ctx != "" {
		e.b = append(e.b, `,"ctx":`...)
		e.b = append(e.b, ctx...)
	}
	e.b = append(e.b, '}')
}

// addUnion reports a value that is none of string, object and array, one
// error per member of the union, as pydantic's smart union does.
func (e *errorList) addUnion(loc string, input []byte) {
	e.add("string_type", within(loc, `"str"`), "Input should be a valid string", input, "")
	e.add("dict_type", within(loc, `"dict[str,any]"`), "Input should be a valid dictionary", input, "")
	e.add("list_type", within(loc, `"list[any]"`), "Input should be a valid list", input, "")
}

func (e *errorList) done() *ValidationError {
	return &ValidationError{body: append(e.b, "]}"...)}
}

// loc returns the JSON location array ["body", parts...].
func loc(parts ...string) string {
	b := []byte(`["body"`)
	for _, p := range parts {
		b = append(b, ',')
		b = append(b, quote(p)...)
	}
	return string(append(b, ']'))
}

// quote returns s as a JSON string.
func quote(s string) string {
	b, _ := json.Marshal(string(replaceSurrogates([]byte(s))))
	return string(b)
}

// within returns the JSON location array loc extended by one part, itself JSON.
func within(loc, part string) string {
	return loc[:len(loc)-1] + "," + part + "]"
}
