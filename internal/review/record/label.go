package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The routes of a queued answer's question, as an entry and a `/labels`
// line carry them.
const (
	RouteAuto  = "auto"
	RouteHuman = "human"
)

// RouteReplay is the `route` of a `/labels` line written by `replay`: its
// confidence and answer are the new version's, its draw (audit_p) the
// original entry's.
const RouteReplay = "replay"

// RouteReplayFailed is the `route` of a `/labels` line `replay` writes for
// an entry the new version did not answer: a disagreement at confidence 1,
// so that a failure counts against every threshold and never drops out of
// the sample. Its draw is the original entry's, as a replayed line's.
const RouteReplayFailed = "replay_failed"

// Label is one `/labels` line: one labelled question of one entry, as the
// review API stores it and exports it, fields in this order. It carries
// everything the export needs (the entry's ids, model, the question's
// type, route, confidence and answer, the label, agree, reviewer, time),
// so an entry trimmed from the stream still exports.
type Label struct {
	// Entry is the review stream's id of the entry.
	Entry     string `json:"entry"`
	RequestID string `json:"request_id"`
	Org       string `json:"org"`
	Model     string `json:"model"`
	// Type and Question are the question's type and the caller's id.
	Type     string `json:"type"`
	Question string `json:"question"`
	// Confidence is the answer's confidence in 0..1, nil (null) when the
	// gateway could not read one.
	Confidence *float64 `json:"confidence"`
	// Answer is the model's answer as the entry holds it (null when
	// unread); Label the person's label in its stored form.
	Answer json.RawMessage `json:"answer"`
	Label  json.RawMessage `json:"label"`
	// Agree is Agree(Type, Label, Answer) when the line was written.
	Agree bool `json:"agree"`
	// Audit, AuditP, AuditFloor and AuditFrom are the entry's draw.
	Audit      bool        `json:"audit"`
	AuditP     json.Number `json:"audit_p,omitempty"`
	AuditFloor json.Number `json:"audit_floor,omitempty"`
	AuditFrom  json.Number `json:"audit_from,omitempty"`
	// Route is the question's route, RouteReplay or RouteReplayFailed.
	Route    string `json:"route"`
	Reviewer string `json:"reviewer"`
	// TS is when the label was stored, RFC 3339 in UTC.
	TS string `json:"ts"`
	// Stage is StageFirst on the line of an answer the request's own
	// version gave, StageSecond on the line of an escalated question's
	// second answer (its own line, beside the first's); 0 is read and
	// written as StageFirst.
	Stage int `json:"stage"`
	// EscalatedFrom is, on a StageSecond line, the first version: the one
	// whose answer the `escalate` block asked again. "" on a StageFirst
	// line.
	EscalatedFrom string `json:"escalated_from,omitempty"`
	// Pass is true on the lines of an entry a reviewer passed (could not
	// judge): such a line has no label, its agree is written null, and
	// the calibration and the monitor take it as a disagreement.
	Pass bool `json:"pass,omitempty"`
	// Pending marks the line of an audited question not labelled yet:
	// written with label and agree null, so that an export holds the
	// whole audited sample. Never stored.
	Pending bool `json:"-"`
}

// The stages of a `/labels` line (Label.Stage).
const (
	// StageFirst: the answer of the version the request was answered by.
	StageFirst = 1
	// StageSecond: an escalated question's second answer, by the
	// `escalate` block's second version.
	StageSecond = 2
)

// Marshal writes l as one compact JSON line, without the newline; agree
// is null on a pending or passed line, stage 1 when l's is 0.
func (l *Label) Marshal() ([]byte, error) {
	c := *l
	if c.Stage == 0 {
		c.Stage = StageFirst
	}
	if !l.Pending && !l.Pass {
		return json.Marshal((*labelJSON)(&c))
	}
	c.Label = nil
	return json.Marshal(struct {
		*labelJSON
		Agree *bool `json:"agree"`
	}{(*labelJSON)(&c), nil})
}

// labelJSON is Label without its Marshal method.
type labelJSON Label

