package review

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Paging of GET /items.
const (
	// DefaultLimit is the page size without `limit`; MaxLimit the largest
	// (a larger `limit` is read as MaxLimit).
	DefaultLimit = 50
	MaxLimit     = 500
	// exportBatch is how many labelled entries GET /labels reads per pair
	// of round trips.
	exportBatch = 100
)

// Scanning for unlabelled items; variables so that tests can shrink them.
var (
	// maxScan bounds the entries one `unlabeled=1` page reads looking for
	// unlabelled ones, so that a long labelled stretch of the stream costs
	// a request a bounded amount of Redis work. A page that stops there
	// holds fewer than `limit` items (maybe none) and a non-empty `next`.
	maxScan = 10000
	// filterBatch is how many entries an `unlabeled=1` page reads per round
	// trip: entries may hold whole bodies, so not too many at once.
	filterBatch int64 = 100
)

// Bounds of PUT /items/<id>/labels.
const (
	maxLabelBody   = 1 << 20
	maxReviewerLen = 200
	// maxScoreTier is the highest tier number the seed allows (at most 10
	// tiers): the bound of a score label when the entry does not hold the
	// request's tiers.
	maxScoreTier = 9
)

// now is the clock of label timestamps; tests replace it.
var now = time.Now

// listPage is the answer of GET /items.
type listPage struct {
	Items []Item `json:"items"`
	Next  string `json:"next"`
}

func (h *Handler) listItems(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	var errs errorList
	limit := DefaultLimit
	if v, ok := query["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		switch {
		case err != nil:
			errs.add("int_parsing", loc("query", "limit"), "Input should be a valid integer, unable to parse string as an integer", jsonString(v[0]), nil)
		case n < 1:
			errs.add("greater_than_equal", loc("query", "limit"), "Input should be greater than or equal to 1", jsonString(v[0]), map[string]any{"ge": 1})
		default:
			limit = min(n, MaxLimit)
		}
	}
	after := query.Get("after")
	if after != "" {
		id, ok := parseID(after, false)
		if !ok {
			errs.add("value_error", loc("query", "after"), "Value error, not a stream entry id (<ms>-<seq>)", jsonString(after), nil)
		}
		after = id.String()
	}
	unlabeled := false
	switch v := query.Get("unlabeled"); v {
	case "", "0", "false":
	case "1", "true":
		unlabeled = true
	default:
		errs.add("bool_parsing", loc("query", "unlabeled"), "Input should be a valid boolean, unable to interpret input", jsonString(v), nil)
	}
	if errs.any() {
		errs.write(w)
		return
	}

	page := listPage{Items: []Item{}}
	batch := int64(limit + 1) // one more than a page tells whether a next page exists
	if unlabeled {
		batch = max(batch, filterBatch)
	}
	cursor := after
	for scanned := 0; ; {
		msgs, err := h.store.scan(r.Context(), cursor, batch)
		if err != nil {
			h.storeFailed(w, "list", err)
			return
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		labels, err := h.store.labels(r.Context(), ids)
		if err != nil {
			h.storeFailed(w, "list", err)
			return
		}
		for i, m := range msgs {
			if unlabeled && len(labels[i]) > 0 {
				continue
			}
			if len(page.Items) == limit {
				// A match beyond the page: the next page starts after
				// the page's last item.
				page.Next = page.Items[limit-1].ID
				writeJSON(w, http.StatusOK, page)
				return
			}
			e := parseEntry(m)
			page.Items = append(page.Items, e.item(labels[i]))
		}
		scanned += len(msgs)
		if int64(len(msgs)) < batch {
			break // the end of the stream
		}
		cursor = msgs[len(msgs)-1].ID
		if scanned >= maxScan {
			page.Next = cursor
			break
		}
	}
	writeJSON(w, http.StatusOK, page)
}

