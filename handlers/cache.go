package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/systemone/systemone-gateway/policy/cache"
)

// X-Cache on the answer to every evaluation request that reached the
// upstream step, with `cache` on; and the log entry's `cache` field.
const (
	headerCache = "X-Cache"
	cacheHit    = "hit"
	cacheMiss   = "miss"
)

// lookUpAnswer looks for an answer stored for the org's exact body (the
// bytes as received), in the scope of the identity mode that named the
// org, before the admission: a hit (for a key the upstream accepted) is
// admitted as one request without tokens. An identical request already at
// the upstream is waited for (see cache.Cache.Lookup). A request that names
// no model can never hit and costs no lookup. A store that fails is a miss.
func (h *Handler) lookUpAnswer(ctx context.Context, x *exchange) {
	if !cache.Cacheable(x.req.Model) {
		return
	}
	who := cache.Asker{Scope: string(x.caller.Source), Org: x.org, KeySum: x.caller.KeySum}
	x.lookup = h.cache.Lookup(ctx, who, x.body.bytes())
	if a, ok := x.lookup.Hit(); ok {
		x.cached = &a
	} else if a, ok := x.lookup.Failed(); ok {
		x.cached, x.sharedFailure = &a, true
	}
}

// answerFromCache is a hit's upstream step: the stored answer goes to the
// client instead of the upstream's, and on the way back it is read and
// routed as a forwarded answer is, under the thresholds in force now
// (neither queued nor drawn by the audit). It carries the stored status,
// Content-Type, body bytes and x-request-id, and X-Cache: hit. Nothing
// reaches the upstream: the breaker counts nothing, and nothing is billed.
//
// An answer stored compressed (the client that caused it to be stored
// accepted gzip) goes as it is to a client that accepts its coding, and
// decoded to one that does not, as the upstream would have answered that
// client.
//
// A request that waited for an identical one whose upstream failed answers
// that failure the same way, as a miss: the upstream's 5xx (its status,
// Content-Type, body and x-request-id), or the gateway's own 502 or 504.
func (h *Handler) answerFromCache(w http.ResponseWriter, r *http.Request, x *exchange) error {
	a := x.cached
	x.cache = cacheHit
	if x.sharedFailure {
		x.cache = cacheMiss
		if a.Reject != "" {
			return x.answer(w, answer{status: a.Status, reason: a.Reject, body: a.Body})
		}
	}
	body, coding := a.Body, a.ContentEncoding
	hdr := w.Header()
	if coding != "" {
		hdr.Add("Vary", "Accept-Encoding")
		if !acceptsCoding(r.Header, coding) {
			if text, err := decodeBody(http.Header{"Content-Encoding": {coding}}, body, maxResponseBuffer); err == nil {
				body, coding = text, ""
			}
		}
	}
	setOrDelete(hdr, "Content-Type", a.ContentType)
	setOrDelete(hdr, "Content-Encoding", coding)
	setOrDelete(hdr, "X-Request-Id", a.RequestID)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	dropHeaders(hdr, h.ownedPrefixes) // the gateway's namespaces carry only its own
	h.readAnswer(r.Context(), x, hdr, a.Status, body)
	if x.esc.body != nil {
		body = x.esc.body // escalated as a fresh answer is
	}
	x.status = a.Status
	w.WriteHeader(a.Status)
	_, _ = w.Write(body)
	return nil
}

// recordAnswer tells the cache the upstream's answer to a request it
// looked up (raw: the whole body as sent, nil when it was not buffered
// whole) just before it goes to the client: a 200 marks the key accepted
// and is stored when the cache takes it (see cache.Cache.Takes); a 401 or
// 403 forgets the key; a 5xx read whole goes to the identical requests
// waiting for this one, which answer it too. It is recorded before the
// client has any of it, so that the client's next identical request, to
// any instance, finds it, and the identical requests waiting for this one
// take the answer at once: a stored miss waits for the store (in Redis,
// one round trip bounded by cache.StoreTimeout).
func (h *Handler) recordAnswer(ctx context.Context, x *exchange, header http.Header, status int, raw []byte) {
	if x.lookup == nil {
		return
	}
	if status >= http.StatusInternalServerError && raw != nil {
		h.cache.Fail(x.lookup, cache.Answer{
			Status:          status,
			ContentType:     header.Get("Content-Type"),
			ContentEncoding: header.Get("Content-Encoding"),
			RequestID:       x.requestID,
			Body:            raw,
		})
		return
	}
	var stored *cache.Answer
	if raw != nil && h.cache.Takes(status, x.req, x.resp, len(raw)) {
		stored = &cache.Answer{
			Status:          status,
			ContentType:     header.Get("Content-Type"),
			ContentEncoding: header.Get("Content-Encoding"),
			RequestID:       x.requestID,
			Body:            raw,
		}
	}
	h.cache.Record(ctx, x.lookup, status, stored)
}

// shareFailure hands the gateway's own answer for an upstream that could
// not be reached or timed out to the identical requests waiting for this
// one, if it leads any: they answer it too, at once.
func (h *Handler) shareFailure(x *exchange, a answer) {
	if h.cache == nil || !x.lookup.Leads() {
		return
	}
	h.cache.Fail(x.lookup, cache.Answer{Status: a.status, ContentType: contentTypeJSON, Body: a.body, Reject: a.reason})
}

// acceptsCoding reports whether the request's Accept-Encoding takes the
// content coding: named, or `*`, with a quality above 0.
func acceptsCoding(h http.Header, coding string) bool {
	coding = strings.TrimSpace(coding)
	star := false
	for _, v := range h.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			name = strings.TrimSpace(name)
			if !strings.EqualFold(name, coding) && name != "*" {
				continue
			}
			ok := true
			if q, value, _ := strings.Cut(params, "="); strings.EqualFold(strings.TrimSpace(q), "q") {
				f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				ok = err == nil && f > 0
			}
			if name != "*" {
				return ok
			}
			star = ok
		}
	}
	return star
}

// setOrDelete sets a header, or removes it when value is empty.
func setOrDelete(h http.Header, name, value string) {
	if value == "" {
		h.Del(name)
		return
	}
	h.Set(name, value)
}
