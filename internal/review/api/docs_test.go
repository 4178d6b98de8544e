package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/simulator"
)

// fenced returns the fenced blocks of docs/review.md in language lang.
func fenced(t *testing.T, lang string) []string {
	t.Helper()
	raw, err := os.ReadFile("../../../docs/review.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("no %s block in docs/review.md", lang)
	}
	return out
}

// runCaddyCommand runs one of the binary's subcommands as Caddy's CLI sets
// it up and returns its standard output (hash-password writes to
// os.Stdout itself, so that is where it is read).
func runCaddyCommand(t *testing.T, args []string) string {
	t.Helper()
	c, ok := caddycmd.Commands()[args[0]]
	if !ok {
		t.Fatalf("no command %q", args[0])
	}
	cmd := &cobra.Command{Use: c.Name, SilenceUsage: true, SilenceErrors: true}
	c.CobraFunc(cmd)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	var errb bytes.Buffer
	cmd.SetArgs(args[1:])
	cmd.SetOut(w)
	cmd.SetErr(&errb)
	err = cmd.Execute()
	os.Stdout = stdout
	_ = w.Close()
	out, _ := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	return string(out)
}

// shellWords splits a documented command line: words, single quotes.
func shellWords(line string) []string {
	var words []string
	for _, m := range regexp.MustCompile(`'[^']*'|\S+`).FindAllString(line, -1) {
		words = append(words, strings.Trim(m, "'"))
	}
	return words
}

// The documentation's config, commands and requests, run: the password
// hash command makes the basic_auth hash; the Caddyfile (its port and
// environment adapted) serves the gateway and the review API behind
// basic_auth; each documented request answers 200 with the documented
// credentials and 401 without. (The load test's commands run, shortened,
// in .ci/run.)
func TestDocsReview(t *testing.T) {
	var hash string
	for _, line := range strings.Split(strings.TrimSpace(fenced(t, "sh")[0]), "\n") {
		words := shellWords(line)
		if words[0] != "systemone-gateway" {
			t.Fatalf("unexpected command %q", line)
		}
		hash = strings.TrimSpace(runCaddyCommand(t, words[1:]))
	}
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte("secret")) != nil {
		t.Fatalf("hash-password gave %q, not a bcrypt hash of the documented password", hash)
	}

	rs := redistest.Start(t)
	zero := int64(0)
	h, err := simulator.New(simulator.Handler{RequestsPerMinute: &zero, TokensPerSecond: &zero})
	if err != nil {
		t.Fatal(err)
	}
	sim := gatewaytest.NewUpstream(t, h)
	t.Setenv("REVIEW_PASSWORD_HASH", hash)
	t.Setenv("REDIS_URL", rs.URL())
	t.Setenv("UPSTREAM", sim.Addr())
	port := gatewaytest.FreePort(t)
	config := fenced(t, "caddyfile")[0]
	if !strings.HasPrefix(config, ":8080 {") {
		t.Fatalf("the documented config no longer starts with :8080: %.40q", config)
	}
	gatewaytest.Load(t, fmt.Sprintf(":%d", port)+strings.TrimPrefix(config, ":8080"))
	s := &stack{url: fmt.Sprintf("http://127.0.0.1:%d", port), redis: rs}

	// An entry to find: routed human, queued with its content.
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/systemone", strings.NewReader(evalBody("docs")))
	req.Header.Set("Authorization", "Bearer docs-key")
	req.Header.Set("X-Simulator-Confidence", `{"n":0.3,"c":0.3,"s":0.3}`)
	if resp, body := do(t, req); resp.StatusCode != 200 {
		t.Fatalf("evaluation: %d %s", resp.StatusCode, body)
	}

	requests := strings.Split(strings.TrimSpace(fenced(t, "http")[0]), "\n")
	for _, line := range requests {
		method, path, _ := strings.Cut(line, " ")
		req, _ := http.NewRequest(method, s.url+path, nil)
		if resp, _ := do(t, req); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", line, resp.StatusCode)
		}
		req.SetBasicAuth("ann", "secret")
		resp, body := do(t, req)
		if resp.StatusCode != 200 || !json.Valid(body) {
			t.Errorf("%s: %d %s", line, resp.StatusCode, body)
		}
	}
	// The first request finds the entry once it is queued (audit 0.05 may
	// or may not have drawn it; the second finds it either way).
	req, _ = http.NewRequest(http.MethodGet, s.url+strings.TrimPrefix(requests[1], "GET "), nil)
	req.SetBasicAuth("ann", "secret")
	var p page
	wait.Until(t, "the queued entry", func() bool { // the queue writes in the background
		_, body := do(t, req)
		return json.Unmarshal(body, &p) == nil && len(p.Items) == 1
	})
	if p.Items[0].Request == nil {
		t.Errorf("the queued entry with its content: %+v", p)
	}
}
