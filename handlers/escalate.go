package handlers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/policy/breaker"
	"github.com/systemone/systemone-gateway/policy/cache"
	"github.com/systemone/systemone-gateway/policy/route"
)

// Outcomes of an escalation: the log's `escalation` and the outcome label
// of systemone_escalations_total.
const (
	// escalationAuto: every question asked again met its threshold.
	escalationAuto = "auto"
	// escalationHuman: the second version answered, and some question
	// asked again stays human.
	escalationHuman       = "human"
	escalationRefused     = "refused"      // the org's limits or budget refused the second call
	escalationFailed      = "failed"       // the upstream failed it, or its answer was unreadable
	escalationTimeout     = "timeout"      // it outlasted the escalate block's timeout
	escalationBreakerOpen = "breaker_open" // the second version's breaker was open
)

// SpanEscalation is an escalation's second call, inside the
// SpanReadAnswer span of the answer it escalates: its admission, the call
// through reverse_proxy, and the reading of its answer.
const SpanEscalation = "systemone.escalation"

// Attributes of a SpanEscalation span: the versions and the outcome.
const (
	attrEscalationFrom    = "systemone.escalation.from"
	attrEscalationTo      = "systemone.escalation.to"
	attrEscalationOutcome = "systemone.escalation.outcome"
)

// escalation is what an exchange needs to ask for a second opinion, and
// what came of it.
type escalation struct {
	// next and req are the handler chain the request went on to
	// (reverse_proxy) and the client's request, which the second call is
	// made through and cloned from.
	next caddyhttp.Handler
	req  *http.Request
	// outcome is one of the escalation outcomes; "" when not escalated.
	outcome string
	// body replaces the upstream's body for the client; nil when
	// unchanged. usage is the input tokens the second call was billed.
	body  []byte
	usage int64
}

// escalate asks an escalate block's second version again, before the
// answer goes to the client, for the questions of d (the route of resp,
// the upstream's 200 whose decoded body is text) that the block takes. On
// an answer, d holds the final routes, x.esc.body the body the client
// gets (the first answers with the second version's in place, `usage`
// summed) and header its length. On a refusal, failure, timeout or open
// breaker, d, the body and header stay as they were: the client never
// gets an error the second call caused.
func (h *Handler) escalate(ctx context.Context, x *exchange, d *route.Decision, header http.Header, text []byte) {
	if x.esc.next == nil || text == nil || x.req == nil {
		return
	}
	plan, ok := h.router.Escalation(*d)
	if !ok {
		return
	}
	ctx, span := startSpan(ctx, x, SpanEscalation)
	x.esc.outcome = h.secondOpinion(ctx, x, d, plan, header, text)
	h.metrics.escalations.WithLabelValues(plan.From, plan.To, x.esc.outcome).Inc()
	span.SetAttributes(attribute.String(attrEscalationFrom, plan.From), attribute.String(attrEscalationTo, plan.To),
		attribute.String(attrEscalationOutcome, x.esc.outcome))
	span.End()
}