func (h *Handler) getItem(w http.ResponseWriter, r *http.Request, rawID string) {
	id, ok := parseID(rawID, false)
	if !ok {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	m, found, err := h.store.entry(r.Context(), id.String())
	if err != nil {
		h.storeFailed(w, "item", err)
		return
	}
	if !found {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	labels, err := h.store.labels(r.Context(), []string{m.ID})
	if err != nil {
		h.storeFailed(w, "item", err)
		return
	}
	e := parseEntry(m)
	writeJSON(w, http.StatusOK, e.item(labels[0]))
}

// labelsBody is a decoded PUT /items/<id>/labels body.
type labelsBody struct {
	labels   []member
	reviewer string
}

func (h *Handler) putLabels(w http.ResponseWriter, r *http.Request, rawID string) {
	id, ok := parseID(rawID, false)
	if !ok {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLabelBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeDetail(w, http.StatusRequestEntityTooLarge, "request_too_large")
		}
		return // otherwise the client is gone
	}
	// The body's shape is checked first, as FastAPI does before the
	// endpoint runs; the labels themselves need the entry.
	body, errs := parseLabelsBody(raw)
	if errs.any() {
		errs.write(w)
		return
	}
	m, found, err := h.store.entry(r.Context(), id.String())
	if err != nil {
		h.storeFailed(w, "put", err)
		return
	}
	if !found {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	e := parseEntry(m)
	records, errs := e.records(body, requestKinds(e.request), now().UTC().Format(time.RFC3339Nano))
	if errs.any() {
		errs.write(w)
		return
	}
	stored := make(map[string]string, len(records))
	for _, rec := range records {
		b, err := json.Marshal(rec)
		if err != nil { // RawMessages came from json.Unmarshal: valid
			h.storeFailed(w, "put", err)
			return
		}
		stored[rec.Question] = string(b)
	}
	if err := h.store.put(r.Context(), id, stored); err != nil {
		h.storeFailed(w, "put", err)
		return
	}
	for _, rec := range records {
		h.labels.WithLabelValues(rec.Model, rec.Type, strconv.FormatBool(rec.Agree)).Inc()
	}
	w.WriteHeader(http.StatusNoContent)
}

// parseLabelsBody reads `{"labels": {...}, "reviewer": "..."}`, reviewer
// optional (null or missing is "").
func parseLabelsBody(raw []byte) (labelsBody, errorList) {
	var errs errorList
	var body labelsBody
	var v any
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
	var labels, reviewer json.RawMessage
	for _, m := range top {
		switch m.key {
		case "labels":
			labels = m.value
		case "reviewer":
			reviewer = m.value
		}
	}
	switch {
	case labels == nil:
		errs.add("missing", loc("body", "labels"), "Field required", raw, nil)
	default:
		if body.labels, ok = members(labels); !ok {
			errs.add("dict_type", loc("body", "labels"), "Input should be a valid dictionary", labels, nil)
		}
	}
	if !isNull(reviewer) {
		if json.Unmarshal(reviewer, &body.reviewer) != nil {
			errs.add("string_type", loc("body", "reviewer"), "Input should be a valid string", reviewer, nil)
		} else if n := len([]rune(body.reviewer)); n > maxReviewerLen {
			errs.add("string_too_long", loc("body", "reviewer"), "String should have at most "+strconv.Itoa(maxReviewerLen)+" characters", reviewer, map[string]any{"max_length": maxReviewerLen})
		}
	}
	return body, errs
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

// records validates the labels against e's questions and builds the
// record of each.
func (e *entry) records(body labelsBody, kinds map[string]kind, ts string) ([]record, errorList) {
	var errs errorList
	out := make([]record, 0, len(body.labels))
	for _, m := range body.labels {
		where := loc("body", "labels", m.key)
		q := e.find(m.key)
		if q == nil {
			errs.add("extra_forbidden", where, "Unknown question: the entry has no question with this id", m.value, nil)
			continue
		}
		label, ok := checkLabel(&errs, where, q.Type, m.value, kinds[m.key])
		if !ok {
			continue
		}
		out = append(out, record{
			Entry: e.id, RequestID: e.requestID, Org: e.org, Model: e.model,
			Type: q.Type, Question: q.ID, Confidence: q.Confidence, Answer: q.Answer,
			Label: label, Agree: agree(q.Type, label, q.Answer), Audit: e.audit,
			AuditP: e.auditP, AuditFloor: e.auditFloor, AuditFrom: e.auditFrom,
			Route: q.Route, Reviewer: body.reviewer, TS: ts,
		})
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
		if json.Unmarshal(v, &b) != nil || isNull(v) {
			errs.add("bool_type", where, "Input should be a valid boolean", v, nil)
			return nil, false
		}
		return json.RawMessage(strconv.FormatBool(b)), true
	case "choice":
		var s string
		if json.Unmarshal(v, &s) != nil || isNull(v) {
			errs.add("string_type", where, "Input should be a valid string", v, nil)
			return nil, false
		}
		if k.options != nil && !contains(k.options, s) {
			expected := literals(k.options)
			errs.add("literal_error", where, "Input should be "+expected, v, map[string]any{"expected": expected})
			return nil, false
		}
		b, _ := json.Marshal(s)
		return b, true
	case "score":
		var f float64
		if !isNumber(v, &f) {
			errs.add("int_type", where, "Input should be a valid integer", v, nil)
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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

// exportLabels streams every stored label as NDJSON, in entry order. A
// Redis failure before the first line is a 503; after it, the connection
// is cut, so that no client takes a truncated export for a whole one.
func (h *Handler) exportLabels(w http.ResponseWriter, r *http.Request) {
	bw := bufio.NewWriterSize(w, 32<<10)
	started := false
	err := h.store.export(r.Context(), exportBatch, func(records []string) error {
		if !started {
			started = true
			setAPIHeaders(w.Header(), "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		for _, rec := range records {
			_, _ = bw.WriteString(rec)
			if err := bw.WriteByte('\n'); err != nil {
				return err // the client is gone
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return nil
	})
	switch {
	case err == nil && !started:
		setAPIHeaders(w.Header(), "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	case err != nil && !started:
		h.storeFailed(w, "export", err)
	case err != nil:
		if r.Context().Err() == nil {
			if ce := h.logger.Check(zap.WarnLevel, "review export cut short"); ce != nil {
				ce.Write(zap.String("stream", h.store.stream), zap.Error(err))
			}
		}
		panic(http.ErrAbortHandler)
	}
}

// member is one member of a JSON object, in the object's order.
type member struct {
	key   string
	value json.RawMessage
}

// members returns the members of a JSON object in order; a repeated key
// keeps its first place and its last value, as Python's json does. ok is
// false when raw is not an object.
func members(raw json.RawMessage) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []member
	index := map[string]int{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if i, dup := index[key]; dup {
			out[i].value = v
			continue
		}
		index[key] = len(out)
		out = append(out, member{key, v})
	}
	return out, true
}

// errorList is a 422 list of validation errors in the upstream's form.
type errorList struct {
	errs []fieldError
}

type fieldError struct {
	Type  string          `json:"type"`
	Loc   []any           `json:"loc"`
	Msg   string          `json:"msg"`
	Input json.RawMessage `json:"input"`
	Ctx   map[string]any  `json:"ctx,omitempty"`
}

func (e *errorList) add(typ string, where []any, msg string, input json.RawMessage, ctx map[string]any) {
	e.errs = append(e.errs, fieldError{Type: typ, Loc: where, Msg: msg, Input: input, Ctx: ctx})
}

func (e *errorList) any() bool { return len(e.errs) > 0 }

func (e *errorList) write(w http.ResponseWriter) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": e.errs})
}

// loc is a location array of strings.
func loc(parts ...string) []any {
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// setAPIHeaders marks an API answer: its type, never cached (it holds what
// reviewers see), never sniffed.
func setAPIHeaders(h http.Header, contentType string) {
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"detail":"internal_error"}`)
	}
	setAPIHeaders(w.Header(), "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeDetail answers {"detail": detail}, the product's error form.
func writeDetail(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, map[string]string{"detail": detail})
}
