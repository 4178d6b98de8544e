package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// placeholderPrefix starts the placeholders the handler gives Caddy's own
// directives: {http.systemone.org} and the rest of Placeholders.
const placeholderPrefix = "http.systemone."

// Placeholders are the names, after "http.systemone.", of the placeholders
// the handler sets on every request through the directive. Each is empty
// when it does not apply (a request refused before it was known, or not an
// evaluation).
var Placeholders = []string{
	"org",               // the organization, once the key is read
	"reject",            // the X-Gateway-Reject reason of an answer the gateway gave itself
	"route",             // auto or human, on a routed 200
	"route_reason",      // why, on a routed 200
	"model",             // the concrete version from the response's model
	"guardrails_action", // pass, review, block, unchecked or unavailable
	"tokens_input",      // usage.input_tokens of a 200
	"cost_yuan",         // what those tokens cost
}

// providePlaceholders makes the exchange's placeholders known to the
// request's replacer. They are read from the exchange when a directive asks
// for them, so each holds its value from the moment the gateway knows it:
// a deferred `header` (`header >X-Org {http.systemone.org}`) sees what the
// gateway knew when the response's header was written, `log_append` and the
// access log everything. A `header` without defer runs before the handler
// and sees them empty. Reading them never allocates the exchange's values
// ahead of time, so requests that nobody asks about pay one closure.
func providePlaceholders(r *http.Request, x *exchange) {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Map(x.placeholder)
	}
}

// placeholder resolves one {http.systemone.*} placeholder; any other key is
// not the handler's.
func (x *exchange) placeholder(key string) (any, bool) {
	name, ok := strings.CutPrefix(key, placeholderPrefix)
	if !ok {
		return nil, false
	}
	switch name {
	case "org":
		return x.org, true
	case "reject":
		return x.reject, true
	case "route":
		if x.route != nil {
			return x.route.Route, true
		}
		return "", true
	case "route_reason":
		if x.route != nil {
			return x.route.Reason, true
		}
		return "", true
	case "model":
		return x.model, true
	case "guardrails_action":
		if x.verdict != nil {
			return x.verdict.Action, true
		}
		return "", true
	case "tokens_input":
		if x.hasUsage {
			return strconv.FormatInt(x.usage, 10), true
		}
		return "", true
	case "cost_yuan":
		if x.hasUsage {
			return strconv.FormatFloat(x.costYuan(), 'f', -1, 64), true
		}
		return "", true
	}
	return nil, false
}
