package caddyfile_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// oneRule is an invalid value written twice, in a Caddyfile and in a JSON
// config, and the one error both get from the policy's Validate.
type oneRule struct {
	// caddyfile is the lines inside the systemone directive.
	caddyfile string
	// json is the handler's fields, as a JSON config writes them.
	json string
	// want is the error: whole from the JSON config (after Caddy's words
	// on where the module sits), and from the Caddyfile with only the file
	// and line after it.
	want string
}

// oneRules holds an invalid value of every option whose value is checked,
// those the Caddyfile parser once checked with words of its own among
// them. What a JSON config cannot write (a 0 where its 0 is the default, a
// word where a number goes, a second `question` for one id) has its
// syntax error in TestUnmarshalErrors instead.
var oneRules = []oneRule{
	// systemone
	{"unknown_keys maybe", `"unknown_keys":"maybe"`, `unknown_keys must be own or reject, not "maybe"`},
	{"unknown_keys reject", `"unknown_keys":"reject"`, "unknown_keys reject needs org_keys"},
	{"org_header Authorization", `"org_header":"Authorization"`, "org_header Authorization carries credentials: its value would be the org id in every log entry, Redis key and queue entry"},
	{"org_header proxy-authorization", `"org_header":"proxy-authorization"`, "org_header Proxy-Authorization carries credentials: its value would be the org id in every log entry, Redis key and queue entry"},
	{"org_header Cookie", `"org_header":"Cookie"`, "org_header Cookie carries credentials: its value would be the org id in every log entry, Redis key and queue entry"},
	{`org_header "X Org"`, `"org_header":"X Org"`, `org_header "X Org" is not a valid header name (letters, digits and !#$%&'*+-.^_` + "`" + `|~ only)`},
	{"redis redis://127.0.0.1:0", `"redis":["redis://127.0.0.1:0"]`, "redis: redis URL for host 127.0.0.1: port 0 is not in 1..65535"},

	// limits
	{"limits {\nrequests_per_minute -1\n}", `"limits":{"requests_per_minute":-1}`, "limits: requests_per_minute -1: want 0 to 10000000"},
	{"limits {\ntokens_per_second 10000001\n}", `"limits":{"tokens_per_second":10000001}`, "limits: tokens_per_second 10000001: want 0 to 10000000"},
	{"limits {\ntoken_burst -3\n}", `"limits":{"token_burst":-3}`, "limits: token_burst -3: want 0 to 10000000"},
	{"limits {\ntoken_burst 0\n}", `"limits":{"token_burst":0}`, "limits: token_burst 0 holds no token; turn the token bucket off with tokens_per_second 0"},
	{"limits {\nbudget 5 per week\n}", `"limits":{"budget":{"yuan":"5","per":"week"}}`, `limits: budget 5.00 per "week": want per day or per month`},
	{"limits {\nbudget 0 per year\n}", `"limits":{"budget":{"yuan":"0","per":"year"}}`, `limits: budget 0.00 per "year": want per day or per month`},
	{"limits {\nbudget 1000001 per day\n}", `"limits":{"budget":{"yuan":"1000001","per":"day"}}`, "limits: budget 1000001.00: want 0 to 1000000 yuan"},
	{"limits {\nprice 0\n}", `"limits":{"price":"0"}`, "limits: price 0.00: want more than 0 and at most 1000 yuan per million input tokens"},
	{"limits {\nbudget_timezone Mars/Base\n}", `"limits":{"budget_timezone":"Mars/Base"}`, `limits: budget_timezone "Mars/Base": not an IANA time zone (such as UTC or Asia/Shanghai)`},
	{"limits {\norg acme\n}", `"limits":{"orgs":{"acme":{}}}`, `limits: org "acme" overrides nothing`},
	{"limits {\norg acme {\ntokens_per_second -5\n}\n}", `"limits":{"orgs":{"acme":{"tokens_per_second":-5}}}`, `limits: org "acme": tokens_per_second -5: want 0 to 10000000`},
	{"limits {\norg acme {\nbudget 2 per week\n}\n}", `"limits":{"orgs":{"acme":{"budget":{"yuan":"2","per":"week"}}}}`, `limits: org "acme": budget 2.00 per "week": want per day or per month`},
	{"limits {\non_store_error maybe\n}", `"limits":{"on_store_error":"maybe"}`, `limits: on_store_error "maybe": want local, allow or deny`},
	{"limits {\nstore_timeout -1s\n}", `"limits":{"store_timeout":"-1s"}`, "limits: store_timeout -1s: must not be negative"},
	{"limits {\nlocal_allowance 60%\n}", `"limits":{"local_allowance":{"share":0.6}}`, "limits: local_allowance share 60%: want more than 0% and at most 50%"},
	{"limits {\nlocal_allowance -2%\n}", `"limits":{"local_allowance":{"share":-0.02}}`, "limits: local_allowance share -2%: want more than 0% and at most 50%"},
	{"limits {\nlocal_allowance 2% 11s\n}", `"limits":{"local_allowance":{"share":0.02,"interval":"11s"}}`, "limits: local_allowance interval 11s: want 1ms to 10s"},

	// guardrails
	{"guardrails {\napi_key k\n}", `"guardrails":{"api_key":"k"}`, "guardrails: url is required"},
	{"guardrails ftp://g {\napi_key k\n}", `"guardrails":{"url":"ftp://g","api_key":"k"}`, `guardrails: url "ftp://g": must be http:// or https:// with a host`},
	{"guardrails http://g", `"guardrails":{"url":"http://g"}`, "guardrails: api_key is required"},
	{"guardrails http://g {\napi_key k\ntimeout -1s\n}", `"guardrails":{"url":"http://g","api_key":"k","timeout":"-1s"}`, "guardrails: timeout -1s: must be positive"},
	{"guardrails http://g {\napi_key k\ncache -1s\n}", `"guardrails":{"url":"http://g","api_key":"k","cache":"-1s"}`, "guardrails: cache -1s: must not be negative"},
	{"guardrails http://g {\napi_key k\nblock extreme\n}", `"guardrails":{"url":"http://g","api_key":"k","block":["extreme"]}`, `guardrails: block "extreme": must be one of none low medium high`},
	{"guardrails http://g {\napi_key k\nreview 高风险\n}", `"guardrails":{"url":"http://g","api_key":"k","review":["高风险"]}`, `guardrails: review "高风险": must be one of none low medium high`},
	{"guardrails http://g {\napi_key k\nblock high\nreview high\n}", `"guardrails":{"url":"http://g","api_key":"k","block":["high"],"review":["high"]}`, `guardrails: risk level "high" is in both block and review`},
	{"guardrails http://g {\napi_key k\nblock_category spam\n}", `"guardrails":{"url":"http://g","api_key":"k","block_category":["spam"]}`, `guardrails: block_category "spam": must be one of political_sensitive national_image violent_crime prompt_attack political_general minor_harm illegal_crime pornography discrimination abuse privacy commercial_violation other`},
	{"guardrails http://g {\napi_key k\non_error maybe\n}", `"guardrails":{"url":"http://g","api_key":"k","on_error":"maybe"}`, `guardrails: on_error "maybe": must be block or allow`},
	{"guardrails http://g {\napi_key k\nmode fast\n}", `"guardrails":{"url":"http://g","api_key":"k","mode":"fast"}`, `guardrails: mode "fast": must be sequential or parallel`},

	// breaker (failures and half_open: every uint32 but 0 is valid, and 0
	// is the default in JSON)
	{"breaker {\nopen_for -1s\n}", `"breaker":{"open_for":"-1s"}`, "breaker: open_for -1s: want a positive duration"},

	// cache
	{"cache {\nttl -1s\n}", `"cache":{"ttl":"-1s"}`, "cache: ttl -1s: must be a positive duration"},
	{"cache {\nmax_entries -1\n}", `"cache":{"max_entries":-1}`, "cache: max_entries -1: must be from 1 to 10000000"},
	{"cache {\nmax_entries 10000001\n}", `"cache":{"max_entries":10000001}`, "cache: max_entries 10000001: must be from 1 to 10000000"},
	{"cache {\nmax_size 9MiB\n}", `"cache":{"max_size":9437184}`, "cache: max_size 9437184: must be from 1 byte to 8MiB (8388608 bytes)"},

	// route
	{"route {\npin v1 {\nnoul 0.8\n}\npin v1 {\nnoul 0.9\n}\n}", `"route":{"pins":[{"version":"v1","noul":0.8},{"version":"v1","noul":0.9}]}`, `route: pin "v1": version pinned twice`},
	{"route {\npin v1 {\nnoul 1.5\n}\n}", `"route":{"pins":[{"version":"v1","noul":1.5}]}`, `route: pin "v1": noul threshold 1.5 is outside 0..1`},
	{"route {\npin v1 {\nquestion q -0.5\n}\n}", `"route":{"pins":[{"version":"v1","questions":{"q":-0.5}}]}`, `route: pin "v1": question "q" threshold -0.5 is outside 0..1`},
	{"route {\npin v1 {\nchoice 0.9 cert 0123456789ABCDEF\n}\n}", `"route":{"pins":[{"version":"v1","choice":0.9,"choice_cert":"0123456789ABCDEF"}]}`, `route: pin "v1": choice cert "0123456789ABCDEF": a certificate id is 16 lowercase hex digits`},
	{"route {\npin v1 {\norg acme {\nrate 0.9\n}\n}\n}", `"route":{"pins":[{"version":"v1","orgs":[{"org":"acme","lines":[{"type":"rate","threshold":0.9}]}]}]}`, `route: pin "v1": org "acme": unknown question type "rate": want one of [noul choice score]`},
	{"route {\npin v1 {\norg acme {\nnoul 0.9\nnoul human\n}\n}\n}", `"route":{"pins":[{"version":"v1","orgs":[{"org":"acme","lines":[{"type":"noul","threshold":0.9},{"type":"noul","human":true}]}]}]}`, `route: pin "v1": org "acme": noul given twice`},
	{"route {\npin v1 {\norg acme {\nscore human cert 0123456789abcdef\n}\n}\n}", `"route":{"pins":[{"version":"v1","orgs":[{"org":"acme","lines":[{"type":"score","human":true,"cert":"0123456789abcdef"}]}]}]}`, `route: pin "v1": org "acme": score human takes no cert: nothing routes auto under it`},
	{"route {\npin v1 {\nnoul -0\n}\n}", `"route":{"pins":[{"version":"v1","noul":-0}]}`, `route: pin "v1": noul threshold -0 is negative: a threshold is in 0..1`},
	{"route {\npin v1 {\norg acme\n}\n}", `"route":{"pins":[{"version":"v1","orgs":[{"org":"acme"}]}]}`, `route: pin "v1": org "acme": no lines: give a type a threshold or human, or leave the org out`},
	{"route {\nunpinned maybe\n}", `"route":{"unpinned":"maybe"}`, `route: unpinned must be "human" or "auto", not "maybe"`},
	{"route {\norg_fallback maybe\n}", `"route":{"org_fallback":"maybe"}`, `route: org_fallback must be "pooled" or "human", not "maybe"`},
	{"route {\non_alarm page\n}", `"route":{"on_alarm":"page"}`, `route: on_alarm must be "alert" or "human", not "page"`},
	{"route {\non_alarm human\n}", `"route":{"on_alarm":"human"}`, "route: on_alarm human needs a queue: the review handler keeps the alarms of the queue's stream"},
	{"route {\nqueue s maxlen -5\n}", `"route":{"queue":{"stream":"s","maxlen":-5}}`, `route: queue "s": negative maxlen -5`},
	{"route {\naudit 0.1\n}", `"route":{"audit":0.1}`, "route: audit needs a queue to write the drawn entries to"},
	{"route {\nqueue s\naudit 1.5\n}", `"route":{"queue":{"stream":"s"},"audit":1.5}`, "route: audit 1.5 is outside 0..1"},
	{"route {\nqueue s\naudit active 1.5\n}", `"route":{"queue":{"stream":"s"},"active_audit":{"max_share":1.5}}`, "route: audit active: share 1.5 is not in (0, 1]"},
	{"route {\nqueue s\naudit active 0.1 floor 0.2\n}", `"route":{"queue":{"stream":"s"},"active_audit":{"max_share":0.1,"floor":0.2}}`, "route: audit active: floor 0.2 is not in (0, 0.1] (the share)"},
	{"route {\nqueue s\naudit active 0.1 from 1.2\n}", `"route":{"queue":{"stream":"s"},"active_audit":{"max_share":0.1,"from":1.2}}`, "route: audit active: from 1.2 is outside 0..1"},
	{"route {\ninclude_content\n}", `"route":{"include_content":true}`, "route: include_content needs a queue"},
	{"route {\nqueue s\ninclude_content\nmax_content 512\n}", `"route":{"queue":{"stream":"s"},"include_content":true,"max_content":512}`, "route: max_content 512 bytes: must be at least 1KiB (1024 bytes)"},
	{"route {\nqueue s\nmax_content 1MiB\n}", `"route":{"queue":{"stream":"s"},"max_content":1048576}`, "route: max_content needs include_content: without it no content is stored"},
}

