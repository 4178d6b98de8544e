package simulator

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name    string
		input   string
		want    Handler
		wantErr string
	}{
		{name: "bare", input: `systemone_simulator`},
		{name: "empty block", input: `systemone_simulator {
		}`},
		{name: "everything", input: `systemone_simulator {
			version     service-1.1.0
			latency     150ms
			overloaded  always
			keys        sk-a sk-b
			requests_per_minute 60
			tokens_per_second   0
			max_tokens          0
			max_question_tokens 100000
		}`, want: Handler{
			Version:           "service-1.1.0",
			Latency:           caddy.Duration(150 * time.Millisecond),
			Overloaded:        "always",
			Keys:              []string{"sk-a", "sk-b"},
			RequestsPerMinute: n(60),
			TokensPerSecond:   n(0),
			MaxTokens:         n(0),
			MaxQuestionTokens: n(100000),
		}},
		{name: "overloaded fraction", input: "systemone_simulator {\n overloaded 0.25\n}", want: Handler{Overloaded: "0.25"}},
		{name: "overloaded count", input: "systemone_simulator {\n overloaded 3\n}", want: Handler{Overloaded: "3"}},
		{name: "latency in days", input: "systemone_simulator {\n latency 1d\n}", want: Handler{Latency: caddy.Duration(24 * time.Hour)}},

		{name: "argument", input: `systemone_simulator service-1.0.0`, wantErr: "wrong argument count"},
		{name: "unknown", input: "systemone_simulator {\n speed 3\n}", wantErr: `unrecognized systemone_simulator subdirective "speed"`},
		{name: "duplicate", input: "systemone_simulator {\n version a\n version b\n}", wantErr: "duplicate subdirective version"},
		{name: "version missing", input: "systemone_simulator {\n version\n}", wantErr: "wrong argument count"},
		{name: "version twice on a line", input: "systemone_simulator {\n version a b\n}", wantErr: "wrong argument count"},
		{name: "bad latency", input: "systemone_simulator {\n latency soon\n}", wantErr: `latency "soon"`},
		{name: "negative latency", input: "systemone_simulator {\n latency -1s\n}", wantErr: "must not be negative"},
		{name: "bad overloaded", input: "systemone_simulator {\n overloaded sometimes\n}", wantErr: `overloaded "sometimes"`},
		{name: "overloaded fraction 1", input: "systemone_simulator {\n overloaded 1.0\n}", wantErr: `overloaded "1.0"`},
		{name: "overloaded negative", input: "systemone_simulator {\n overloaded -3\n}", wantErr: `overloaded "-3"`},
		{name: "no keys", input: "systemone_simulator {\n keys\n}", wantErr: "wrong argument count"},
		{name: "bad requests_per_minute", input: "systemone_simulator {\n requests_per_minute many\n}", wantErr: `requests_per_minute "many"`},
		{name: "negative tokens_per_second", input: "systemone_simulator {\n tokens_per_second -5\n}", wantErr: `tokens_per_second "-5"`},
		{name: "negative max_tokens", input: "systemone_simulator {\n max_tokens -1\n}", wantErr: `max_tokens "-1"`},
		{name: "nested block", input: "systemone_simulator {\n version {\n a\n }\n}", wantErr: "wrong argument count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Handler
			err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "Testfile:") {
					t.Errorf("error %q does not say where", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCaddyfileAdapt adapts a whole Caddyfile: the directive is registered,
// ordered after reverse_proxy without a global order line, and its JSON is
// what Provision reads.
func TestCaddyfileAdapt(t *testing.T) {
	const input = `:9080 {
	systemone_simulator {
		latency 2s
		keys sk-demo
	}
	reverse_proxy /elsewhere/* localhost:9999
}
`
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []json.RawMessage `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	var handlers []string
	var sim Handler
	for _, srv := range cfg.Apps.HTTP.Servers {
		for _, route := range srv.Routes {
			for _, raw := range route.Handle {
				var h struct {
					Handler string `json:"handler"`
				}
				_ = json.Unmarshal(raw, &h)
				handlers = append(handlers, h.Handler)
				if h.Handler == "systemone_simulator" {
					if err := json.Unmarshal(raw, &sim); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if got := strings.Join(handlers, ","); got != "reverse_proxy,systemone_simulator" {
		t.Errorf("handlers %s: want reverse_proxy then systemone_simulator\n%s", got, out)
	}
	if time.Duration(sim.Latency) != 2*time.Second || !reflect.DeepEqual(sim.Keys, []string{"sk-demo"}) {
		t.Errorf("adapted handler %+v", sim)
	}
}
