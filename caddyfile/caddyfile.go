// Package caddyfile registers the `systemone` Caddyfile directive, orders it
// before reverse_proxy, and parses it into the handler's JSON config. It only
// parses (one file here per block): the errors found here are of syntax (a
// wrong number of arguments, a token that is not a number, size or duration
// at all, an unknown or repeated subdirective). Every value is checked by
// its policy's Validate, the check a JSON config gets, and the Caddyfile
// reports Validate's error as it is, wrapped with the file and line.
package caddyfile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/systemone/systemone-gateway/handlers"
)

// Register adds the directive and its place in Caddy's handler order, so a
// Caddyfile needs no `order` line.
func Register() {
	// The readiness endpoint goes first, then systemone (each is placed
	// right before reverse_proxy), so that a probe needs no key.
	httpcaddyfile.RegisterHandlerDirective("systemone_health", parseHealth)
	httpcaddyfile.RegisterDirectiveOrder("systemone_health", httpcaddyfile.Before, "reverse_proxy")
	httpcaddyfile.RegisterHandlerDirective("systemone", parse)
	httpcaddyfile.RegisterDirectiveOrder("systemone", httpcaddyfile.Before, "reverse_proxy")
}

func parse(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(handlers.Handler)
	if err := Unmarshal(h.Dispenser, handler); err != nil {
		return nil, err
	}
	return handler, nil
}

// Unmarshal parses a `systemone` directive:
//
//	systemone {
//		max_body     <size>
//		org_header   <header>
//		org_keys     <file>
//		unknown_keys own|reject
//		per_org_metrics [<org>...]
//		redis        <url> [<url>...]
//		key_prefix   <prefix>
//		limits {
//			requests_per_minute <n>
//			tokens_per_second   <n>
//			token_burst         <n>
//			budget              <yuan> per day|month
//			price               <yuan>
//			budget_timezone     <zone>
//			org <id> {
//				requests_per_minute <n>
//				tokens_per_second   <n>
//				token_burst         <n>
//				budget              <yuan> per day|month
//			}
//			on_store_error      local|allow|deny
//			store_timeout       <duration>
//			local_allowance     [<share>% [<interval>]]
//		}
//		guardrails <base_url> {
//			api_key        <key>
//			model          <name>
//			timeout        <duration>
//			block          <level>...
//			review         <level>...
//			block_category <category>...
//			on_error       block|allow
//			cache          <duration>
//			mode           sequential|parallel
//		}
//		breaker {
//			failures  <n>
//			open_for  <duration>
//			half_open <n>
//		}
//		cache {
//			ttl         <duration>
//			max_entries <n>
//			max_size    <size>
//		}
//		route {
//			pin <version> {
//				noul     <threshold> [cert <cert_id>]
//				choice   <threshold> [cert <cert_id>]
//				score    <threshold> [cert <cert_id>]
//				question <id> <threshold> [cert <cert_id>]
//				org <name> {
//					noul   <threshold> [cert <cert_id>]|human
//					choice <threshold> [cert <cert_id>]|human
//					score  <threshold> [cert <cert_id>]|human
//				}
//			}
//			escalate <version> to <version> {
//				noul     <threshold> [cert <cert_id>]
//				choice   <threshold> [cert <cert_id>]
//				score    <threshold> [cert <cert_id>]
//				question <id> <threshold> [cert <cert_id>]
//				timeout  <duration>
//			}
//			org_fallback pooled|human
//			unpinned human|auto
//			queue <stream> [maxlen <n>]
//			audit <fraction>|active <share> [floor <p>] [from <confidence>]
//			include_content
//			max_content <size>
//			on_alarm alert|human
//			certificates <file>
//		}
//	}
//
// `audit <fraction>` draws every routed 200 with the same probability.
// `audit active <share> [floor <p>] [from <confidence>]` instead draws a
// response whose highest confidence is at or above from (default 0.5)
// with probability share, any other with floor (default share/10, never
// 0), and writes the probability in the entry's audit_p; thresholds from
// such labels come from `calibrate --method weighted`
// (docs/active-audit.md). The two forms exclude each other.
//
// Every block is optional; a missing block turns its policy off. Each
// block's options, defaults and ranges are documented on its policy's
// Config (package limits, guardrails, breaker, cache, route). TestSyntaxBlocks
// checks this syntax block against what the parser accepts: an option
// added to the parser must be added here, and every option shown here
// must adapt. Numbers,
// sizes and durations may be placeholders such as {env.NAME}, resolved when
// the Caddyfile is adapted; strings (URLs, keys, file names) keep their
// placeholders until the config is provisioned, so a secret given as
// {env.NAME} never appears in the adapted JSON.
//
// A question from org O takes, under the pin of the version that
// answered, its `question` line, else O's line for its type (`human` there
// routes it human, reason no_threshold), else the pin's type line
// (`org_fallback pooled`, the default) or human with reason
// org_no_threshold (`org_fallback human`). `cert <cert_id>` on a threshold
// line names the certificate `calibrate --certificates` wrote for it (16
// lowercase hex digits); X-Route-Certificate carries it for each question
// routed auto under that line. `certificates <file>` names the file
// calibrate wrote them to: every cert id must then be in it, for the
// line's model, type, question or org and threshold (as calibrate writes
// it, rounded up to 4 decimals), else the Caddyfile is refused at the
// pin's line.
//
// on_alarm is what a guarantee alarm of the review handler's `monitor`
// does: alert (default) only alerts; human routes the alarmed (model,
// type) group's questions human with reason guarantee_alarm until the
// group is reset, and needs redis and a queue (see route.Config.OnAlarm).
func Unmarshal(d *caddyfile.Dispenser, h *handlers.Handler) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "max_body":
			h.MaxBody, err = sizeArg(d)
		case "org_header":
			h.OrgHeader, err = stringArg(d)
		case "org_keys":
			h.OrgKeys, err = stringArg(d)
		case "unknown_keys":
			h.UnknownKeys, err = wordArg(d)
		case "per_org_metrics":
			h.PerOrgMetrics, h.MetricsOrgs = true, d.RemainingArgs()
		case "redis":
			if h.Redis = d.RemainingArgs(); len(h.Redis) == 0 {
				return d.ArgErr()
			}
		case "key_prefix":
			h.KeyPrefix, err = stringArg(d)
		case "limits":
			h.Limits, err = parseLimits(d)
		case "guardrails":
			h.Guardrails, err = parseGuardrails(d)
		case "breaker":
			h.Breaker, err = parseBreaker(d)
		case "route":
			h.Route, err = parseRoute(d)
		case "cache":
			h.Cache, err = parseCache(d)
		default:
			return d.Errf("unknown subdirective %q", name)
		}
		return err
	}); err != nil {
		return err
	}
	// The handler's own settings; each block was validated where it ended.
	if err := h.Validate(); err != nil {
		return d.WrapErr(err)
	}
	return nil
}
