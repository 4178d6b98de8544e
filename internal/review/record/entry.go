package record

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Entry is one entry of the review stream: a routed answer queued for
// review. The gateway writes it with Values (XADD), the review API reads
// it back with ParseEntry.
type Entry struct {
	// ID is the stream's id of the entry: set by ParseEntry, "" before
	// the entry is written.
	ID string
	// RequestID is the upstream's x-request-id, Org the organization id,
	// Model the concrete version that answered.
	RequestID, Org, Model string
	// Route and Reason are the answer's route ("auto" or "human") and why.
	Route, Reason string
	// Audit is true when the audit drew the answer, whatever its route.
	Audit bool
	// AuditP is the probability the audit drew the answer with; "" without
	// an audit. AuditFloor and AuditFrom are the active audit's floor and
	// from; "" without `audit active`. Each is a plain decimal in 0..1.
	AuditP, AuditFloor, AuditFrom json.Number
	// Questions are the answer's questions, in the answer's order.
	Questions []Question
	// TS is when the entry was queued, RFC 3339 in UTC.
	TS string
	// Content is the id of the entry's content entry in ContentStream;
	// "" without include_content or when no body fitted.
	Content string
	// ContentTooLarge names the bodies max_content kept out ("request",
	// "response").
	ContentTooLarge []string

	// Request and Response are the bodies read from the content entry
	// (Content.Apply); nil when not stored or not read.
	Request, Response *string
}

// Question is one element of an entry's `questions`: a JSON array of
// {"id","type","route","confidence","answer"}, with "reason" and
// "escalated" where they apply.
type Question struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Route string `json:"route"`
	// Confidence is the answer's confidence; nil (null) when unread.
	Confidence *float64 `json:"confidence"`
	// Answer is the noul probability or score (a number) or the choice
	// key (a string); nil (null) when unread.
	Answer json.RawMessage `json:"answer"`
	// Reason is why the question's first answer routed it as it did (the
	// gateway's X-Route-Reason values for one question: confident,
	// low_confidence, no_threshold, ...), before any escalation: an
	// escalated question keeps the reason it was asked again for. ""
	// in entries written before the gateway recorded it.
	Reason string `json:"reason,omitempty"`
	// Escalated is the second answer of a question an `escalate` block
	// asked again; absent for any other.
	Escalated *Escalated `json:"escalated,omitempty"`
}

// Escalated is a question's second answer: the version that gave it, its
// confidence and answer (as Question's), and the route it gave the
// question (auto: the client got it in place of the first).
type Escalated struct {
	Model      string          `json:"model"`
	Confidence float64         `json:"confidence"`
	Answer     json.RawMessage `json:"answer"`
	Route      string          `json:"route"`
}

// The stream's field names.
const (
	fieldRequestID       = "request_id"
	fieldOrg             = "org"
	fieldModel           = "model"
	fieldRoute           = "route"
	fieldReason          = "reason"
	fieldAudit           = "audit"
	fieldQuestions       = "questions"
	fieldTS              = "ts"
	fieldAuditP          = "audit_p"
	fieldAuditFloor      = "audit_floor"
	fieldAuditFrom       = "audit_from"
	fieldContentTooLarge = "content_too_large"
	fieldContent         = "content"
	fieldRequest         = "request"
	fieldResponse        = "response"
)

// Values returns the entry's stream fields in a fixed order, as XADD
// takes them: request_id, org, model, route, reason, audit ("1" or "0"),
// questions, ts, then each of audit_p, audit_floor, audit_from,
// content_too_large (comma separated) and content that the entry has.
func (e *Entry) Values() []string {
	audit := "0"
	if e.Audit {
		audit = "1"
	}
	questions := e.Questions
	if questions == nil {
		questions = []Question{}
	}
	qs, err := json.Marshal(questions)
	if err != nil { // strings, finite floats and valid raw JSON always marshal
		qs = []byte("[]")
	}
	v := make([]string, 0, 26)
	v = append(v,
		fieldRequestID, e.RequestID,
		fieldOrg, e.Org,
		fieldModel, e.Model,
		fieldRoute, e.Route,
		fieldReason, e.Reason,
		fieldAudit, audit,
		fieldQuestions, string(qs),
		fieldTS, e.TS,
	)
	for _, f := range []struct {
		name  string
		value json.Number
	}{{fieldAuditP, e.AuditP}, {fieldAuditFloor, e.AuditFloor}, {fieldAuditFrom, e.AuditFrom}} {
		if f.value != "" {
			v = append(v, f.name, string(f.value))
		}
	}
	if len(e.ContentTooLarge) > 0 {
		v = append(v, fieldContentTooLarge, strings.Join(e.ContentTooLarge, ","))
	}
	if e.Content != "" {
		v = append(v, fieldContent, e.Content)
	}
	return v
}

