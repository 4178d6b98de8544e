package keyprefix

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

func TestCheck(t *testing.T) {
	for prefix, ok := range map[string]bool{
		"systemone:": true, "": true, "gw:eu-1:": true, "a b:": true,
		"a{b}:": false, "a{": false, "}": false, "a{}:": false, "{}": false, "}{x}": false,
	} {
		err := Check(prefix)
		if (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok %v", prefix, err, ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "key_prefix ") {
			t.Errorf("Check(%q): %q does not name key_prefix", prefix, err)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Setenv("SYSTEMONE_TEST_PREFIX", "gw:")
	t.Setenv("SYSTEMONE_TEST_BRACED", "gw{1}:")
	repl := caddy.NewReplacer()
	for _, tc := range []struct{ written, want, err string }{
		{"", Default, ""},
		{"x:", "x:", ""},
		{"{env.SYSTEMONE_TEST_PREFIX}", "gw:", ""},
		{"{env.SYSTEMONE_TEST_UNSET_NAME}", Default, ""},
		{"{env.SYSTEMONE_TEST_BRACED}", "gw{1}:", `key_prefix "gw{1}:": must not contain { or }`},
	} {
		got, err := Resolve(repl, tc.written)
		if got != tc.want {
			t.Errorf("Resolve(%q) = %q, want %q", tc.written, got, tc.want)
		}
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)) {
			t.Errorf("Resolve(%q) err = %v, want %q", tc.written, err, tc.err)
		}
	}
}