// secondOpinion makes the second call of plan and applies its answer; it
// returns the escalation's outcome.
func (h *Handler) secondOpinion(ctx context.Context, x *exchange, d *route.Decision, plan route.EscalationPlan, header http.Header, text []byte) string {
	ids := make([]string, len(plan.Questions))
	for j, i := range plan.Questions {
		ids[j] = d.Questions[i].ID
	}
	body, err := evaluation.AskAgain(x.text, ids, plan.To)
	if err != nil {
		return escalationFailed
	}
	again, err := evaluation.ParseRequest(body)
	if err != nil {
		return escalationFailed
	}

	// The second call passes the breaker of its model and the org's
	// limits, as any request of the org would.
	var ticket *breaker.Ticket
	if h.breakers != nil {
		var open *breaker.Rejection
		if ticket, open = h.breakers.Allow(plan.To); open != nil {
			return escalationBreakerOpen
		}
		defer ticket.Cancel() // a call that ends before its answer counts for nothing
	}
	callCtx, cancel := context.WithTimeout(ctx, plan.Timeout)
	defer cancel()
	// The answer cache, as for any request: a second answer stored for
	// the same org and body is used as it is, for one request and no
	// tokens.
	var lookup *cache.Lookup
	var stored *cache.Answer
	if h.cache != nil && cache.Cacheable(again.Model) {
		lookup = h.cache.Lookup(callCtx, cache.Asker{Scope: string(x.caller.Source), Org: x.org, KeySum: x.caller.KeySum}, body)
		defer h.cache.Done(lookup)
		if a, ok := lookup.Hit(); ok {
			stored = &a
		} else if _, ok := lookup.Failed(); ok {
			return escalationFailed // the identical call this one waited for failed
		}
	}
	var billed int64
	if h.limiter != nil {
		dec := h.admit(ctx, x, stored == nil, again.EstimatedTokens)
		if _, refused := limitAnswer(dec); refused {
			h.metrics.limitRejected(dec, h.orgLabel(x.org))
			return escalationRefused
		}
		if stored == nil {
			defer func() { h.limiter.Settle(dec, billed) }()
		}
	}

	var status int
	var respHeader http.Header
	var raw []byte
	var read *evaluation.Response // the second answer as read, for its span
	if stored != nil {
		status, respHeader, raw = stored.Status, http.Header{"Content-Encoding": {stored.ContentEncoding}}, stored.Body
	} else {
		// The call's own GenAI span, a child of the evaluation's span as
		// the first call's is, ended with what came back.
		call := startUpstreamCall(trace.ContextWithSpan(ctx, x.span), x, plan.To)
		var res callResult
		defer func() {
			res.resp = read
			call.end(res)
		}()
		started := h.now()
		status, respHeader, raw, err = h.callAgain(callCtx, x, body)
		x.waited += h.now().Sub(started)
		res = secondCallResult(status, respHeader, err)
		timedOut := errors.Is(callCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		if ticket != nil {
			if timedOut && err == nil {
				err = context.DeadlineExceeded
			}
			ticket.Done(status, err)
		}
		if timedOut {
			res.status, res.failure = 0, "upstream_timeout"
			return escalationTimeout
		}
	}
	if err != nil || status != http.StatusOK {
		return escalationFailed
	}
	second, err := decodeBody(respHeader, raw, maxResponseBuffer)
	if err != nil {
		return escalationFailed
	}
	resp, _ := evaluation.ParseResponse(second)
	read = resp
	if stored == nil {
		billed = again.EstimatedTokens // the upstream billed a 200, for what it could not tell
		if resp != nil && resp.HasUsage {
			billed = resp.InputTokens
		}
		if lookup != nil && h.cache.Takes(status, again, resp, len(raw)) {
			h.cache.Record(ctx, lookup, status, &cache.Answer{
				Status: status, ContentType: respHeader.Get("Content-Type"), ContentEncoding: respHeader.Get("Content-Encoding"),
				RequestID: respHeader.Get("X-Request-Id"), Body: raw,
			})
		}
	}
	if resp == nil || resp.Model != plan.To {
		// Not the version the block's thresholds were set for.
		return escalationFailed
	}

	before := *d
	before.Questions = slices.Clone(d.Questions)
	answered := h.router.ApplyEscalation(d, plan, resp)
	answeredIDs := make([]string, len(answered))
	for j, i := range answered {
		answeredIDs[j] = d.Questions[i].ID
	}
	spliced, err := evaluation.ReplaceAnswers(text, second, answeredIDs)
	if err != nil {
		*d = before
		return escalationFailed
	}
	x.esc.body, x.esc.usage = spliced, billed
	// The body is the gateway's now: written as it is, uncompressed.
	header.Del("Content-Encoding")
	header.Set("Content-Length", strconv.Itoa(len(spliced)))
	if len(answered) == len(plan.Questions) {
		return escalationAuto
	}
	return escalationHuman
}

// callAgain sends the second call through the same handler chain the
// request went to (reverse_proxy: the same upstream, transport and
// timeouts, which the gateway does not know itself), as a clone of the
// client's request: its method, path and headers (its key among them),
// with body in place of its own, not compressed. reverse_proxy clones the
// request it is handed and keeps nothing of a call past it, so it can be
// invoked again for one client request. It returns the upstream's status,
// headers and body (up to the buffering bound: over it, the answer is
// unreadable and err says so).
func (h *Handler) callAgain(ctx context.Context, x *exchange, body []byte) (status int, header http.Header, raw []byte, err error) {
	r := x.esc.req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil // the client's may have been chunked; this body has a length
	r.GetBody = nil
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.Header.Del("Content-Encoding")
	r.Header.Del("Expect")
	rec := &secondAnswer{header: http.Header{}}
	defer func() {
		// reverse_proxy aborts when the upstream's body breaks off after
		// its header (or the call's time ran out then).
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			err = errIncompleteResponse
		}
	}()
	err = x.esc.next.ServeHTTP(rec, r)
	if err == nil && rec.over {
		err = errSecondAnswerTooLarge
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.status, rec.header, rec.buf.Bytes(), err
}

var errSecondAnswerTooLarge = errors.New("the second answer is over the buffering bound")

// secondCallResult is what the second call came back with, for its span,
// before its answer is read: the upstream's status and x-request-id, or
// why no answer came back whole.
func secondCallResult(status int, header http.Header, err error) callResult {
	res := callResult{status: status, requestID: header.Get("X-Request-Id")}
	switch {
	case err == nil, errors.Is(err, errSecondAnswerTooLarge):
		// The upstream answered whole (one too large for the gateway to
		// read is its own failure, not the upstream's).
	case errors.Is(err, errIncompleteResponse):
		res.failure = "incomplete_response"
	case errorStatus(err) == statusClientClosed:
		res.status, res.failure = 0, "client_closed"
	case errorStatus(err) == http.StatusGatewayTimeout:
		res.status, res.failure = 0, "upstream_timeout"
	default:
		res.status, res.failure = 0, "upstream_unavailable"
	}
	return res
}

// secondAnswer is the response writer of the second call: it keeps the
// upstream's answer, bounded by maxResponseBuffer, for the gateway alone.
type secondAnswer struct {
	header http.Header
	status int
	buf    bytes.Buffer
	over   bool
}

func (s *secondAnswer) Header() http.Header { return s.header }

func (s *secondAnswer) WriteHeader(status int) {
	if s.status == 0 && status >= 200 {
		s.status = status
	}
}

func (s *secondAnswer) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if s.buf.Len()+len(p) > maxResponseBuffer {
		s.over = true
		return len(p), nil
	}
	return s.buf.Write(p)
}
