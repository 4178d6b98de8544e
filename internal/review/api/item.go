package api

import (
	"bytes"
	"encoding/json"

	"github.com/systemone/systemone-gateway/internal/review/record"
)

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
	AuditP     json.Number       `json:"audit_p,omitempty"`
	AuditFloor json.Number       `json:"audit_floor,omitempty"`
	AuditFrom  json.Number       `json:"audit_from,omitempty"`
	TS         string            `json:"ts"`
	Questions  []record.Question `json:"questions"`
	Request    json.RawMessage   `json:"request,omitempty"`
	Response   json.RawMessage   `json:"response,omitempty"`
	// ContentTooLarge names the bodies that did not fit in the route's
	// max_content and were not stored ("request", "response"); absent
	// when none was left out.
	ContentTooLarge []string                   `json:"content_too_large,omitempty"`
	Labels          map[string]json.RawMessage `json:"labels,omitempty"`
}

// newItem builds the Item of e with its stored label lines (question id ->
// line).
func newItem(e *record.Entry, stored map[string]string) Item {
	it := Item{
		ID: e.ID, RequestID: e.RequestID, Org: e.Org, Model: e.Model, Route: e.Route,
		Reason: e.Reason, Audit: e.Audit, AuditP: e.AuditP, AuditFloor: e.AuditFloor, AuditFrom: e.AuditFrom,
		TS: e.TS, Questions: e.Questions,
		Request: jsonValue(e.Request), Response: jsonValue(e.Response), ContentTooLarge: e.ContentTooLarge,
	}
	if it.Questions == nil {
		it.Questions = []record.Question{}
	}
	for q, text := range stored {
		var l record.Label
		if json.Unmarshal([]byte(firstLine(text)), &l) != nil || len(l.Label) == 0 {
			continue
		}
		if it.Labels == nil {
			it.Labels = make(map[string]json.RawMessage, len(stored))
		}
		it.Labels[q] = l.Label
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

// isNumber decodes raw into v when it is a JSON number.
func isNumber(raw json.RawMessage, v *float64) bool {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}
