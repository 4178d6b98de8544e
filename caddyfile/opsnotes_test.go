package caddyfile_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestOperationsNotes adapts and provisions (without starting) every
// Caddyfile in docs/operations-notes.md, and checks the error texts it
// quotes against the ones the gateway gives.
func TestOperationsNotes(t *testing.T) {
	data, err := os.ReadFile("../docs/operations-notes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	blocks := regexp.MustCompile("(?s)```caddyfile\n(.*?)```").FindAllStringSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("no caddyfile blocks")
	}
	for _, b := range blocks {
		if err := adaptAndProvision(b[1]); err != nil {
			t.Errorf("a Caddyfile of docs/operations-notes.md: %v\n%s", err, b[1])
		}
	}

	// The quoted errors.
	t.Setenv("KEY_PREFIX", "gw{eu}:")
	err = adaptAndProvision(":8080 {\n\tsystemone {\n\t\tkey_prefix {env.KEY_PREFIX}\n\t}\n}\n")
	if err == nil || !strings.Contains(doc, "\n"+err.Error()[strings.Index(err.Error(), "key_prefix \"gw"):strings.LastIndex(err.Error(), ", at ")]+"\n") {
		t.Errorf("the key_prefix error %v is not quoted in the notes", err)
	}
	err = adaptAndProvision(":8080 {\n\tsystemone {\n\t\tbreaker {\n\t\t\tfailures 0\n\t\t}\n\t}\n}\n")
	if err == nil || !strings.Contains(doc, "\n"+err.Error()[strings.Index(err.Error(), "failures 0"):]+"\n") {
		t.Errorf("the breaker error %v is not quoted in the notes", err)
	}
	// The JSON config's error names the block once.
	const want = "breaker: open_for -1s: want a positive duration"
	err = caddy.Validate(mustConfig([]byte(`{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"systemone","breaker":{"open_for":"-1s"}}]}]}}}}}`)))
	if err == nil || !strings.HasSuffix(err.Error(), ": "+want) || strings.Contains(err.Error(), "breaker: breaker:") || !strings.Contains(doc, "`"+want+"`") {
		t.Errorf("a negative open_for in JSON: %v, want it to end in %q, as the notes say", err, want)
	}
}
