package caddyfile_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestOperationsDocs adapts and provisions (without starting) every
// Caddyfile in docs/operations.md, and checks the error texts it quotes
// against the ones the gateway gives. A log file the page names is opened
// in a temporary directory instead, so that provisioning the log writer
// creates nothing outside the test.
func TestOperationsDocs(t *testing.T) {
	data, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	blocks := regexp.MustCompile("(?s)```caddyfile\n(.*?)```").FindAllStringSubmatch(doc, -1)
	if len(blocks) < 2 {
		t.Fatalf("%d caddyfile blocks in docs/operations.md, want the log writer's and the shared key_prefix's", len(blocks))
	}
	logFile := regexp.MustCompile(`output file \S+`)
	inTemp := "output file " + filepath.Join(t.TempDir(), "gateway.log")
	for _, b := range blocks {
		config := logFile.ReplaceAllLiteralString(b[1], inTemp)
		if err := adaptAndProvision(config); err != nil {
			t.Errorf("a Caddyfile of docs/operations.md: %v\n%s", err, b[1])
		}
	}

	// The quoted errors.
	t.Setenv("KEY_PREFIX", "gw{eu}:")
	err = adaptAndProvision(":8080 {\n\tsystemone {\n\t\tkey_prefix {env.KEY_PREFIX}\n\t}\n}\n")
	if err == nil || !strings.Contains(doc, "\n"+err.Error()[strings.Index(err.Error(), "key_prefix \"gw"):strings.LastIndex(err.Error(), ", at ")]+"\n") {
		t.Errorf("the key_prefix error %v is not quoted in docs/operations.md", err)
	}
	err = adaptAndProvision(":8080 {\n\tsystemone {\n\t\tbreaker {\n\t\t\tfailures 0\n\t\t}\n\t}\n}\n")
	if err == nil || !strings.Contains(err.Error(), "failures must not be 0") || !strings.Contains(doc, "\n"+err.Error()[strings.Index(err.Error(), "failures must not be 0"):]+"\n") {
		t.Errorf("the breaker error %v is not quoted in docs/operations.md", err)
	}
	// The JSON config's error names the block once.
	const want = "breaker: open_for -1s: want a positive duration"
	err = caddy.Validate(mustConfig([]byte(`{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"systemone","breaker":{"open_for":"-1s"}}]}]}}}}}`)))
	if err == nil || !strings.HasSuffix(err.Error(), ": "+want) || strings.Contains(err.Error(), "breaker: breaker:") || !strings.Contains(doc, "`"+want+"`") {
		t.Errorf("a negative open_for in JSON: %v, want it to end in %q, as docs/operations.md says", err, want)
	}
}