// labelWire is a line as ParseLabel's fast path decodes it: one
// json.Unmarshal into typed fields. A nil field was absent or null; a line
// the fast path cannot take whole (a null confidence, a field missing or
// of the wrong type) is read again by parseLabelStrict, which tells the
// two apart and says what is wrong.
type labelWire struct {
	Entry      *string         `json:"entry"`
	RequestID  *string         `json:"request_id"`
	Org        *string         `json:"org"`
	Model      *string         `json:"model"`
	Type       *string         `json:"type"`
	Question   *string         `json:"question"`
	Confidence *float64        `json:"confidence"`
	Answer     json.RawMessage `json:"answer"`
	Label      json.RawMessage `json:"label"`
	Agree      *bool           `json:"agree"`
	Audit      *bool           `json:"audit"`
	AuditP     *float64        `json:"audit_p"`
	AuditFloor *float64        `json:"audit_floor"`
	AuditFrom  *float64        `json:"audit_from"`
	Route      *string         `json:"route"`
	Reviewer   *string         `json:"reviewer"`
	TS         *string         `json:"ts"`
	Pass       *bool           `json:"pass"`
	Stage      *int            `json:"stage"`
	Escalated  *string         `json:"escalated_from"`
}

// ParseLabel reads one `/labels` line, as written by the review API, by
// `replay` or by hand. model, type, question, agree, audit and confidence
// are required (confidence may be null; agree is null on a passed line,
// `"pass": true`, and on the line of a question not labelled yet, which
// has a null label too: Pending), of their JSON kinds; confidence
// and the audit fields, when present, are numbers from 0 to 1; entry, when
// present, is a stream entry id; stage, when present, is 1 or 2 (absent:
// 1), and a stage 2 line names its first version in escalated_from. The
// other fields may be absent (they read as ""), and fields the format does
// not name are ignored. The error says
// which field is wrong and how, quoting the value.
func ParseLabel(raw []byte) (Label, error) {
	var w labelWire
	if json.Unmarshal(raw, &w) != nil || w.Model == nil || w.Type == nil || w.Question == nil ||
		w.Agree == nil || w.Pass != nil || w.Audit == nil || w.Confidence == nil || !(*w.Confidence >= 0 && *w.Confidence <= 1) {
		return parseLabelStrict(raw)
	}
	l := Label{Model: *w.Model, Type: *w.Type, Question: *w.Question, Agree: *w.Agree, Audit: *w.Audit,
		Confidence: w.Confidence, Answer: w.Answer, Label: w.Label}
	for _, p := range []struct {
		from *float64
		to   *json.Number
	}{{w.AuditP, &l.AuditP}, {w.AuditFloor, &l.AuditFloor}, {w.AuditFrom, &l.AuditFrom}} {
		if p.from != nil {
			if !(*p.from >= 0 && *p.from <= 1) {
				return parseLabelStrict(raw) // says so, with the value as written
			}
			*p.to = Probability(*p.from)
		}
	}
	for _, s := range []struct {
		from *string
		to   *string
	}{{w.Entry, &l.Entry}, {w.RequestID, &l.RequestID}, {w.Org, &l.Org}, {w.Route, &l.Route}, {w.Reviewer, &l.Reviewer}, {w.TS, &l.TS}} {
		if s.from != nil {
			*s.to = *s.from
		}
	}
	if err := checkEntry(l.Entry, w.Entry != nil); err != nil {
		return Label{}, err
	}
	if w.Stage != nil {
		if *w.Stage == 0 {
			return parseLabelStrict(raw) // says so
		}
		l.Stage = *w.Stage
	}
	if w.Escalated != nil {
		l.EscalatedFrom = *w.Escalated
	}
	if err := l.checkStage(); err != nil {
		return Label{}, err
	}
	return l, nil
}

// checkStage defaults an absent stage to StageFirst (lines written before
// stages existed) and checks that a line is of stage 1, or of stage 2
// with the first version named.
func (l *Label) checkStage() error {
	switch {
	case l.Stage == 0:
		l.Stage = StageFirst
	case l.Stage != StageFirst && l.Stage != StageSecond:
		return fmt.Errorf("\"stage\" is %d, want 1 or 2", l.Stage)
	}
	switch {
	case l.Stage == StageSecond && l.EscalatedFrom == "":
		return errors.New("\"stage\" is 2 but \"escalated_from\" is missing: want the first version of the escalated question")
	case l.Stage == StageFirst && l.EscalatedFrom != "":
		return fmt.Errorf("\"escalated_from\" is %q on a line of stage 1: want it on stage 2 lines only", l.EscalatedFrom)
	}
	return nil
}

const wantEntry = "want a stream entry id such as 1764000000000-0"

func checkEntry(entry string, present bool) error {
	if _, ok := ParseID(entry); present && !ok {
		return fmt.Errorf("\"entry\" is %q, %s", entry, wantEntry)
	}
	return nil
}

