package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/headerset"
	"github.com/systemone/systemone-gateway/policy/breaker"
	"github.com/systemone/systemone-gateway/policy/cache"
	"github.com/systemone/systemone-gateway/policy/guardrails"
	"github.com/systemone/systemone-gateway/policy/identity"
	"github.com/systemone/systemone-gateway/policy/limits"
	"github.com/systemone/systemone-gateway/policy/route"
)

var errTooLarge = errors.New("request body over max_body")

// maxDrainedBody is the most of an unread request body worth reading to
// keep a connection (net/http reads up to 256 KiB after the handler).
const maxDrainedBody = 64 << 10

// serveEvaluation is the pipeline for POST .../v1/systemone, in order:
// identity, the org's known refusal, body and validation, breaker, the
// answer cache's lookup, the one admission, guardrails, the upstream (or,
// for a cache hit, the stored answer), and on the way back the answer's
// reading, routing and the token settlement. Each step either passes the
// request on or answers for the upstream.
func (h *Handler) serveEvaluation(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, x *exchange) error {
	defer func() {
		// The log record is complete before the handler lets go of the
		// body, whose buffer may then go to another request.
		h.record(x)
		x.body.release()
	}()
	// Identical misses waiting for this one, if it ends without an answer
	// or a failure for them, ask the upstream themselves.
	defer func() { h.cache.Done(x.lookup) }()
	x.esc.next, x.esc.req = next, r // an escalate block's second call goes the same way

	key, ok := identity.BearerKey(r.Header)
	if ok {
		x.caller, ok = h.identity.Identify(r, key)
		x.org = x.caller.Org
	}
	if !ok {
		return x.answer(w, answer{status: http.StatusUnauthorized, reason: rejectInvalidKey, body: []byte(bodyInvalidKey)})
	}

	// The cheap refusal first: an org this instance knows to be over its
	// per-minute limit is refused before its body is read.
	if h.limiter != nil {
		if d, over := h.limiter.KnownOver(x.org); over {
			x.setLimits(d)
			if r.ProtoMajor == 1 && (r.ContentLength < 0 || r.ContentLength > maxDrainedBody) {
				// Or net/http would read (up to 256 KiB of) the body the
				// refusal exists not to read, to keep the connection. A
				// small body is cheaper to drain than a new connection.
				w.Header().Set("Connection", "close")
			}
			a, _ := limitAnswer(d)
			return x.answer(w, a)
		}
	}

	refusal, err := h.inspect(r, x)
	if err != nil {
		// The body broke off mid-read. It still counts one request.
		if h.limiter != nil {
			x.setLimits(h.limiter.AdmitRequest(r.Context(), x.org))
		}
		if r.Context().Err() != nil {
			return x.answer(w, answer{status: statusClientClosed})
		}
		x.status = http.StatusBadRequest
		return caddyhttp.Error(http.StatusBadRequest, err)
	}
	if refusal == nil && h.breakers != nil {
		ticket, open := h.breakers.Allow(x.req.ModelOrDefault())
		if open != nil {
			x.breakerState = open.State
			refusal = &answer{status: 529, reason: rejectBreakerOpen, body: []byte(bodyOverloaded), retryAfter: open.RetryAfter}
		} else {
			x.ticket = ticket
			defer ticket.Cancel() // a request that ends before the upstream answers counts for nothing
		}
	}
	if refusal == nil && h.cache != nil {
		h.lookUpAnswer(r.Context(), x)
	}

	// One admission per request, refused or not, so that no client can
	// make the gateway read and parse bodies for free: a request to be
	// forwarded pays both buckets, one the gateway refuses itself or
	// answers from the cache counts one request and carries the headers of
	// that admission.
	if h.limiter != nil {
		forward := refusal == nil && x.cached == nil
		if forward {
			x.setLimits(h.admit(r.Context(), x, true, x.req.EstimatedTokens))
			defer h.settle(x, x.decision)
		} else {
			x.setLimits(h.admit(r.Context(), x, false, 0))
		}
		if a, refused := limitAnswer(x.decision); refused {
			return x.answer(w, a)
		}
	}
	if refusal != nil {
		return x.answer(w, *refusal)
	}

	if h.guardrails != nil {
		h.startCheck(r.Context(), x)
		if !h.guardrails.Parallel() || x.cached != nil { // a hit has no upstream call to overlap
			if a, refused := x.refusedByVerdict(); refused {
				return x.answer(w, a)
			}
		}
	}
	if x.cached != nil {
		return h.answerFromCache(w, r, x)
	}
	return h.forward(w, r, next, x)
}

