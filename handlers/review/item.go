package review

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// entry is a review stream entry as the gateway's route queue writes it.
// Fields an older gateway did not write (audit, a question's answer) read
// as their zero value: not audited, answer null.
type entry struct {
	id        string
	requestID string
	org       string
	model     string
	route     string
	reason    string
	audit     bool
	ts        string
	questions []question
	// request and response are the bodies with include_content, nil
	// without.
	request, response *string
	// tooLarge names the bodies max_content kept out ("request",
	// "response").
	tooLarge []string
	// auditP, auditFloor and auditFrom are the audit's probability, and
	// the active audit's floor and from, as numbers ("" when the gateway
	// wrote none).
	auditP, auditFloor, auditFrom json.Number
}

// question is one element of an entry's `questions`.
type question struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Route string `json:"route"`
	// Confidence and Answer pass through as the entry wrote them; a nil
	// RawMessage writes null.
	Confidence json.RawMessage `json:"confidence"`
	Answer     json.RawMessage `json:"answer"`
}

// parseEntry reads a stream message. A field that is missing or not what
// the gateway writes reads as empty rather than failing the item: an
// entry is shown as far as it can be.
func parseEntry(m redis.XMessage) entry {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e := entry{
		id:        m.ID,
		requestID: str("request_id"),
		org:       str("org"),
		model:     str("model"),
		route:     str("route"),
		reason:    str("reason"),
		audit:     str("audit") == "1",
		ts:        str("ts"),
	}
	e.auditP, e.auditFloor, e.auditFrom = probability(str("audit_p")), probability(str("audit_floor")), probability(str("audit_from"))
	if err := json.Unmarshal([]byte(str("questions")), &e.questions); err != nil {
		e.questions = nil
	}
	for i := range e.questions {
		q := &e.questions[i]
		if isNull(q.Confidence) {
			q.Confidence = nil
		}
		if isNull(q.Answer) {
			q.Answer = nil
		}
	}
	if v := str("content_too_large"); v != "" {
		e.tooLarge = strings.Split(v, ",")
	}
	if v, ok := m.Values["request"].(string); ok {
		e.request = &v
	}
	if v, ok := m.Values["response"].(string); ok {
		e.response = &v
	}
	return e
}

// probability returns s as a JSON number when it is a number in 0..1,
// else "" (the field is then left out).
func probability(s string) json.Number {
	if v, err := strconv.ParseFloat(s, 64); err == nil && v >= 0 && v <= 1 {
		return json.Number(strconv.FormatFloat(v, 'f', -1, 64))
	}
	return ""
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// Item is an entry as the API shows it: the entry's fields, audit a
// boolean, questions an array, request and response JSON values when
// stored (a body that is not JSON shows as a string), plus the stream id
// and the stored labels.
type Item struct {
	ID        string `json:"id"`
	RequestID string `json:"request_id"`
	Org       string `json:"org"`
	Model     string `json:"model"`
	Route     string `json:"route"`
	Reason    string `json:"reason"`
	Audit     bool   `json:"audit"`
	// AuditP, AuditFloor and AuditFrom are the entry's audit_p (the
	// probability the audit drew it with), and the active audit's
	// audit_floor and audit_from; each absent when the entry has none.
	AuditP     json.Number     `json:"audit_p,omitempty"`
	AuditFloor json.Number     `json:"audit_floor,omitempty"`
	AuditFrom  json.Number     `json:"audit_from,omitempty"`
	TS         string          `json:"ts"`
	Questions  []question      `json:"questions"`
	Request    json.RawMessage `json:"request,omitempty"`
	Response   json.RawMessage `json:"response,omitempty"`
	// ContentTooLarge names the bodies that did not fit in the route's
	// max_content and were not stored ("request", "response"); absent
	// when none was left out.
	ContentTooLarge []string                   `json:"content_too_large,omitempty"`
	Labels          map[string]json.RawMessage `json:"labels,omitempty"`
}

// item builds the Item of e with its stored label records (question id ->
// record).
func (e *entry) item(records map[string]string) Item {
	it := Item{
		ID: e.id, RequestID: e.requestID, Org: e.org, Model: e.model, Route: e.route,
		Reason: e.reason, Audit: e.audit, AuditP: e.auditP, AuditFloor: e.auditFloor, AuditFrom: e.auditFrom,
		TS: e.ts, Questions: e.questions,
		Request: jsonValue(e.request), Response: jsonValue(e.response), ContentTooLarge: e.tooLarge,
	}
	if it.Questions == nil {
		it.Questions = []question{}
	}
	for q, rec := range records {
		var r struct {
			Label json.RawMessage `json:"label"`
		}
		if json.Unmarshal([]byte(rec), &r) != nil || len(r.Label) == 0 {
			continue
		}
		if it.Labels == nil {
			it.Labels = make(map[string]json.RawMessage, len(records))
		}
		it.Labels[q] = r.Label
	}
	return it
}

// jsonValue returns a stored body as a JSON value: itself when it is JSON
// (compacted), else a JSON string of it; nil when not stored.
func jsonValue(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, []byte(*s)) == nil {
		return b.Bytes()
	}
	quoted, _ := json.Marshal(*s)
	return quoted
}

// record is one line of GET /labels, and what is stored per labelled
// question: fields in the contract's order.
type record struct {
	Entry      string          `json:"entry"`
	RequestID  string          `json:"request_id"`
	Org        string          `json:"org"`
	Model      string          `json:"model"`
	Type       string          `json:"type"`
	Question   string          `json:"question"`
	Confidence json.RawMessage `json:"confidence"`
	Answer     json.RawMessage `json:"answer"`
	Label      json.RawMessage `json:"label"`
	Agree      bool            `json:"agree"`
	Audit      bool            `json:"audit"`
	AuditP     json.Number     `json:"audit_p,omitempty"`
	AuditFloor json.Number     `json:"audit_floor,omitempty"`
	AuditFrom  json.Number     `json:"audit_from,omitempty"`
	Route      string          `json:"route"`
	Reviewer   string          `json:"reviewer"`
	TS         string          `json:"ts"`
}

// isNumber decodes raw into v when it is a JSON number.
func isNumber(raw json.RawMessage, v *float64) bool {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}
