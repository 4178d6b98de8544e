package caddyfile_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// TestKeyPrefixOneRule: the gateway and systemone_review refuse the same
// key prefixes with the same message (package keyprefix), and accept the
// same ones. The gateway refuses when the Caddyfile is adapted, the review
// handler when it is provisioned (its prefix may hold placeholders).
func TestKeyPrefixOneRule(t *testing.T) {
	t.Setenv("SYSTEMONE_TEST_PREFIX", "gw{eu}:")
	for prefix, want := range map[string]string{
		`"a\\{b\\}:"`:                  `key_prefix "a\\{b\\}:": must not contain { or }: the keys carry their own Redis Cluster hash tag`,
		`"}x"`:                         `key_prefix "}x": must not contain { or }: the keys carry their own Redis Cluster hash tag`,
		`{env.SYSTEMONE_TEST_PREFIX}`:  `key_prefix "gw{eu}:": must not contain { or }: the keys carry their own Redis Cluster hash tag`,
		`"gw:eu-1:"`:                   "",
		`{env.SYSTEMONE_TEST_NOTHING}`: "",
	} {
		gateway := ":8080 {\n\tsystemone {\n\t\tkey_prefix " + prefix + "\n\t}\n\trespond ok\n}\n"
		review := ":8080 {\n\tsystemone_review {\n\t\tredis redis://127.0.0.1:1\n\t\tstream review\n\t\tkey_prefix " + prefix + "\n\t}\n}\n"
		for name, input := range map[string]string{"systemone": gateway, "systemone_review": review} {
			err := adaptAndProvision(input)
			switch {
			case want == "" && err != nil && strings.Contains(err.Error(), "key_prefix"):
				t.Errorf("%s key_prefix %s: refused: %v", name, prefix, err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("%s key_prefix %s: err = %v, want %q", name, prefix, err, want)
			}
		}
	}
}

// adaptAndProvision adapts a Caddyfile and provisions its config without
// starting it (nothing listens; Redis is not dialled before first use).
func adaptAndProvision(input string) error {
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	out, _, err := adapter.Adapt([]byte(input), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return err
	}
	return caddy.Validate(mustConfig(out))
}

func mustConfig(adapted []byte) *caddy.Config {
	cfg := new(caddy.Config)
	if err := json.Unmarshal(adapted, cfg); err != nil {
		panic(err) // the adapter's own output
	}
	return cfg
}