// parseLabelStrict reads a line field by field, telling an absent field
// from a null one, and says exactly what is wrong with a bad line.
func parseLabelStrict(raw []byte) (Label, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Label{}, errors.New("not a JSON object")
	}
	var l Label
	var err error
	// get decodes a field; json.Unmarshal would take null as "leave as is".
	get := func(name string, into any, want string, nullable bool) bool {
		v, ok := fields[name]
		if err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("no %q field", name)
			}
			return false
		}
		if bytes.Equal(v, []byte("null")) {
			if !nullable {
				err = fmt.Errorf("%q is null, want %s", name, want)
			}
			return false
		}
		if json.Unmarshal(v, into) != nil {
			err = fmt.Errorf("%q is %s, want %s", name, abbreviate(v), want)
			return false
		}
		return true
	}
	get("model", &l.Model, "a string", false)
	get("type", &l.Type, "a string", false)
	get("question", &l.Question, "a string", false)
	if v, ok := fields["pass"]; ok && !bytes.Equal(v, []byte("null")) {
		if json.Unmarshal(v, &l.Pass) != nil {
			return Label{}, fmt.Errorf("\"pass\" is %s, want true or false", abbreviate(v))
		}
	}
	if v, ok := fields["agree"]; ok && bytes.Equal(v, []byte("null")) {
		// A passed line, or a question not labelled yet (its label null).
		if !l.Pass && !IsNull(fields["label"]) {
			return Label{}, errors.New("\"agree\" is null but \"label\" is not: want agree true or false for a label")
		}
		l.Pending = !l.Pass
	} else {
		get("agree", &l.Agree, "true or false", false)
		if err == nil && l.Pass {
			return Label{}, errors.New("\"pass\" is true but \"agree\" is not null")
		}
	}
	get("audit", &l.Audit, "true or false", false)
	const wantConfidence = "a number from 0 to 1 or null"
	var confidence float64
	if get("confidence", &confidence, wantConfidence, true) {
		if !(confidence >= 0 && confidence <= 1) {
			return Label{}, fmt.Errorf("\"confidence\" is %s, want %s", abbreviate(fields["confidence"]), wantConfidence)
		}
		l.Confidence = &confidence
	}
	if err != nil {
		return Label{}, err
	}
	for _, p := range []struct {
		name string
		to   *json.Number
	}{{"audit_p", &l.AuditP}, {"audit_floor", &l.AuditFloor}, {"audit_from", &l.AuditFrom}} {
		v, ok := fields[p.name]
		if !ok || bytes.Equal(v, []byte("null")) {
			continue
		}
		var f float64
		if json.Unmarshal(v, &f) != nil || !(f >= 0 && f <= 1) {
			return Label{}, fmt.Errorf("%q is %s, want a number from 0 to 1", p.name, abbreviate(v))
		}
		*p.to = Probability(f)
	}
	for _, s := range []struct {
		name string
		to   *string
	}{{"entry", &l.Entry}, {"request_id", &l.RequestID}, {"org", &l.Org}, {"route", &l.Route}, {"reviewer", &l.Reviewer}, {"ts", &l.TS}} {
		v, ok := fields[s.name]
		if !ok || bytes.Equal(v, []byte("null")) {
			continue
		}
		if json.Unmarshal(v, s.to) != nil {
			if s.name == "entry" {
				return Label{}, fmt.Errorf("\"entry\" is %s, %s", abbreviate(v), wantEntry)
			}
			continue // a field the calibration does not check the kind of
		}
		if s.name == "entry" {
			if err := checkEntry(l.Entry, true); err != nil {
				return Label{}, err
			}
		}
	}
	l.Answer, l.Label = fields["answer"], fields["label"]
	if v, ok := fields["stage"]; ok && !bytes.Equal(v, []byte("null")) {
		if json.Unmarshal(v, &l.Stage) != nil || l.Stage == 0 {
			return Label{}, fmt.Errorf("\"stage\" is %s, want 1 or 2", abbreviate(v))
		}
	}
	if v, ok := fields["escalated_from"]; ok && !bytes.Equal(v, []byte("null")) {
		if json.Unmarshal(v, &l.EscalatedFrom) != nil {
			return Label{}, fmt.Errorf("\"escalated_from\" is %s, want a version name", abbreviate(v))
		}
	}
	if err := l.checkStage(); err != nil {
		return Label{}, err
	}
	return l, nil
}

// abbreviate shows a JSON value in an error, cut to a readable length.
func abbreviate(v json.RawMessage) string {
	r := []rune(strings.ToValidUTF8(string(v), "?"))
	if len(r) > 40 {
		return string(r[:37]) + "..."
	}
	return string(r)
}
