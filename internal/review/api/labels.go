package api

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/systemone/systemone-gateway/internal/rawjson"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// Label validation: the body of PUT /items/<id>/labels and each label
// against its entry's question, with the upstream's 422 list for what is
// wrong.

// parseLabelsBody reads `{"labels": {...}, "reviewer": "..."}` or
// `{"pass": true, "reviewer": "..."}`, reviewer optional (null or missing
// is "").
func parseLabelsBody(raw []byte) (labelsBody, errorList) {
	var errs errorList
	var body labelsBody
	// Syntax only: a RawMessage keeps numbers such as 1e400, which no
	// float64 holds, for the field's own check.
	var v json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		// The gateway's own json_invalid: FastAPI's answer to a body that
		// does not decode.
		pos := int64(0)
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			pos = syntax.Offset
		}
		errs.add("json_invalid", []any{"body", pos}, "JSON decode error", json.RawMessage("{}"), map[string]any{"error": err.Error()})
		return body, errs
	}
	top, ok := members(raw)
	if !ok {
		errs.add("model_attributes_type", loc("body"), "Input should be a valid dictionary or object to extract fields from", raw, nil)
		return body, errs
	}
	var labels, reviewer, pass json.RawMessage
	for _, m := range top {
		switch m.key {
		case "labels":
			labels = m.value
		case "reviewer":
			reviewer = m.value
		case "pass":
			pass = m.value
		}
	}
	if pass != nil && !record.IsNull(pass) {
		if json.Unmarshal(pass, &body.pass) != nil {
			errs.add("bool_type", loc("body", "pass"), "Input should be a valid boolean", pass, nil)
		} else if !body.pass && labels == nil {
			errs.add("value_error", loc("body", "pass"), "Value error, pass is true, or labels are given", pass, nil)
		} else if body.pass && labels != nil {
			errs.add("value_error", loc("body"), "Value error, a pass takes no labels", raw, nil)
		}
	}
	switch {
	case body.pass:
	case labels == nil:
		errs.add("missing", loc("body", "labels"), "Field required", raw, nil)
	default:
		if body.labels, ok = members(labels); !ok {
			errs.add("dict_type", loc("body", "labels"), "Input should be a valid dictionary", labels, nil)
		} else if len(body.labels) > MaxLabelsPerPut {
			tooMany(&errs, len(body.labels), MaxLabelsPerPut)
		}
	}
	if !utf8.Valid(raw) {
		// encoding/json would store U+FFFD in place of the bad bytes.
		badUTF8(&errs, raw, reviewer, body.labels)
	}
	if !record.IsNull(reviewer) && utf8.Valid(reviewer) {
		if json.Unmarshal(reviewer, &body.reviewer) != nil {
			errs.add("string_type", loc("body", "reviewer"), "Input should be a valid string", reviewer, nil)
		} else if n := len([]rune(body.reviewer)); n > maxReviewerLen {
			errs.add("string_too_long", loc("body", "reviewer"), "String should have at most "+strconv.Itoa(maxReviewerLen)+" characters", reviewer, map[string]any{"max_length": maxReviewerLen})
		}
	}
	return body, errs
}

// tooMany is the 422 of a PUT with more labels than max.
func tooMany(errs *errorList, n, max int) {
	errs.add("too_long", loc("body", "labels"),
		"Dictionary should have at most "+strconv.Itoa(max)+" items after validation, not "+strconv.Itoa(n),
		json.RawMessage(`{}`), map[string]any{"field_type": "Dictionary", "max_length": max, "actual_length": n})
}

