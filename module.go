// Package systemone is an edge gateway for the systemone evaluation service,
// built as Caddy modules: the `systemone` handler (guardrails, per-org
// limits, a circuit breaker and confidence routing in front of
// reverse_proxy), the `systemone_review` API and page, and the
// `systemone_simulator` upstream. Importing it registers the modules, their
// Caddyfile directives and the review loop's subcommands (`calibrate`,
// `verify`, `replay`).
package systemone

import (
	_ "embed"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/systemone/systemone-gateway/caddyfile"
	"github.com/systemone/systemone-gateway/handlers"
	_ "github.com/systemone/systemone-gateway/internal/bufferedlog" // registers the buffered log writer
	_ "github.com/systemone/systemone-gateway/internal/review/api"  // registers systemone_review
	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/replay"
	_ "github.com/systemone/systemone-gateway/simulator" // registers systemone_simulator
)

// DefaultCaddyfile is the repository's root Caddyfile: the gateway on :8080
// in front of the simulator on :9080, with in-process limits. The binary
// serves it when run with no config of its own.
//
//go:embed Caddyfile
var DefaultCaddyfile []byte

func init() {
	caddy.RegisterModule(handlers.Handler{})
	caddy.RegisterModule(handlers.Health{})
	caddyfile.Register()
	for _, c := range append(calibrate.Commands(caddyfile.CertificateMismatches), replay.Command()) {
		caddycmd.RegisterCommand(c)
	}
}
