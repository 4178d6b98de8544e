package api

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	if err := handler.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return handler, nil
}

// UnmarshalCaddyfile parses a `systemone_review` directive:
//
//	systemone_review {
//		redis      <url> [<url>...]
//		key_prefix <prefix>
//		stream     <name>
//		monitor    <target> [alpha <a>] [by org] [settle <duration>]
//		correct_within <duration>
//		max_questions  <n>
//	}
//
// redis and stream are required (Provision says so, after placeholders are
// resolved); key_prefix defaults to "systemone:". monitor watches the
// guarantee live (see Monitor): target in (0, 1), alpha in (0, 1), default
// 0.05; `by org` keeps a group per organization; settle, default 10m, is
// how long after an entry's first label its observation is taken (0s: at
// once); default off. correct_within <duration> (default 24h) is the
// correction window and max_questions <n> (default 5) the most questions
// of one group an entry can hold (Handler). Their values accept
// placeholders known at adapt time, such as {env.NAME}.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("duplicate %s", name)
		}
		seen[name] = true
		switch name {
		case "redis":
			h.Redis = d.RemainingArgs()
			if len(h.Redis) == 0 {
				return d.ArgErr()
			}
		case "key_prefix", "stream":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			if v == "" {
				return d.Errf("%s: empty", name)
			}
			if name == "stream" {
				h.Stream = v
			} else {
				h.KeyPrefix = v
			}
		case "monitor":
			m, err := parseMonitor(d)
			if err != nil {
				return err
			}
			h.Monitor = m
		case "correct_within":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := caddy.NewReplacer().ReplaceAll(d.Val(), "")
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur < 0 || d.NextArg() {
				return d.Errf("correct_within %q is not a duration of 0s or more", v)
			}
			window := caddy.Duration(dur)
			h.CorrectWithin = &window
		case "max_questions":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := caddy.NewReplacer().ReplaceAll(d.Val(), "")
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || d.NextArg() {
				return d.Errf("max_questions %q is not a whole number of 1 or more", v)
			}
			h.MaxQuestions = n
		default:
			return d.Errf("unknown subdirective %q (want redis, key_prefix, stream, monitor, correct_within or max_questions)", name)
		}
		if d.NextBlock(1) {
			return d.Errf("%s takes no block", name)
		}
	}
	return nil
}

// parseMonitor parses `monitor <target> [alpha <a>] [by org] [settle
// <duration>]`, the options in any order, each once.
func parseMonitor(d *caddyfile.Dispenser) (*Monitor, error) {
	repl := caddy.NewReplacer()
	value := func(what string) (string, error) {
		if !d.NextArg() {
			return "", d.ArgErr()
		}
		return repl.ReplaceAll(d.Val(), ""), nil
	}
	number := func(what string) (float64, error) {
		v, err := value(what)
		if err != nil {
			return 0, err
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, d.Errf("monitor %s %q is not a number", what, v)
		}
		return f, nil
	}
	m := new(Monitor)
	var err error
	if m.Target, err = number("target"); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for d.NextArg() {
		option := d.Val()
		if seen[option] {
			return nil, d.Errf("monitor: duplicate %s", option)
		}
		seen[option] = true
		switch option {
		case "alpha":
			if m.Alpha, err = number("alpha"); err != nil {
				return nil, err
			}
			if !(m.Alpha > 0 && m.Alpha < 1) { // 0 would read as the default
				return nil, d.Errf("monitor alpha %v is outside (0, 1)", m.Alpha)
			}
		case "by":
			v, err := value("by")
			if err != nil {
				return nil, err
			}
			if v != "org" {
				return nil, d.Errf("monitor by %q: want by org", v)
			}
			m.ByOrg = true
		case "settle":
			v, err := value("settle")
			if err != nil {
				return nil, err
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur < 0 {
				return nil, d.Errf("monitor settle %q is not a duration of 0s or more", v)
			}
			settle := caddy.Duration(dur)
			m.Settle = &settle
		default:
			return nil, d.Errf("monitor takes a target, then alpha <a>, by org or settle <duration>, not %q", option)
		}
	}
	if err := m.params().Validate(); err != nil {
		return nil, d.Err(err.Error())
	}
	return m, nil
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