// badUTF8 reports the places of a body that is not valid UTF-8: the
// reviewer or a label value (string_unicode, as pydantic names it), else
// json_invalid at the first bad byte (a question id, an unknown field).
func badUTF8(errs *errorList, raw, reviewer json.RawMessage, labels []member) {
	const msg = "Input should be a valid string, unable to parse raw data as a unicode string"
	found := false
	if !utf8.Valid(reviewer) {
		errs.add("string_unicode", loc("body", "reviewer"), msg, jsonString(strings.ToValidUTF8(string(reviewer), "\uFFFD")), nil)
		found = true
	}
	for _, m := range labels {
		if !utf8.Valid(m.value) {
			errs.add("string_unicode", loc("body", "labels", strings.ToValidUTF8(m.key, "\uFFFD")), msg, jsonString(strings.ToValidUTF8(string(m.value), "\uFFFD")), nil)
			found = true
		}
	}
	if found {
		return
	}
	pos := 0
	for pos < len(raw) {
		r, size := utf8.DecodeRune(raw[pos:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		pos += size
	}
	errs.add("json_invalid", []any{"body", pos}, "JSON decode error", json.RawMessage("{}"), map[string]any{"error": "invalid UTF-8"})
}

// kind is what a stored request says of a question's labels: the choice
// option keys, or the number of score tiers. Zero without a stored request.
type kind struct {
	options []string
	tiers   int
}

// requestKinds reads the options and tiers of each question from a stored
// request body (include_content); nil when there is none or it does not
// read.
func requestKinds(request *string) map[string]kind {
	if request == nil {
		return nil
	}
	var req struct {
		Questions map[string]struct {
			Type     string          `json:"type"`
			Criteria json.RawMessage `json:"criteria"`
		} `json:"questions"`
	}
	if json.Unmarshal([]byte(*request), &req) != nil {
		return nil
	}
	kinds := make(map[string]kind, len(req.Questions))
	for id, q := range req.Questions {
		switch q.Type {
		case "choice":
			if ms, ok := members(q.Criteria); ok {
				k := kind{options: make([]string, len(ms))}
				for i, m := range ms {
					k.options[i] = m.key
				}
				kinds[id] = k
			}
		case "score":
			var tiers []json.RawMessage
			if json.Unmarshal(q.Criteria, &tiers) == nil && len(tiers) > 0 {
				kinds[id] = kind{tiers: len(tiers)}
			}
		}
	}
	return kinds
}

// questionLines are the `/labels` lines of one question of an entry: its
// first answer's (stage 1), then for an escalated question its second
// answer's (stage 2). They are stored together, as one record under the
// question's id (see store.go).
type questionLines []record.Label

// stored is the lines' record: each line's JSON, joined by newlines.
func (ql questionLines) stored() (string, error) {
	var b strings.Builder
	for i := range ql {
		line, err := ql[i].Marshal()
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.Write(line)
	}
	return b.String(), nil
}

// observed is the line whose answer the monitor observes: the one routed
// auto in an entry drawn by audit (the first answer's, or an escalated
// question's second); nil when none was.
func (ql questionLines) observed() *record.Label {
	for i := range ql {
		if ql[i].Audit && ql[i].Route == record.RouteAuto {
			return &ql[i]
		}
	}
	return nil
}

// passLines are the `/labels` lines of a pass: those of each question of
// e (the first of an id), no label, Pass set (agree written null, taken as
// a disagreement).
func passLines(e *record.Entry, reviewer, ts string) []questionLines {
	var out []questionLines
	seen := map[string]bool{}
	for i := range e.Questions {
		q := &e.Questions[i]
		if seen[q.ID] {
			continue
		}
		seen[q.ID] = true
		out = append(out, questionLines(e.Lines(q, record.Label{Reviewer: reviewer, TS: ts, Pass: true})))
	}
	return out
}

// labelLines validates the labels against e's questions and builds the
// `/labels` lines of each.
func labelLines(e *record.Entry, body labelsBody, kinds map[string]kind, ts string) ([]questionLines, errorList) {
	if body.pass {
		return passLines(e, body.reviewer, ts), errorList{}
	}
	var errs errorList
	if len(body.labels) > len(e.Questions) {
		tooMany(&errs, len(body.labels), len(e.Questions))
		return nil, errs
	}
	// One pass to index the questions: a lookup per label would make a
	// PUT quadratic in the entry's question count.
	byID := make(map[string]*record.Question, len(e.Questions))
	for i := range e.Questions {
		if _, dup := byID[e.Questions[i].ID]; !dup { // the first, as find
			byID[e.Questions[i].ID] = &e.Questions[i]
		}
	}
	out := make([]questionLines, 0, len(body.labels))
	for _, m := range body.labels {
		where := loc("body", "labels", m.key)
		q := byID[m.key]
		if q == nil {
			errs.add("extra_forbidden", where, "Unknown question: the entry has no question with this id", m.value, nil)
			continue
		}
		label, ok := checkLabel(&errs, where, q.Type, m.value, kinds[m.key])
		if !ok {
			continue
		}
		out = append(out, questionLines(e.Lines(q, record.Label{Label: label, Reviewer: body.reviewer, TS: ts})))
	}
	return out, errs
}

// checkLabel validates one label for a question of type typ and returns
// it in its stored form: noul true/false, choice the option key (one of
// the stored options when the entry holds the request), score the tier
// number (an integer from 0 to the last stored tier, or to 9).
func checkLabel(errs *errorList, where []any, typ string, v json.RawMessage, k kind) (json.RawMessage, bool) {
	switch typ {
	case "noul":
		var b bool
		if json.Unmarshal(v, &b) != nil || record.IsNull(v) {
			errs.add("bool_type", where, "Input should be a valid boolean", v, nil)
			return nil, false
		}
		return json.RawMessage(strconv.FormatBool(b)), true
	case "choice":
		var s string
		if json.Unmarshal(v, &s) != nil || record.IsNull(v) {
			errs.add("string_type", where, "Input should be a valid string", v, nil)
			return nil, false
		}
		if k.options != nil && !slices.Contains(k.options, s) {
			expected := literals(k.options)
			errs.add("literal_error", where, "Input should be "+expected, v, map[string]any{"expected": expected})
			return nil, false
		}
		b, _ := json.Marshal(s)
		return b, true
	case "score":
		var f float64
		if !isNumber(v, &f) {
			if isNumberSyntax(v) { // beyond float64, such as 1e400
				errs.add("finite_number", where, "Input should be a finite number", v, nil)
			} else {
				errs.add("int_type", where, "Input should be a valid integer", v, nil)
			}
			return nil, false
		}
		last := maxScoreTier
		if k.tiers > 0 {
			last = k.tiers - 1
		}
		switch {
		case f != math.Trunc(f):
			errs.add("int_from_float", where, "Input should be a valid integer, got a number with a fractional part", v, nil)
		case f < 0:
			errs.add("greater_than_equal", where, "Input should be greater than or equal to 0", v, map[string]any{"ge": 0})
		case f > float64(last):
			errs.add("less_than_equal", where, "Input should be less than or equal to "+strconv.Itoa(last), v, map[string]any{"le": last})
		default:
			return json.RawMessage(strconv.Itoa(int(f))), true
		}
		return nil, false
	}
	errs.add("value_error", where, "Value error, the question's type "+strconv.Quote(typ)+" takes no label", v, nil)
	return nil, false
}

// isNumberSyntax reports whether raw is a JSON number, whatever its size.
func isNumberSyntax(raw json.RawMessage) bool {
	var n json.Number
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') && json.Unmarshal(raw, &n) == nil
}

// literals writes options as pydantic's literal_error does: 'a', 'b' or 'c'.
func literals(options []string) string {
	quoted := make([]string, len(options))
	for i, o := range options {
		quoted[i] = "'" + o + "'"
	}
	if len(quoted) == 1 {
		return quoted[0]
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
}

// member is one member of a JSON object, in the object's order.
type member struct {
	key   string
	value json.RawMessage
}

// members returns the members of a JSON object in order; a repeated key
// keeps its first place and its last value, as Python's json does. ok is
// false when raw is not an object. raw has passed json.Unmarshal.
func members(raw json.RawMessage) ([]member, bool) {
	var out []member
	index := map[string]int{}
	ok := rawjson.Members(raw, 0, func(rawKey, value []byte) bool {
		var key string
		_ = json.Unmarshal(rawKey, &key)
		if i, dup := index[key]; dup {
			out[i].value = value
			return true
		}
		index[key] = len(out)
		out = append(out, member{key, value})
		return true
	})
	if !ok {
		return nil, false
	}
	return out, true
}