// inspect reads the body (into x.body, at most max_body), decodes a
// compressed one for reading and validates it (x.req). It returns the
// gateway's answer for a body it refuses (413, 422), or an error when the
// client went away mid-body.
func (h *Handler) inspect(r *http.Request, x *exchange) (*answer, error) {
	body, err := readBody(r, h.MaxBody)
	switch {
	case errors.Is(err, errTooLarge):
		return tooLargeAnswer(), nil
	case err != nil:
		return nil, err
	}
	x.body = body
	// A compressed body is inspected decompressed (bounded by max_body,
	// too) and forwarded as it came. One the gateway cannot decode is
	// inspected as it is, and so refused as not JSON.
	text, err := decodeBody(r.Header, body.bytes(), h.MaxBody)
	switch {
	case errors.Is(err, errTooLarge):
		return tooLargeAnswer(), nil
	case err != nil:
		text = body.bytes()
	}
	req, err := evaluation.ParseRequest(text)
	if err != nil {
		var invalid *evaluation.ValidationError
		errors.As(err, &invalid)
		return &answer{status: http.StatusUnprocessableEntity, reason: rejectInvalidRequest, body: invalid.Body()}, nil
	}
	x.req, x.text = req, text
	return nil, nil
}

// tooLargeAnswer is the 413 for a body over max_body.
func tooLargeAnswer() *answer {
	return &answer{status: http.StatusRequestEntityTooLarge, reason: rejectTooLarge, body: []byte(bodyTooLarge)}
}

// startCheck starts the guardrails check of the request's state. A
// parallel check runs on its own goroutine, overlapping the upstream call,
// and holds a reference to the body its state lives in; a sequential one is
// done before startCheck returns.
func (h *Handler) startCheck(ctx context.Context, x *exchange) {
	ch := make(chan guardrails.Verdict, 1)
	x.pending = ch
	ctx, span := startSpan(ctx, x, SpanGuardrails)
	if !h.guardrails.Parallel() {
		asked := h.now()
		v := h.guardrails.Check(ctx, x.req.State)
		x.waited += h.now().Sub(asked)
		endGuardrails(span, v)
		ch <- v
		return
	}
	body, state := x.body.retain(), x.req.State
	go func() {
		defer body.release()
		v := h.guardrails.Check(ctx, state)
		endGuardrails(span, v)
		ch <- v
	}()
}

