package handlers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/policy/breaker"
	"github.com/systemone/systemone-gateway/policy/guardrails"
	"github.com/systemone/systemone-gateway/policy/identity"
	"github.com/systemone/systemone-gateway/policy/limits"
	"github.com/systemone/systemone-gateway/policy/route"
)

var errTooLarge = errors.New("request body over max_body")

// serveEvaluation is the pipeline for POST .../v1/systemone, in order:
// identity, body, validation, breaker, limits, guardrails, the upstream, and
// on the way back the answer's reading, routing, and the token settlement.
// Each step either passes the request on or answers for the upstream.
func (h *Handler) serveEvaluation(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	x := &exchange{start: h.now()}
	defer h.record(x)

	key, ok := identity.BearerKey(r.Header)
	if ok {
		x.org, ok = h.identity.Org(r, key)
	}
	if !ok {
		return x.answer(w, answer{status: http.StatusUnauthorized, reason: rejectInvalidKey, body: []byte(bodyInvalidKey)})
	}

	buf := buffers.Get().(*bytes.Buffer)
	buf.Reset()
	body, err := h.readBody(r, buf)
	if err != nil {
		buffers.Put(buf)
		if errors.Is(err, errTooLarge) {
			return h.refuseEarly(r.Context(), w, x, answer{status: http.StatusRequestEntityTooLarge, reason: rejectTooLarge, body: []byte(bodyTooLarge)})
		}
		x.status = http.StatusBadRequest
		return caddyhttp.Error(http.StatusBadRequest, err) // the client went away mid-body
	}
	upstreamBody := newRequestBody(body)
	defer func() {
		// The transport may still read the body after next returns, and a
		// parallel guardrails check the state in it: the buffer is reused
		// only once the transport has closed it (or never got it) and no
		// check is left running (next may have panicked before its verdict).
		if (!x.forwarded || upstreamBody.closed.Load()) && !x.checking {
			buffers.Put(buf)
		}
	}()

	// A compressed body is inspected decompressed (bounded by max_body,
	// too) and forwarded as it came. One the gateway cannot decode is
	// inspected as it is, and so refused as not JSON.
	text, err := decodeBody(r.Header, body, h.MaxBody)
	switch {
	case errors.Is(err, errTooLarge):
		return h.refuseEarly(r.Context(), w, x, answer{status: http.StatusRequestEntityTooLarge, reason: rejectTooLarge, body: []byte(bodyTooLarge)})
	case err != nil:
		text = body
	}
	req, err := evaluation.ParseRequest(text)
	if err != nil {
		var invalid *evaluation.ValidationError
		errors.As(err, &invalid)
		return h.refuseEarly(r.Context(), w, x, answer{status: http.StatusUnprocessableEntity, reason: rejectInvalidRequest, body: invalid.Body()})
	}
	x.req, x.body = req, text

	if h.breakers != nil {
		ticket, open := h.breakers.Allow(req.ModelOrDefault())
		if open != nil {
			x.breakerState = open.State
			return h.refuseEarly(r.Context(), w, x, answer{status: 529, reason: rejectBreakerOpen, body: []byte(bodyOverloaded), retryAfter: open.RetryAfter})
		}
		x.ticket = ticket
		defer ticket.Cancel() // a request that ends before the upstream answers counts for nothing
	}

	if h.limiter != nil {
		d := h.limiter.Admit(r.Context(), x.org, req.EstimatedTokens)
		x.limits = &d
		if a, refused := limitAnswer(d); refused {
			return x.answer(w, a)
		}
		defer func() { h.limiter.Settle(d, x.billedTokens(d.Charged)) }()
	}

	var verdict <-chan guardrails.Verdict
	if h.guardrails != nil {
		verdict = h.checkGuardrails(r.Context(), req.State)
		x.checking = h.guardrails.Parallel()
		if !h.guardrails.Parallel() {
			if a, refused := x.takeVerdict(verdict); refused {
				return x.answer(w, a)
			}
		}
	}

	return h.forward(w, r, next, x, upstreamBody, verdict)
}

