package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/review/record"
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

// Scanning for unlabelled items: the defaults of Handler's maxScan and
// listStep.
const (
	// defaultMaxScan bounds the entries one filtered page (`unlabeled=1`,
	// `audit=1`) reads looking for matches, so that a long stretch of the
	// stream without one costs a request a bounded amount of Redis work. A
	// page that stops there holds fewer than `limit` items (maybe none) and
	// a non-empty `next`.
	defaultMaxScan = 10000
	// defaultListStep is how many entries a page reads per round trip (XRANGE
	// COUNT). Entries hold no bodies (see content.go), but an entry
	// written before that layout does: not too many at once.
	defaultListStep int64 = 100
)

// Bounds of PUT /items/<id>/labels.
const (
	maxLabelBody   = 1 << 20
	maxReviewerLen = 200
	// MaxLabelsPerPut is the most labels one PUT may carry (and never more
	// than the entry's questions): a larger one is a 422 too_long.
	MaxLabelsPerPut = 10000
	// maxScoreTier is the highest tier number the evaluation service
	// allows (at most 10 tiers): the bound of a score label when the entry
	// does not hold the request's tiers.
	maxScoreTier = 9
)

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
		id, ok := record.ParseID(after)
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
	var chosen []record.Entry
	var chosenLabels []map[string]string
	maxScan, listStep := h.scanBounds()
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
		var kept []record.Entry
		for _, m := range msgs {
			if !audited || m.Audit {
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
	for i := range chosen {
		page.Items = append(page.Items, newItem(&chosen[i], chosenLabels[i]))
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
	id, ok := record.ParseID(rawID)
	if !ok {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	e, found, err := h.store.entry(r.Context(), id.String())
	if err != nil {
		h.storeFailed(w, "item", err)
		return
	}
	if !found {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	labels, err := h.store.labels(r.Context(), []string{e.ID})
	if err != nil {
		h.storeFailed(w, "item", err)
		return
	}
	writeJSON(w, http.StatusOK, newItem(&e, labels[0]))
}

// labelsBody is a decoded PUT /items/<id>/labels body.
type labelsBody struct {
	labels   []member
	reviewer string
	// pass is true for `{"pass": true}`: the entry cannot be judged.
	pass bool
}

func (h *Handler) putLabels(w http.ResponseWriter, r *http.Request, rawID string) {
	id, ok := record.ParseID(rawID)
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
	e, found, err := h.store.entry(r.Context(), id.String())
	if err != nil {
		h.storeFailed(w, "put", err)
		return
	}
	if !found {
		writeDetail(w, http.StatusNotFound, "not_found")
		return
	}
	now := h.clock()()
	lines, errs := labelLines(&e, body, requestKinds(e.Request), now.UTC().Format(time.RFC3339Nano))
	if errs.any() {
		errs.write(w)
		return
	}
	late, err := h.isLate(r.Context(), &e, now)
	if err != nil {
		h.storeFailed(w, "put", err)
		return
	}
	if late {
		// Taken as evidence already: the sequence stays as it was taken.
		// The correction is kept apart, counted and logged.
		if err := h.store.putLate(r.Context(), id, lines); err != nil {
			h.storeFailed(w, "put", err)
			return
		}
		if ce := h.logger.Check(zap.WarnLevel, "late correction: the entry was taken as evidence before it; counted in late_corrections, the labels taken unchanged"); ce != nil {
			ce.Write(zap.String("entry", e.ID), zap.String("model", e.Model), zap.Int("questions", len(lines)), zap.Duration("correct_within", h.correctWithin()))
		}
		// A correction to a disagreement still reaches the monitor.
		if _, err := h.correctMonitor(r.Context(), id, lines); err != nil {
			h.storeFailed(w, "put", err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writes := make([]labelWrite, len(lines))
	for i, ql := range lines {
		rec, err := ql.stored()
		if err != nil { // RawMessages came from json.Unmarshal: valid
			h.storeFailed(w, "put", err)
			return
		}
		writes[i] = labelWrite{question: ql[0].Question, record: rec}
		if o := ql.observed(); o != nil {
			writes[i].group, writes[i].agree = h.monitorGroup(o), o.Agree
		}
	}
	var due, at time.Time
	if h.monitor != nil {
		at = h.monitor.now()
		due = at.Add(h.monitor.settle)
	}
	if err := h.store.put(r.Context(), id, e.RequestID, writes, h.monitor != nil, due, monitorQuestions(&e), at); err != nil {
		h.storeFailed(w, "put", err)
		return
	}
	for _, ql := range lines {
		// One label, counted once: against the first answer.
		if first := ql[0]; !first.Pass {
			h.labels.WithLabelValues(first.Model, first.Type, strconv.FormatBool(first.Agree)).Inc()
		}
	}
	w.Header().Set("Cache-Control", "no-store") // like every API answer
	if h.monitor != nil && h.monitor.settle == 0 && h.correctWithin() == 0 {
		// settle 0s and correct_within 0s: the observation is taken at
		// once, before the answer.
		updates, err := h.store.take(r.Context(), h.monitor.now(), h.monitor.params, h.correctWithin())
		h.observed(updates)
		if err != nil {
			h.storeFailed(w, "put", err) // the labels are stored; the next take observes them
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// monitorGroup is the group whose process the line l, of an answer routed
// auto in an audited entry, feeds: its (model, type) group, or under `by
// org` its (model, type, org) group; an escalated question's second
// answer feeds the escalated group of its version and type, apart from the
// version's own answers.
func (h *Handler) monitorGroup(l *record.Label) *monitor.Group {
	g := monitor.Group{Model: l.Model, Type: l.Type, EscalatedFrom: l.EscalatedFrom}
	if h.monitor != nil && h.monitor.byOrg {
		g.Org, g.ByOrg = l.Org, true
	}
	return &g
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