// adapterPrefix is what the Caddyfile adapter puts before a directive's
// error.
const adapterPrefix = "parsing caddyfile tokens for 'systemone': "

// A value is checked by one rule with one wording: the Caddyfile's error
// for an invalid value is the JSON config's, with only the file and line
// added. A check the parser made again, in words of its own or with a
// bound of its own, fails here.
func TestOneRuleOneWording(t *testing.T) {
	at := regexp.MustCompile(`^, at Caddyfile:\d+$`)
	for _, r := range oneRules {
		t.Run(strings.ReplaceAll(r.caddyfile, "\n", " "), func(t *testing.T) {
			text := fmt.Sprintf(":8080 {\n\tsystemone {\n%s\n\t}\n\treverse_proxy 127.0.0.1:9080\n}\n", r.caddyfile)
			adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
			_, _, err := adapter.Adapt([]byte(text), map[string]any{"filename": "Caddyfile"})
			if err == nil {
				t.Fatalf("the Caddyfile is accepted; want %q", r.want)
			}
			msg, ok := strings.CutPrefix(err.Error(), adapterPrefix)
			if rest, found := strings.CutPrefix(msg, r.want); !ok || !found || !at.MatchString(rest) {
				t.Errorf("Caddyfile:\n got: %v\nwant: %s%s, at Caddyfile:<line>", err, adapterPrefix, r.want)
			}

			cfg := `{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"systemone",` + r.json + `}]}]}}}}}`
			err = caddy.Validate(mustConfig([]byte(cfg)))
			if err == nil || !strings.HasSuffix(err.Error(), ": "+r.want) {
				t.Errorf("JSON:\n got: %v\nwant: ...: %s", err, r.want)
			}
		})
	}
}

// What needs the systemone block's redis is known when the handler is
// provisioned: a Caddyfile and a JSON config get the one error there, and
// on_alarm human (which needs a queue) gets the queue's.
func TestOneRuleNeedsRedis(t *testing.T) {
	const want = `route: queue "s" needs the systemone block's redis`
	for _, route := range []string{"queue s", "queue s\non_alarm human"} {
		text := ":8080 {\n\tsystemone {\n\t\troute {\n" + route + "\n\t\t}\n\t}\n\treverse_proxy 127.0.0.1:9080\n}\n"
		if err := adaptAndProvision(text); err == nil || !strings.HasSuffix(err.Error(), ": "+want) {
			t.Errorf("Caddyfile route { %s }: %v, want ...: %s", route, err, want)
		}
	}
	for _, route := range []string{`{"queue":{"stream":"s"}}`, `{"queue":{"stream":"s"},"on_alarm":"human"}`} {
		cfg := `{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"systemone","route":` + route + `}]}]}}}}}`
		if err := caddy.Validate(mustConfig([]byte(cfg))); err == nil || !strings.HasSuffix(err.Error(), ": "+want) {
			t.Errorf("JSON route %s: %v, want ...: %s", route, err, want)
		}
	}
}
