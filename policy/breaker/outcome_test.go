package breaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name   string
		status int
		err    error
		want   Outcome
	}{
		{"200", 200, nil, Success},
		{"no status recorded", 0, nil, Success},
		{"401", 401, nil, Success},
		{"402", 402, nil, Success},
		{"404 model_not_found", 404, nil, Success},
		{"422", 422, nil, Success},
		{"429", 429, nil, Success},
		{"501", 501, nil, Success},
		{"nonsense status", -7, nil, Success},
		{"huge status", 1 << 20, nil, Success},

		{"529 overloaded", 529, nil, Failure},
		{"500", 500, nil, Failure},
		{"502", 502, nil, Failure},
		{"503", 503, nil, Failure},
		{"504", 504, nil, Failure},
		{"connection refused", 0, caddyhttp.Error(502, refused), Failure},
		{"bare transport error", 0, refused, Failure},
		{"upstream timeout", 0, caddyhttp.Error(504, context.DeadlineExceeded), Failure},
		{"no upstreams", 0, caddyhttp.Error(503, errors.New("no upstreams available")), Failure},
		{"error without status", 0, caddyhttp.Error(0, errors.New("boom")), Failure},
		{"error after a 200 header", 200, caddyhttp.Error(502, errors.New("reading body")), Failure},

		{"499 written", 499, nil, Excluded},
		{"context canceled", 0, context.Canceled, Excluded},
		{"wrapped context canceled", 0, fmt.Errorf("proxying: %w", context.Canceled), Excluded},
		{"handler error 499", 0, caddyhttp.Error(499, errors.New("operation was canceled")), Excluded},
		{"canceled beats status", 529, context.Canceled, Excluded},
		{"client's fault 413", 0, caddyhttp.Error(413, errors.New("body too large")), Excluded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.status, tt.err); got != tt.want {
				t.Errorf("Classify(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.want)
			}
		})
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Success: "success", Failure: "failure", Excluded: "excluded", Outcome(9): "unknown"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
