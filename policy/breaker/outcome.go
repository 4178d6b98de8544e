package breaker

import (
	"context"
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Outcome is what one admitted request tells its model's breaker.
type Outcome int

const (
	// Success resets the run of consecutive failures; while half-open, enough
	// of them close the breaker.
	Success Outcome = iota
	// Failure extends the run of consecutive failures; while half-open, one
	// re-opens the breaker.
	Failure
	// Excluded counts neither way and frees a half-open probe slot.
	Excluded
)

// String returns "success", "failure" or "excluded".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Excluded:
		return "excluded"
	default:
		return "unknown"
	}
}

// statusClientClosed is the status reverse_proxy records when the client went
// away before the upstream answered.
const statusClientClosed = 499

// statusOverloaded is the evaluation service's "overloaded" status.
const statusOverloaded = 529

// Classify turns the result of forwarding one request into an Outcome.
// status is the status the upstream answered (0 if none); err is what the
// next handler (reverse_proxy) returned.
//
// Failure: an upstream 529, 500, 502, 503 or 504, or an error reaching the
// upstream (connection refused, timeout: reverse_proxy returns these as
// errors with status 502, 503 or 504, or none).
//
// Excluded: the client went away (a context.Canceled error, status 499 or a
// caddyhttp.HandlerError with status 499), or any other error with a 4xx
// status, by which the gateway refused the client's request: none of these
// says anything about the upstream's health.
//
// Success: every other answer from the upstream, 4xx and 429 included: the
// upstream was well enough to answer.
func Classify(status int, err error) Outcome {
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return Excluded
		}
		if he, ok := errors.AsType[caddyhttp.HandlerError](err); ok &&
			he.StatusCode >= 400 && he.StatusCode < 500 {
			return Excluded
		}
		return Failure
	}
	switch status {
	case statusClientClosed:
		return Excluded
	case statusOverloaded,
		http.StatusInternalServerError,
		http.StatusBadGateway,
		http.StatusServiceUnavailable,
		http.StatusGatewayTimeout:
		return Failure
	}
	return Success
}

// The errors a Ticket hands gobreaker: its default IsSuccessful counts only
// nil as a success, and IsExcluded recognises errExcluded.
var (
	errFailure  = errors.New("upstream failed")
	errExcluded = errors.New("outcome excluded")
)

func (o Outcome) err() error {
	switch o {
	case Failure:
		return errFailure
	case Excluded:
		return errExcluded
	default:
		return nil
	}
}