// readAnswer reads what the gateway needs of the upstream's response and
// adds its headers, just before the response goes to the client.
func (h *Handler) readAnswer(ctx context.Context, x *exchange, header http.Header, status int, raw []byte) {
	ctx, span := startSpan(ctx, x, SpanReadAnswer)
	var resp *evaluation.Response
	defer func() { endReadAnswer(span, x, status, len(raw), resp != nil) }()
	x.requestID = header.Get("X-Request-Id")
	// The upstream's headers pass unchanged, except in the namespaces of
	// the policies that are on, where only the gateway's may appear: the
	// interceptor (or the cache's answer) dropped the others already.
	// The gateway's fields are gathered, and written at once at the end.
	defer x.hdr.WriteTo(header)
	x.addHeaders()

	switch status {
	case http.StatusOK:
		var text []byte
		if raw != nil {
			var err error
			if text, err = decodeBody(header, raw, maxResponseBuffer); err == nil {
				resp, _ = evaluation.ParseResponse(text)
			}
		}
		x.resp = resp
		if resp != nil {
			x.model = resp.Model
			if x.cache != cacheHit { // a hit is billed nothing
				x.usage, x.hasUsage = resp.InputTokens, resp.HasUsage
			}
		}
		x.addBudgetHeaders()
		if h.router != nil {
			x.routeDecision = h.router.Decide(x.req.Questions, resp, x.routeSignal())
			d := &x.routeDecision
			x.route = d
			h.escalate(ctx, x, d, header, text)
			if x.esc.body != nil {
				text = x.esc.body // what the client gets, and its review entry holds
			}
			d.AddHeaders(&x.hdr)
			// The router queues human routes and the audit's draw; it
			// copies the bodies only with include_content. A hit is
			// neither queued nor drawn: its answer was, once, when it
			// was stored.
			if x.cache != cacheHit {
				h.router.Enqueue(ctx, *d, route.Meta{RequestID: x.requestID, Org: x.org, Request: x.text, Response: text, Replay: x.replay})
			}
		}
	case http.StatusTooManyRequests:
		// The upstream's own quota for this org: hold the org at the edge.
		if h.limiter != nil {
			h.limiter.Hold(x.org, retryAfter(header))
		}
	}
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

// exchange is one evaluation request on its way through the gateway: what
// the policies decided, and what its log entry reports.
type exchange struct {
	start     time.Time
	span      trace.Span // the request's span: Caddy's tracing, or a no-op
	org       string
	caller    identity.Caller
	body      *pooledBody // the request body as received; the handler's reference
	text      []byte      // the body as inspected (decompressed); valid while body is held
	req       *evaluation.Request
	status    int // what the client got
	reject    string
	forwarded bool

	ticket       *breaker.Ticket
	breakerState string
	limits       *limits.Decision
	pending      <-chan guardrails.Verdict // the guardrails check under way
	verdict      *guardrails.Verdict       // its verdict, once taken; nil when the client left first
	verdictTaken bool
	// decision, routeDecision and verdictValue hold what limits, route
	// and verdict point to, inside the exchange's one allocation.
	decision      limits.Decision
	routeDecision route.Decision
	verdictValue  guardrails.Verdict
	route         *route.Decision
	lookup        *cache.Lookup // what the answer cache found, before the admission; nil when it was not asked
	cached        *cache.Answer // the answer the cache holds for the request, found before the admission
	sharedFailure bool          // cached is the failure of an identical request this one waited for
	cache         string        // X-Cache and the log's `cache`: hit, miss, or empty before the upstream step

	upstreamStatus int   // the status the upstream answered, 0 when it did not
	upstreamErr    error // why the upstream could not be reached
	model          string
	resp           *evaluation.Response // the upstream's 200 as read; nil when unread
	usage          int64
	hasUsage       bool
	requestID      string
	upstream       time.Duration
	replay         bool       // X-Systemone-Replay: 1, never queued nor audited
	genAI          genAIUsage // the tokens of its upstream calls, for the trace
	esc            escalation
	fwd            forwarding // the upstream step
	// hdr gathers the gateway's fields of the response, written at once
	// (one string and one backing array for their values).
	hdr headerset.Set
	// log and logField are the request's log entry (see record).
	log      logEntry
	logField [1]zap.Field

	// now is the handler's clock; waited is how long the request waited
	// for the upstream and the guardrails service, so that the rest of
	// its time is the gateway's own work (its overhead).
	now    func() time.Time
	waited time.Duration
}

// setLimits records the request's admission.
func (x *exchange) setLimits(d limits.Decision) {
	x.decision = d
	x.limits = &x.decision
}

// answer writes the gateway's own answer, with the headers it owes. The
// answer for a client that went away (499) is not written: nobody reads it.
func (x *exchange) answer(w http.ResponseWriter, a answer) error {
	if a.status == statusClientClosed {
		x.status = statusClientClosed
		return nil
	}
	x.status, x.reject = a.status, a.reason
	dropHeaders(w.Header(), allGatewayPrefixes)
	x.addHeaders()
	x.hdr.WriteTo(w.Header())
	a.write(w)
	return nil
}

// refuse writes the gateway's own answer to a request other than an
// evaluation (or one whose path is refused before it is known to be one),
// recording its reason for the placeholders and the trace.
func (x *exchange) refuse(w http.ResponseWriter, a answer) error {
	x.status, x.reject = a.status, a.reason
	a.write(w)
	return nil
}

// addHeaders adds the rate-limit, budget and guardrails headers the
// exchange has to its fields (x.hdr), for the caller to write. The
// guardrails headers go on every forwarded request's answer: the
// upstream's, or the gateway's when the upstream failed; not on a refusal.
func (x *exchange) addHeaders() {
	if x.limits != nil {
		x.limits.AddRateLimitHeaders(&x.hdr)
		// What the request was billed, if anything (a 200 that a
		// parallel verdict kept from the client).
		x.limits.Budget.AddHeaders(&x.hdr, x.limits.Cost(x.billedTokens()))
	}
	if x.verdict != nil && (x.reject == "" || x.reject == rejectUpstreamError) {
		x.verdict.AddHeaders(&x.hdr)
	}
	if x.cache != "" {
		x.hdr.Add(headerCache, x.cache)
	}
}

// refusedByVerdict waits for the guardrails verdict, the first time it is
// asked (later calls read the verdict taken), and returns the answer that
// refuses the request, if the verdict does. Without guardrails it refuses
// nothing.
func (x *exchange) refusedByVerdict() (answer, bool) {
	if x.pending == nil {
		return answer{}, false
	}
	if !x.verdictTaken {
		asked := x.now()
		x.verdictValue = <-x.pending
		x.waited += x.now().Sub(asked) // none for a sequential check, done already
		x.verdict, x.verdictTaken = &x.verdictValue, true
	}
	if x.verdict == nil {
		return answer{status: statusClientClosed}, true // see below
	}
	refused := func(a answer) (answer, bool) {
		// A guardrails refusal is the gateway's own answer, as before the
		// upstream step: no X-Cache, even when a parallel check let the
		// request reach the upstream.
		x.cache = ""
		return a, true
	}
	switch v := x.verdict; {
	case v.Unavailable && errors.Is(v.Err, context.Canceled):
		// Not the guardrails service's failure: the client went away
		// while it was asked. Nobody is left to answer, and no verdict
		// was given.
		x.verdict = nil
		return answer{status: statusClientClosed}, true
	case v.Unavailable:
		return refused(answer{status: http.StatusServiceUnavailable, reason: rejectGuardrailsDown, body: []byte(bodyGuardrailsDown), retryAfter: defaultRetryAfterShort})
	case v.Action == guardrails.ActionBlock:
		return refused(answer{status: http.StatusBadRequest, reason: rejectGuardrailsBlock, body: v.BlockedBody()})
	}
	return answer{}, false
}

// routeSignal is what the earlier steps tell routing: the org the
// identity step found (whose own thresholds apply) and what the guardrails
// verdict forces.
func (x *exchange) routeSignal() route.Signal {
	signal := route.Signal{Org: x.org}
	if x.verdict != nil {
		signal.GuardrailsReview = x.verdict.Action == guardrails.ActionReview
		signal.GuardrailsUnchecked = x.verdict.Action == guardrails.ActionUnchecked
	}
	return signal
}

// upstreamFailure is the answer for an upstream that could not be reached
// or failed before any of its answer was sent: the product's own style,
// instead of Caddy's empty 502 or 504.
func upstreamFailure(err error) answer {
	if errorStatus(err) == http.StatusGatewayTimeout {
		return answer{status: http.StatusGatewayTimeout, reason: rejectUpstreamError, body: []byte(bodyUpstreamTimeout)}
	}
	return answer{status: http.StatusBadGateway, reason: rejectUpstreamError, body: []byte(bodyUpstreamDown)}
}
