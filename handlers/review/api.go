package review

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/policy/guarantee"
	"github.com/systemone/systemone-gateway/policy/route"
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
	// maxScan bounds the entries one filtered page (`unlabeled=1`,
	// `audit=1`) reads looking for matches, so that a long stretch of the
	// stream without one costs a request a bounded amount of Redis work. A
	// page that stops there holds fewer than `limit` items (maybe none) and
	// a non-empty `next`.
	maxScan = 10000
	// listStep is how many entries a page reads per round trip (XRANGE
	// COUNT). Entries hold no bodies (see content.go), but an entry
	// written before that layout does: not too many at once.
	listStep int64 = 100
)

// Bounds of PUT /items/<id>/labels.
const (
	maxLabelBody   = 1 << 20
	maxReviewerLen = 200
	// MaxLabelsPerPut is the most labels one PUT may carry (and never more
	// than the entry's questions): a larger one is a 422 too_long.
	MaxLabelsPerPut = 10000
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
	if n, ok := positiveInt(&errs, query, "limit"); ok {
		limit = min(n, MaxLimit)
	}
	after := query.Get("after")
	if after != "" {
		id, ok := parseID(after, false)
		if !ok {
			errs.add("value_error", loc("query", "after"), "Value error, not a stream entry id (<ms>-<seq>)", jsonString(after), nil)
		}
		after = id.String()
	}
	unlabeled := boolParam(&errs, query, "unlabeled")
	audited := boolParam(&errs, query, "audit")
	if errs.any() {
		errs.write(w)
		return
	}

	page := listPage{Items: []Item{}}
	var chosen []redis.XMessage
	var chosenLabels []map[string]string
	step := min(int64(limit+1), listStep) // one more than a page tells whether a next page exists
	if unlabeled || audited {
		step = listStep
	}
	cursor := after
scan:
	for scanned := 0; ; {
		msgs, err := h.store.scan(r.Context(), cursor, step)
		if err != nil {
			h.storeFailed(w, "list", err)
			return
		}
		// Labels are read only for the entries the audit filter keeps.
		var kept []redis.XMessage
		for _, m := range msgs {
			if !audited || m.Values["audit"] == "1" {
				kept = append(kept, m)
			}
		}
		ids := make([]string, len(kept))
		for i, m := range kept {
			ids[i] = m.ID
		}
		labels, err := h.store.labels(r.Context(), ids)
		if err != nil {
			h.storeFailed(w, "list", err)
			return
		}
		for i, m := range kept {
			if unlabeled && len(labels[i]) > 0 {
				continue
			}
			if len(chosen) == limit {
				// A match beyond the page: the next page starts after
				// the page's last item.
				page.Next = chosen[limit-1].ID
				break scan
			}
			chosen = append(chosen, m)
			chosenLabels = append(chosenLabels, labels[i])
		}
		scanned += len(msgs)
		if int64(len(msgs)) < step {
			break // the end of the stream
		}
		cursor = msgs[len(msgs)-1].ID
		if (unlabeled || audited) && scanned >= maxScan {
			page.Next = cursor
			break
		}
	}
	// Only the items answered have their bodies read.
	if err := h.store.attachContent(r.Context(), chosen); err != nil {
		h.storeFailed(w, "list", err)
		return
	}
	for i, m := range chosen {
		e := parseEntry(m)
		page.Items = append(page.Items, e.item(chosenLabels[i]))
	}
	writeJSON(w, http.StatusOK, page)
}

// boolParam reads a boolean query parameter: "1" or "true", "0", "false"
// or absent.
func boolParam(errs *errorList, query url.Values, name string) bool {
	switch v := query.Get(name); v {
	case "", "0", "false":
		return false
	case "1", "true":
		return true
	default:
		errs.add("bool_parsing", loc("query", name), "Input should be a valid boolean, unable to interpret input", jsonString(v), nil)
		return false
	}
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
	if user := authUser(r); user != "" {
		// Signed in: the label is the signed-in person's, whatever name
		// the body gives.
		body.reviewer = truncateRunes(user, maxReviewerLen)
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
	writes := make([]labelWrite, len(records))
	for i, rec := range records {
		b, err := json.Marshal(rec)
		if err != nil { // RawMessages came from json.Unmarshal: valid
			h.storeFailed(w, "put", err)
			return
		}
		writes[i] = labelWrite{question: rec.Question, record: string(b), agree: rec.Agree}
		if rec.Audit && rec.Route == route.RouteAuto {
			g := guarantee.Group{Model: rec.Model, Type: rec.Type}
			if h.monitor != nil && h.monitor.byOrg {
				g.Org, g.ByOrg = rec.Org, true
			}
			writes[i].group = &g
		}
	}
	var due time.Time
	if h.monitor != nil {
		due = h.monitor.now().Add(h.monitor.settle)
	}
	if err := h.store.put(r.Context(), id, e.requestID, writes, h.monitor != nil, due); err != nil {
		h.storeFailed(w, "put", err)
		return
	}
	for _, rec := range records {
		h.labels.WithLabelValues(rec.Model, rec.Type, strconv.FormatBool(rec.Agree)).Inc()
	}
	w.Header().Set("Cache-Control", "no-store") // like every API answer
	if h.monitor != nil && h.monitor.settle == 0 {
		// settle 0s: the observation is taken at once, before the answer.
		updates, err := h.store.take(r.Context(), h.monitor.now(), h.monitor.params)
		h.observed(updates)
		if err != nil {
			h.storeFailed(w, "put", err) // the labels are stored; the next take observes them
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// authUser is the user Caddy's authentication (basic_auth, or an
// authentication provider) signed the request in as; "" when none did.
func authUser(r *http.Request) string {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return ""
	}
	user, _ := repl.GetString("http.auth.user.id")
	return user
}

// truncateRunes keeps the first n runes of s.
func truncateRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// parseLabelsBody reads `{"labels": {...}, "reviewer": "..."}`, reviewer
// optional (null or missing is "").
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
		} else if len(body.labels) > MaxLabelsPerPut {
			tooMany(&errs, len(body.labels), MaxLabelsPerPut)
		}
	}
	if !utf8.Valid(raw) {
		// encoding/json would store U+FFFD in place of the bad bytes.
		badUTF8(&errs, raw, reviewer, body.labels)
	}
	if !isNull(reviewer) && utf8.Valid(reviewer) {
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

// records validates the labels against e's questions and builds the
// record of each.
func (e *entry) records(body labelsBody, kinds map[string]kind, ts string) ([]record, errorList) {
	var errs errorList
	if len(body.labels) > len(e.questions) {
		tooMany(&errs, len(body.labels), len(e.questions))
		return nil, errs
	}
	// One pass to index the questions: a lookup per label would make a
	// PUT quadratic in the entry's question count.
	byID := make(map[string]*question, len(e.questions))
	for i := range e.questions {
		if _, dup := byID[e.questions[i].ID]; !dup { // the first, as find
			byID[e.questions[i].ID] = &e.questions[i]
		}
	}
	out := make([]record, 0, len(body.labels))
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
		out = append(out, record{
			Entry: e.id, RequestID: e.requestID, Org: e.org, Model: e.model,
			Type: q.Type, Question: q.ID, Confidence: q.Confidence, Answer: q.Answer,
			Label: label, Agree: route.Agree(q.Type, label, q.Answer), Audit: e.audit,
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
