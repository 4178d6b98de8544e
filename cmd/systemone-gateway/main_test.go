package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

// bin is the built binary, shared by the tests.
var bin string

func TestMain(m *testing.M) {
	var dir string
	var err error
	if bin, dir, err = gatewaytest.BuildBinary("."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the binary with args and returns its standard output, standard
// error and exit status.
func run(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "SYSTEMONE_API_KEY=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		status = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), status
}

// The review loop's commands name this binary and point to the product's
// docs, not to Caddy's.
func TestHelp(t *testing.T) {
	for cmd, docs := range map[string]string{
		"calibrate": "docs/calibration.md",
		"verify":    "docs/calibration.md",
		"replay":    "docs/calibration.md, \"replay: a new version calibrated before it serves\"",
	} {
		stdout, stderr, status := run(t, cmd, "-h")
		if status != 0 || stderr != "" || !strings.Contains(stdout, "Usage:\n  systemone-gateway "+cmd+" ") ||
			!strings.Contains(stdout, "Documentation: "+docs) || strings.Contains(stdout, "caddyserver.com") || strings.Contains(stdout, "caddy "+cmd) {
			t.Errorf("%s -h: status %d, stderr %q, help:\n%s", cmd, status, stderr, stdout)
		}
	}
	stdout, _, _ := run(t, "-h")
	if !strings.Contains(stdout, "systemone-gateway is an edge gateway") || !strings.Contains(stdout, "systemone-gateway calibrate") {
		t.Errorf("the root help does not describe the product:\n%s", stdout)
	}
}

// Errors are one plain line on standard error (never a JSON log entry),
// with exit status 2 for a wrong command line and 1 for a failure.
func TestErrors(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"calibrate", "--target", "2", "labels.ndjson"}, 2, "systemone-gateway calibrate: --target 2 is not between 0 and 1 (both excluded) (see systemone-gateway calibrate -h)"},
		{[]string{"calibrate", "--target", "0.9", "--delta", "0", "labels.ndjson"}, 2, "systemone-gateway calibrate: --delta 0 is not between 0 and 1"},
		{[]string{"calibrate", "--target", "high", "labels.ndjson"}, 2, `systemone-gateway calibrate: invalid argument "high" for "--target" flag`},
		{[]string{"calibrate", "--target", "0.9"}, 2, "systemone-gateway calibrate: want one <labels> argument"},
		{[]string{"calibrate", "--target", "0.9", "--since", "tuesday", "labels.ndjson"}, 2, `systemone-gateway calibrate: --since "tuesday" is neither an RFC 3339 time such as 2026-01-02T15:04:05Z nor an entry id such as 1764000000000-0`},
		{[]string{"calibrate", "--target", "0.9", "missing.ndjson"}, 1, "systemone-gateway calibrate: open missing.ndjson: no such file or directory"},
		{[]string{"verify", "labels.ndjson"}, 2, "systemone-gateway verify: --certificates is required"},
		{[]string{"replay", "--review", "http://127.0.0.1:1/review"}, 2, "systemone-gateway replay: missing --upstream, --model, SYSTEMONE_API_KEY"},
		{[]string{"replay", "--concurrency", "0"}, 2, "systemone-gateway replay: --concurrency 0 is less than 1"},
	} {
		stdout, stderr, status := run(t, tt.args...)
		if status != tt.status || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, tt.want) {
			t.Errorf("%s: status %d, stdout %q, stderr %q; want status %d and one line %q", strings.Join(tt.args, " "), status, stdout, stderr, tt.status, tt.want)
		}
	}
}