// forward hands the request to the upstream and reads its answer on the way
// back. With a parallel guardrails check, the answer is held until the
// verdict is in, and dropped if the verdict refuses the request.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, x *exchange, body *requestBody, verdict <-chan guardrails.Verdict) error {
	// What to restore if none of the upstream's response reaches the client
	// (a parallel verdict refused it, or it broke off before the commit).
	before := w.Header().Clone()
	var refusal *answer
	commit := func(status int, raw []byte) bool {
		if x.verdict == nil && verdict != nil {
			if a, refused := x.takeVerdict(verdict); refused {
				refusal = &a
				return false
			}
		}
		h.readAnswer(r.Context(), x, w.Header(), status, raw)
		return true
	}

	respBuf := buffers.Get().(*bytes.Buffer)
	respBuf.Reset()
	defer buffers.Put(respBuf)
	rec := newInterceptor(w, respBuf, maxResponseBuffer, h.ownedPrefixes, commit)

	r.Body = body
	x.forwarded = true
	started := h.now()
	defer func() {
		// An answer that broke off after part of it reached the client
		// aborts the handler (the connection must break): it still counts
		// as the upstream's failure, is not billed, and is logged as one.
		if rec.brokeOff {
			x.status, x.upstream = http.StatusBadGateway, h.now().Sub(started)
			if x.ticket != nil {
				x.ticket.Done(x.status, errIncompleteResponse)
			}
		}
	}()
	err := rec.serve(next, r)
	sent := rec.finish()
	if sent {
		dropTrailers(w.Header(), h.ownedPrefixes)
	}
	x.upstream = h.now().Sub(started)

	x.status = rec.status
	if !sent && rec.status == 0 {
		x.status = errorStatus(err)
	}
	if x.ticket != nil {
		x.ticket.Done(x.status, err)
	}
	if !sent && refusal == nil && verdict != nil && x.verdict == nil {
		// The upstream failed before answering: the verdict still decides
		// whether the client hears of the failure or of the refusal.
		if a, refused := x.takeVerdict(verdict); refused {
			refusal = &a
		}
	}
	if !sent {
		// None of the upstream's response reached the client: nor do the
		// headers it left behind (a response that broke off mid-body).
		replaceHeader(w.Header(), before)
	}
	if refusal != nil {
		x.status = 0
		return x.answer(w, *refusal)
	}
	if !sent {
		// reverse_proxy reports failures as errors for Caddy to answer;
		// the gateway's headers still go with that answer.
		x.setHeaders(w.Header())
	}
	return err
}

// readAnswer reads what the gateway needs of the upstream's response and
// adds its headers, just before the response goes to the client.
func (h *Handler) readAnswer(ctx context.Context, x *exchange, header http.Header, status int, raw []byte) {
	x.status = status
	x.requestID = header.Get("X-Request-Id")
	// The upstream's headers pass unchanged, except in the namespaces of
	// the policies that are on, where only the gateway's may appear.
	dropHeaders(header, h.ownedPrefixes)
	x.setHeaders(header)

	switch status {
	case http.StatusOK:
		var resp *evaluation.Response
		var text []byte
		if raw != nil {
			var err error
			if text, err = decodeBody(header, raw, maxResponseBuffer); err == nil {
				resp, _ = evaluation.ParseResponse(text)
			}
		}
		if resp != nil {
			x.model = resp.Model
			x.usage, x.hasUsage = resp.InputTokens, resp.HasUsage
		}
		if h.router != nil {
			d := h.router.Decide(x.req.Questions, resp, x.routeSignal())
			x.route = &d
			d.SetHeaders(header)
			// The router queues human routes and the audit's draw; it
			// copies the bodies only with include_content.
			h.router.Enqueue(ctx, d, route.Meta{RequestID: x.requestID, Org: x.org, Request: x.body, Response: text})
		}
	case http.StatusTooManyRequests:
		// The upstream's own quota for this org: hold the org at the edge.
		if h.limiter != nil {
			h.limiter.Hold(x.org, retryAfter(header))
		}
	}
}

// refuseEarly answers before the limiter has admitted the request (413,
// 422, an open breaker's 529). The rate-limit headers still report the
// org's buckets, read without charging them.
func (h *Handler) refuseEarly(ctx context.Context, w http.ResponseWriter, x *exchange, a answer) error {
	if h.limiter != nil {
		d := h.limiter.Peek(ctx, x.org)
		x.limits = &d
	}
	return x.answer(w, a)
}

// checkGuardrails starts the guardrails check; its verdict arrives on the
// channel. The check runs on its own goroutine so a parallel check overlaps
// the upstream call; a sequential one is waited for at once.
func (h *Handler) checkGuardrails(ctx context.Context, state []byte) <-chan guardrails.Verdict {
	ch := make(chan guardrails.Verdict, 1)
	if !h.guardrails.Parallel() {
		ch <- h.guardrails.Check(ctx, state)
		return ch
	}
	go func() { ch <- h.guardrails.Check(ctx, state) }()
	return ch
}

// readBody reads the request body, at most MaxBody bytes.
func (h *Handler) readBody(r *http.Request, buf *bytes.Buffer) ([]byte, error) {
	if r.ContentLength > h.MaxBody {
		return nil, errTooLarge
	}
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, h.MaxBody+1))
	if err != nil {
		return nil, err
	}
	if n > h.MaxBody {
		return nil, errTooLarge
	}
	return buf.Bytes(), nil
}

