package simulator

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("systemone_simulator", parseCaddyfile)
	// It answers every request, so it goes last, where a reverse_proxy to a
	// real upstream in the same site would be.
	httpcaddyfile.RegisterDirectiveOrder("systemone_simulator", httpcaddyfile.After, "reverse_proxy")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	s := new(Handler)
	err := s.UnmarshalCaddyfile(h.Dispenser)
	return s, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	systemone_simulator [<matcher>] {
//		version     <name>
//		latency     <duration>
//		overloaded  always|<fraction>|<n>
//		keys        <key>...
//		requests_per_minute <n>
//		tokens_per_second   <n>
//		max_tokens          <n>
//		max_question_tokens <n>
//	}
//
// Every subdirective is optional; the block may be left out.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := make(map[string]bool)
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("duplicate subdirective %s", name)
		}
		seen[name] = true

		switch name {
		case "version":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			h.Version = v

		case "latency":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil {
				return d.Errf("latency %q: %v", v, err)
			}
			if dur < 0 {
				return d.Errf("latency %q: must not be negative", v)
			}
			h.Latency = caddy.Duration(dur)

		case "overloaded":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			if _, err := parseOverload(v); err != nil {
				return d.Err(err.Error())
			}
			h.Overloaded = v

		case "keys":
			h.Keys = d.RemainingArgs()
			if len(h.Keys) == 0 {
				return d.ArgErr()
			}

		case "requests_per_minute":
			n, err := count(d)
			if err != nil {
				return err
			}
			h.RequestsPerMinute = &n

		case "tokens_per_second":
			n, err := count(d)
			if err != nil {
				return err
			}
			h.TokensPerSecond = &n

		case "max_tokens":
			n, err := count(d)
			if err != nil {
				return err
			}
			h.MaxTokens = &n

		case "max_question_tokens":
			n, err := count(d)
			if err != nil {
				return err
			}
			h.MaxQuestionTokens = &n

		default:
			return d.Errf("unrecognized systemone_simulator subdirective %q", name)
		}
	}
	return nil
}

// oneArg reads the single argument of the current subdirective.
func oneArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	v := d.Val()
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

// count reads the single non-negative whole-number argument of the current
// subdirective.
func count(d *caddyfile.Dispenser) (int64, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, d.Errf("%s %q: want a whole number, 0 or more", name, v)
	}
	return n, nil
}
