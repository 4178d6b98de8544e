package handlers

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Reasons in X-Gateway-Reject: why the gateway answered instead of the upstream.
const (
	rejectInvalidPath      = "invalid_path"
	rejectInvalidKey       = "invalid_api_key"
	rejectTooLarge         = "request_too_large"
	rejectInvalidRequest   = "invalid_request"
	rejectRateLimited      = "rate_limited"
	rejectBudgetExceeded   = "budget_exceeded"
	rejectGuardrailsBlock  = "guardrails_blocked"
	rejectGuardrailsDown   = "guardrails_unavailable"
	rejectLimiterDown      = "rate_limiter_unavailable"
	rejectBreakerOpen      = "breaker_open"
	rejectUpstreamError    = "upstream_error"
	headerGatewayReject    = "X-Gateway-Reject"
	headerRetryAfter       = "Retry-After"
	contentTypeJSON        = "application/json"
	bodyInvalidPath        = `{"detail":"invalid_path"}`
	bodyInvalidKey         = `{"detail":"invalid_api_key"}`
	bodyTooLarge           = `{"detail":"request_too_large"}`
	bodyGuardrailsDown     = `{"detail":"guardrails_unavailable"}`
	bodyLimiterDown        = `{"detail":"rate_limiter_unavailable"}`
	bodyOverloaded         = `{"detail":"overloaded"}`
	bodyUpstreamDown       = `{"detail":"upstream_unavailable"}`
	bodyUpstreamTimeout    = `{"detail":"upstream_timeout"}`
	defaultRetryAfterShort = time.Second
	// statusClientClosed is nginx's 499, which reverse_proxy reports for a
	// client that went away.
	statusClientClosed = 499
)

// answer is a response the gateway gives itself, never forwarded upstream.
type answer struct {
	status     int
	reason     string        // X-Gateway-Reject
	body       []byte        // {"detail": ...}
	retryAfter time.Duration // rounded up to whole seconds, at least 1; 0 for none
}

// write sends the answer. Headers in the gateway's namespaces that anything
// before it set are replaced, so the client sees only the gateway's own.
func (a answer) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	h.Set(headerGatewayReject, a.reason)
	if a.retryAfter > 0 {
		h.Set(headerRetryAfter, strconv.FormatInt(retrySeconds(a.retryAfter), 10))
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// retrySeconds rounds a wait up to whole seconds, at least 1, as the
// retry-after header needs.
func retrySeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}

// detailBody is {"detail": "<sentence>"}.
func detailBody(sentence string) []byte {
	quoted, _ := json.Marshal(sentence)
	return []byte(`{"detail":` + string(quoted) + `}`)
}

// Header namespaces the gateway owns, in canonical form (X-RateLimit-*
// canonicalizes to X-Ratelimit-*).
const (
	prefixGateway    = "X-Gateway-"
	prefixRoute      = "X-Route"
	prefixGuardrails = "X-Guardrails-"
	prefixRateLimit  = "X-Ratelimit-"
	prefixBudget     = "X-Budget-"
)

// allGatewayPrefixes are every namespace: an answer of the gateway's own
// carries only the gateway's headers in them.
var allGatewayPrefixes = []string{prefixGateway, prefixRoute, prefixGuardrails, prefixRateLimit, prefixBudget}

// dropHeaders removes the headers (from the upstream or anyone else) in the
// given namespaces, so none passes as the gateway's.
func dropHeaders(h http.Header, prefixes []string) {
	for name := range h {
		if inNamespaces(name, prefixes) {
			delete(h, name)
		}
	}
}

// inNamespaces reports whether the canonical header name is in one of the
// namespaces (X-Route itself is in X-Route*, X-Router is not).
func inNamespaces(name string, prefixes []string) bool {
	for _, prefix := range prefixes {
		if strings.HasPrefix(name, prefix) && (prefix != prefixRoute || name == prefixRoute || name[len(prefix)] == '-') {
			return true
		}
	}
	return false
}