// requestBody is the body handed to the upstream. Its buffer is pooled, so
// it must know when the transport is done with it: Close (which the
// transport always calls, sometimes from another goroutine, even while a
// Read is under way on HTTP/2) waits for any Read in progress, and no Read
// touches the buffer after it.
type requestBody struct {
	mu     sync.Mutex
	r      *bytes.Reader
	closed atomic.Bool
}

func newRequestBody(b []byte) *requestBody { return &requestBody{r: bytes.NewReader(b)} }

// Read implements io.Reader.
func (b *requestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.Read(p)
}

// Close implements io.Closer.
func (b *requestBody) Close() error {
	b.mu.Lock()
	b.closed.Store(true)
	b.mu.Unlock()
	return nil
}

// limitAnswer is the answer for a refused admission, if it was refused.
func limitAnswer(d limits.Decision) (answer, bool) {
	switch {
	case d.Unavailable:
		return answer{status: http.StatusServiceUnavailable, reason: rejectLimiterDown, body: []byte(bodyLimiterDown), retryAfter: defaultRetryAfterShort}, true
	case !d.Allowed:
		return answer{status: http.StatusTooManyRequests, reason: rejectRateLimited, body: detailBody(d.Message), retryAfter: d.RetryAfter}, true
	}
	return answer{}, false
}

// errorStatus is the status Caddy will answer for an error from next.
func errorStatus(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	if err != nil {
		return http.StatusInternalServerError
	}
	return http.StatusOK
}

// retryAfter reads a retry-after header in seconds (at least 1s).
func retryAfter(h http.Header) time.Duration {
	secs, err := strconv.ParseFloat(h.Get(headerRetryAfter), 64)
	if err != nil || secs < 1 {
		secs = 1
	}
	return time.Duration(secs * float64(time.Second))
}

// replaceHeader makes h hold exactly the fields of want.
func replaceHeader(h, want http.Header) {
	for k := range h {
		delete(h, k)
	}
	for k, v := range want {
		h[k] = v
	}
}

// exchange is one evaluation request on its way through the gateway: what
// the policies decided, and what its log entry reports.
type exchange struct {
	start     time.Time
	org       string
	req       *evaluation.Request
	body      []byte // the request body as inspected (decompressed)
	status    int
	reject    string
	forwarded bool

	checking     bool // a parallel guardrails check runs, its verdict not taken yet
	ticket       *breaker.Ticket
	breakerState string
	limits       *limits.Decision
	verdict      *guardrails.Verdict
	route        *route.Decision

	model     string
	usage     int64
	hasUsage  bool
	requestID string
	upstream  time.Duration
}

// answer writes the gateway's own answer, with the headers it owes.
func (x *exchange) answer(w http.ResponseWriter, a answer) error {
	x.status, x.reject = a.status, a.reason
	dropHeaders(w.Header(), allGatewayPrefixes)
	x.setHeaders(w.Header())
	a.write(w)
	return nil
}

// setHeaders adds the rate-limit and guardrails headers the exchange has.
func (x *exchange) setHeaders(h http.Header) {
	if x.limits != nil {
		x.limits.SetHeaders(h)
	}
	if x.verdict != nil && x.reject == "" {
		x.verdict.SetHeaders(h)
	}
}

// takeVerdict waits for the guardrails verdict and says whether it refuses
// the request, and with what answer.
func (x *exchange) takeVerdict(ch <-chan guardrails.Verdict) (answer, bool) {
	v := <-ch
	x.verdict, x.checking = &v, false
	switch {
	case v.Unavailable:
		return answer{status: http.StatusServiceUnavailable, reason: rejectGuardrailsDown, body: []byte(bodyGuardrailsDown), retryAfter: defaultRetryAfterShort}, true
	case v.Action == guardrails.ActionBlock:
		return answer{status: http.StatusBadRequest, reason: rejectGuardrailsBlock, body: v.BlockedBody()}, true
	}
	return answer{}, false
}

// routeSignal is what the guardrails verdict forces on routing.
func (x *exchange) routeSignal() route.Signal {
	if x.verdict == nil {
		return route.Signal{}
	}
	return route.Signal{
		GuardrailsReview:    x.verdict.Action == guardrails.ActionReview,
		GuardrailsUnchecked: x.verdict.Action == guardrails.ActionUnchecked,
	}
}

// billedTokens is what the request finally costs the org's token bucket:
// the upstream's usage for a 200 that reported it, the estimate for a 200
// that did not, nothing for anything else (the upstream bills only success).
func (x *exchange) billedTokens(charged int64) int64 {
	switch {
	case x.status != http.StatusOK || x.reject != "":
		return 0
	case x.hasUsage:
		return x.usage
	default:
		return charged
	}
}
