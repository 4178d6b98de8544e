package reviewloop_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/pinblock"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/certificate"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// TestWalkthrough runs docs/walkthrough.md as printed, against the example
// Caddyfile, with the real binaries it builds and a real redis-server: the
// doc's sh blocks in order, with the example's ports (:8080 gateway,
// :9080 simulator, :2019 admin, :9180 metrics) moved to free ones, and the Redis of
// internal/redistest in place of the doc's `redis-server` line. Pasting a
// printed pin is done as the doc says: into the route block, then the doc's
// reload command.
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := shBlocks(t, filepath.Join(root, "docs/walkthrough.md"))
	wantStarts := []string{"go build", "redis-server", "./systemone-gateway run", "for i", "curl", "./reviewer",
		"curl", "./systemone-gateway calibrate", "./systemone-gateway reload", "for i",
		"./systemone-gateway calibrate --target 0.9 --by org --certificates certs.jsonl", "./systemone-gateway reload", "for i",
		"export SYSTEMONE_API_KEY", "./systemone-gateway reload", "./reviewer", "curl", "for i", "curl",
		"./systemone-gateway verify --certificates certs.jsonl", "redis-cli"}
	if len(blocks) != len(wantStarts) {
		t.Fatalf("docs/walkthrough.md has %d sh blocks, the test knows %d:\n%s", len(blocks), len(wantStarts), strings.Join(blocks, "\n---\n"))
	}
	for i, b := range blocks {
		if !strings.HasPrefix(b, wantStarts[i]) {
			t.Fatalf("sh block %d starts %q, the test expects %q", i, b, wantStarts[i])
		}
	}

	gw, sim, admin := gatewaytest.FreePort(t), gatewaytest.FreePort(t), gatewaytest.FreePort(t)
	ports := strings.NewReplacer(":8080", fmt.Sprintf(":%d", gw), ":9080", fmt.Sprintf(":%d", sim), ":2019", fmt.Sprintf(":%d", admin),
		":9180", fmt.Sprintf(":%d", gatewaytest.FreePort(t)))
	work := t.TempDir()
	caddyfile := filepath.Join(work, "deploy/examples/review-loop/Caddyfile")
	example, err := os.ReadFile(filepath.Join(root, "deploy/examples/review-loop/Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, caddyfile, ports.Replace(string(example)))
	orgKeys, err := os.ReadFile(filepath.Join(root, "deploy/examples/review-loop/org-keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(work, "deploy/examples/review-loop/org-keys.json"), string(orgKeys))

	rs := redistest.Start(t)
	if !strings.Contains(blocks[1], "export REDIS_URL=") {
		t.Fatalf("the Redis block sets no REDIS_URL: %s", blocks[1])
	}
	env := append(os.Environ(), "REDIS_URL="+rs.URL())
	shell := func(dir, block string) string {
		t.Helper()
		cmd := exec.Command("sh", "-ec", ports.Replace(block))
		cmd.Dir, cmd.Env = dir, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s\n%s", block, err, out.String(), errb.String())
		}
		return out.String()
	}

	// 1. Build (into the work directory), then start the gateway.
	start := time.Now()
	shell(root, strings.ReplaceAll(blocks[0], "-o ", "-o "+work+"/"))
	t.Logf("built in %v", time.Since(start))
	var logs bytes.Buffer
	run := exec.Command("sh", "-c", "exec "+ports.Replace(blocks[2]))
	run.Dir, run.Env, run.Stdout, run.Stderr = work, env, &logs, &logs
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-run.Process.Pid, syscall.SIGTERM)
		run.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	waitListening(t, fmt.Sprintf("127.0.0.1:%d", gw))

	// 2. Traffic: every answer routes human and is audited.
	shell(work, blocks[3])
	var page struct {
		Items []struct {
			ID     string `json:"id"`
			Audit  bool   `json:"audit"`
			Reason string `json:"reason"`
		} `json:"items"`
	}
	getJSON(t, shell, fmt.Sprintf("curl -s -u ann:secret 'http://localhost:%d/review/items?limit=500'", gw), &page)
	audited := 0
	for _, it := range page.Items {
		if it.Reason != "unpinned_version" {
			t.Fatalf("item %s routed for %q before any pin", it.ID, it.Reason)
		}
		if it.Audit {
			audited++
		}
	}
	if len(page.Items) != 400 || audited != 400 {
		t.Fatalf("%d items queued, %d audited: want 400, all audited", len(page.Items), audited)
	}

	// 3. The next item is audited; the reviewer labels every audited one.
	var next struct {
		Items []struct {
			Audit   bool            `json:"audit"`
			Request json.RawMessage `json:"request"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(shell(work, blocks[4])), &next); err != nil || len(next.Items) != 1 || !next.Items[0].Audit || len(next.Items[0].Request) == 0 {
		t.Fatalf("the next item: %+v %v", next, err)
	}
	if out := shell(work, blocks[5]); out != fmt.Sprintf("labelled %d items\n", audited) {
		t.Fatalf("reviewer printed %q, want %d items labelled", out, audited)
	}

	// 4. Progress: service-1.0.0's yes/no group has a threshold.
	var progress struct {
		Groups []struct {
			Model, Type  string
			Labels       int
			Threshold    *float64
			LabelsNeeded int `json:"labels_needed"`
		}
	}
	getJSON(t, shell, blocks[6], &progress)
	if len(progress.Groups) != 1 || progress.Groups[0].Model != "service-1.0.0" || progress.Groups[0].Labels != 3*audited ||
		progress.Groups[0].Threshold == nil || progress.Groups[0].LabelsNeeded != 0 {
		t.Fatalf("progress: %+v", progress)
	}

	// 5. Calibrate, paste the pin, reload: some answers now route auto.
	out := shell(work, blocks[7])
	pin1 := pinblock.Find(t, out, "service-1.0.0")
	if t1 := pinblock.Noul(t, pin1); t1 != *progress.Groups[0].Threshold {
		t.Errorf("calibrate's threshold %v, /progress said %v", t1, *progress.Groups[0].Threshold)
	}
	paste(t, caddyfile, pin1)
	shell(work, blocks[8])
	waitFor(t, "answers routing auto after the reload", func() bool {
		return routeCount(shell(work, blocks[9]), "X-Route: auto") > 0
	})

	// 6. --by org: shop, the key's org, gets its own line with a
	// certificate; it replaces the pooled pin, and the answers it routes
	// auto carry the certificate's id.
	out = shell(work, blocks[10])
	orgPin := pinblock.Find(t, out, "service-1.0.0")
	certs := readCertificates(t, filepath.Join(work, "certs.jsonl"))
	if len(certs) != 1 || certs[0].Org != "shop" || certs[0].Model != "service-1.0.0" || certs[0].Type != "noul" || certs[0].Threshold != *progress.Groups[0].Threshold {
		t.Fatalf("certs.jsonl: %+v, want one certificate for shop's noul threshold %v", certs, *progress.Groups[0].Threshold)
	}
	wantLine := fmt.Sprintf("\t\torg shop {\n\t\t\tnoul %s cert %s\n\t\t}", calibrate.FormatThreshold(certs[0].Threshold), certs[0].ID)
	if !strings.Contains(orgPin, wantLine) {
		t.Fatalf("the --by org pin\n%s\nhas no line\n%s", orgPin, wantLine)
	}
	replacePin(t, caddyfile, pin1, orgPin)
	shell(work, blocks[11])
	waitFor(t, "answers routing auto with the certificate", func() bool {
		out := shell(work, blocks[12])
		auto := routeCount(out, "X-Route: auto")
		return auto > 0 && routeCount(out, "X-Route-Certificate: late="+certs[0].ID) == auto
	})

	// 7. Replay to service-2.0.0 and calibrate it: a higher threshold.
	out = shell(work, blocks[13])
	pin2 := pinblock.Find(t, out, "service-2.0.0")
	if !(pinblock.Noul(t, pin2) > pinblock.Noul(t, pin1)) {
		t.Errorf("service-2.0.0's pin\n%s\nis not above service-1.0.0's\n%s", pin2, pin1)
	}
	paste(t, caddyfile, pin2)
	shell(work, blocks[14])

	// 8. Traffic again, labels that disagree: the alarm, answers route
	// human for guarantee_alarm within 10 seconds; the reset ends it.
	shell(work, blocks[3])
	if out := shell(work, blocks[15]); !regexp.MustCompile(`^labelled [1-9][0-9]* items\n$`).MatchString(out) {
		t.Fatalf("reviewer -disagree printed %q", out)
	}
	type guarantee struct {
		Groups []struct {
			Model, Type string
			Labels      int
			Alarm       bool
		}
	}
	var g guarantee
	getJSON(t, shell, blocks[16], &g)
	if len(g.Groups) != 1 || g.Groups[0].Model != "service-1.0.0" || g.Groups[0].Type != "noul" || !g.Groups[0].Alarm {
		t.Fatalf("guarantee after the disagreeing labels: %+v", g)
	}
	waitFor(t, "every answer routed human for guarantee_alarm", func() bool {
		out := shell(work, blocks[17])
		return routeCount(out, "X-Route: human") == 20 && routeCount(out, "X-Route-Reason: guarantee_alarm") == 20
	})
	shell(work, blocks[18])
	getJSON(t, shell, blocks[16], &g)
	if len(g.Groups) != 1 || g.Groups[0].Alarm || g.Groups[0].Labels != 0 {
		t.Fatalf("guarantee after the reset: %+v", g)
	}
	waitFor(t, "answers routing auto again after the reset", func() bool {
		out := shell(work, blocks[17])
		return routeCount(out, "X-Route: auto") > 0 && routeCount(out, "X-Route-Reason: guarantee_alarm") == 0
	})

	// 9. The certificate still verifies: the disagreeing labels of step 8
	// were stored after it.
	if out := shell(work, blocks[19]); out != "ok "+certs[0].ID+"\n" {
		t.Fatalf("verify printed %q, want ok %s", out, certs[0].ID)
	}
	if !strings.HasPrefix(blocks[20], "redis-cli -p 6380 shutdown") {
		t.Errorf("the clean-up block stops another Redis than the set-up's: %s", blocks[20])
	}
	t.Logf("walk-through done in %v", time.Since(start))
}

// shBlocks returns the ```sh blocks of a markdown file, in order. They are
// tagged illustrative, so that docs/docs_test.go (which runs the docs'
// commands against a gateway of its own) leaves them to this test.
func shBlocks(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh illustrative\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

func getJSON(t *testing.T, shell func(dir, block string) string, block string, v any) {
	t.Helper()
	out := shell("", block)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s: %v\n%s", block, err, out)
	}
}

// routeCount reads a count of `sort | uniq -c`'s output.
func routeCount(out, line string) int {
	m := regexp.MustCompile(`(?mi)^\s*(\d+) ` + regexp.QuoteMeta(line) + `$`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// replacePin replaces a pin block pasted before with another, as the doc
// says.
func replacePin(t *testing.T, path, old, pin string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if strings.Count(text, old) != 1 {
		t.Fatalf("no single\n%s\nin %s", old, text)
	}
	writeFile(t, path, strings.Replace(text, old, pin, 1))
}

// readCertificates reads a --certificates file.
func readCertificates(t *testing.T, path string) []certificate.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var certs []certificate.Certificate
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var c certificate.Certificate
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, data)
		}
		certs = append(certs, c)
	}
	return certs
}

// paste puts a pin block into the Caddyfile's route block, as the doc says.
func paste(t *testing.T, path, pin string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if strings.Count(text, "route {\n") != 1 {
		t.Fatalf("no single route block in %s", text)
	}
	writeFile(t, path, strings.Replace(text, "route {\n", "route {\n"+pin+"\n", 1))
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// errNotYet is a waitFor condition that does not hold yet.
var errNotYet = errors.New("not yet")

// waitFor polls cond for up to the contract's 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Within(t, 10*time.Second, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	wait.Within(t, 30*time.Second, "the gateway listening on "+addr, func() error {
		if out, err := exec.Command("curl", "-s", "-o", "/dev/null", "http://"+addr+"/").CombinedOutput(); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
		return nil
	})
}