// ParseEntry reads a stream message's fields. A field that is missing or
// not what Values writes reads as its zero value rather than failing the
// entry: an entry is shown as far as it can be.
func ParseEntry(id string, values map[string]any) Entry {
	str := func(k string) string { s, _ := values[k].(string); return s }
	e := Entry{
		ID:        id,
		RequestID: str(fieldRequestID),
		Org:       str(fieldOrg),
		Model:     str(fieldModel),
		Route:     str(fieldRoute),
		Reason:    str(fieldReason),
		Audit:     str(fieldAudit) == "1",
		TS:        str(fieldTS),
		Content:   str(fieldContent),
	}
	e.AuditP, e.AuditFloor, e.AuditFrom = readProbability(str(fieldAuditP)), readProbability(str(fieldAuditFloor)), readProbability(str(fieldAuditFrom))
	if err := json.Unmarshal([]byte(str(fieldQuestions)), &e.Questions); err != nil {
		e.Questions = nil
	}
	for i := range e.Questions {
		if IsNull(e.Questions[i].Answer) {
			e.Questions[i].Answer = nil
		}
	}
	if v := str(fieldContentTooLarge); v != "" {
		e.ContentTooLarge = strings.Split(v, ",")
	}
	return e
}

// Probability writes a probability as a plain decimal ("0.05", never
// "5e-02"), the shortest that reads back as the same float.
func Probability(p float64) json.Number {
	return json.Number(strconv.FormatFloat(p, 'f', -1, 64))
}

// readProbability returns s as a Probability when it is a number in 0..1,
// else "" (the field is then left out).
func readProbability(s string) json.Number {
	if v, err := strconv.ParseFloat(s, 64); err == nil && v >= 0 && v <= 1 {
		return Probability(v)
	}
	return ""
}

// IsNull reports whether raw is absent or JSON null.
func IsNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// ContentStream is the key of the stream that holds the content of the
// entries of stream, with include_content: "<stream>:content". Each content
// entry has the fields `request` and `response` (each only when stored);
// the review entry names its content entry's id in its field `content`.
// Keeping the bodies apart lets the review API list and filter entries
// without reading them, and keeps large replies off the Redis that every
// admission waits on. It is trimmed like stream (MAXLEN ~ maxlen), so the
// content of at least the newest maxlen entries is kept.
func ContentStream(stream string) string { return stream + ":content" }

// Content is a content entry: the bodies of one review entry. The request
// comes first: it is what a reviewer reads and replay re-sends.
type Content struct {
	// Request and Response are the bodies; nil when not stored.
	Request, Response *string
}

// Values returns the content entry's stream fields: request, then
// response, each when stored; nil when neither is.
func (c Content) Values() []string {
	var v []string
	if c.Request != nil {
		v = append(v, fieldRequest, *c.Request)
	}
	if c.Response != nil {
		v = append(v, fieldResponse, *c.Response)
	}
	return v
}

// ParseContent reads a content entry's fields.
func ParseContent(values map[string]any) Content {
	var c Content
	if s, ok := values[fieldRequest].(string); ok {
		c.Request = &s
	}
	if s, ok := values[fieldResponse].(string); ok {
		c.Response = &s
	}
	return c
}

// Apply sets e's bodies to c's.
func (c Content) Apply(e *Entry) { e.Request, e.Response = c.Request, c.Response }
