// Package docs holds the tests that keep the documentation true: every
// Caddyfile example adapts with the real adapter, every bad value in the
// configuration reference gets the error written beside it, the shell
// examples run against a gateway started as the README starts it, and every
// relative link and anchor resolves. The test reads README.md, BENCHMARKS.md
// and every *.md under docs/, so pages added later are checked too.
//
// A fenced block's info string says what the test does with it:
//
//	```caddyfile               a whole Caddyfile, adapted
//	```caddyfile in-site       the inside of a site block, adapted in one
//	```caddyfile in-systemone  the inside of a systemone directive, adapted in one
//	```caddyfile append        a whole Caddyfile, adapted, and appended to the root
//	                           Caddyfile for the shell examples' gateway
//	```caddyfile serve         a whole Caddyfile, adapted, and served by the next
//	                           `... run --config <file>` of the shell examples;
//	                           the repository holds <file> with the same text
//	```sh, ```console          commands (console: the lines after "$ ") run by the
//	                           test: curl against the gateway, promtool,
//	                           systemone-gateway subcommands; `bash <file>` is
//	                           syntax-checked; `... run [--config <file>]` starts
//	                           the gateway the next commands run against
//	```<lang> illustrative     shown, not run: it needs what a test cannot have
package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/systemone/systemone-gateway"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// commands returns the commands of a shell block: continuation lines
// joined, comments and blank lines left out; for console blocks only the
// lines after "$ ".
func commands(b block) []string {
	var out []string
	var cur string
	for _, line := range strings.Split(b.text, "\n") {
		if b.lang == "console" {
			if !strings.HasPrefix(line, "$ ") && cur == "" {
				continue
			}
			line = strings.TrimPrefix(line, "$ ")
		}
		t := strings.TrimSpace(line)
		if cur == "" && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		out = append(out, cur+t)
		cur = ""
	}
	return out
}

// The documented ports, replaced by free ones in the configs the test
// serves and the commands it runs; 6379, Redis's, by the test's
// redis-server.
var documentedPorts = []string{"8080", "9080", "2019", "9180"}

const gatewayCommand = "go run ./cmd/systemone-gateway"

// runCommand matches the command that starts the gateway: environment
// assignments, the command, and the config it names, if any.
var runCommand = regexp.MustCompile(`^((?:[A-Z_]+=\S+ )*)(?:go run \./cmd/systemone-gateway|systemone-gateway) run(?: --config (\S+))?$`)

// shell runs the shell examples: it builds the binary once, serves the
// configs the examples start, and runs their commands against them.
type shell struct {
	t     *testing.T
	dir   string
	bin   string
	ports *strings.Replacer
	stop  func() // the running gateway's
}

func newShell(t *testing.T) *shell {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "systemone-gateway")
	build := exec.Command("go", "build", "-o", bin, "./cmd/systemone-gateway")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pairs := []string{}
	for _, p := range documentedPorts {
		pairs = append(pairs, ":"+p, fmt.Sprintf(":%d", freePort(t)))
	}
	_, redisPort, _ := strings.Cut(redistest.Start(t).Addr, ":")
	pairs = append(pairs, ":6379", ":"+redisPort)
	sh := &shell{t: t, dir: dir, bin: bin, ports: strings.NewReplacer(pairs...)}
	t.Cleanup(func() {
		if sh.stop != nil {
			sh.stop()
		}
	})
	return sh
}

// serve stops the running gateway, if any, and runs the binary on config
// (written to file in a directory of its own) with env added, as the
// documented command does, every documented port replaced.
func (sh *shell) serve(config, file string, env []string) {
	t := sh.t
	t.Helper()
	if sh.stop != nil {
		sh.stop()
		sh.stop = nil
	}
	runDir, err := os.MkdirTemp(sh.dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Join(runDir, file)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(runDir, file), []byte(sh.ports.Replace(config)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run"}
	if file != "Caddyfile" {
		args = append(args, "--config", file)
	}
	cmd := exec.Command(sh.bin, args...)
	cmd.Dir = runDir
	cmd.Env = append(os.Environ(), "HOME="+runDir, "XDG_CONFIG_HOME="+runDir, "XDG_DATA_HOME="+runDir)
	for _, e := range env {
		cmd.Env = append(cmd.Env, sh.ports.Replace(e))
	}
	// output is read only once the process has exited.
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	sh.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("gateway output (%s):\n%s", file, output.String())
		}
	}
	addr := sh.ports.Replace("127.0.0.1:8080")
	wait.Within(t, 30*time.Second, "the gateway listening on "+addr, func() error {
		select {
		case <-exited:
			t.Fatalf("the gateway exited:\n%s", output.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// statusLine matches the status lines curl -i prints.
var statusLine = regexp.MustCompile(`(?m)^HTTP/[0-9.]+ ([0-9]{3})`)

// runnable reports whether the test knows how to run a command: the
// programs it has (an assignment from a command substitution counts as
// the command).
func runnable(c string) bool {
	if i := strings.Index(c, "=$("); i > 0 && !strings.ContainsAny(c[:i], " ") {
		c = c[i+3:]
	}
	first := strings.Fields(c)[0]
	switch first {
	case "curl", "promtool", "cd", "systemone-gateway":
		return true
	}
	return strings.HasPrefix(c, gatewayCommand+" ")
}

// ownShellTests are the pages whose shell examples need a setup of their
// own (labels stored, a replay's upstream, a second gateway) and are run
// by a test beside the code they document, named here; their Caddyfiles
// are still adapted and their links checked by this package.
var ownShellTests = map[string]string{
	"docs/calibration.md":  "handlers/replay_loop_e2e_test.go (TestReplayLoop)",
	"docs/active-audit.md": "internal/review/calibrate/docs_test.go",
	"docs/monitor.md":      "internal/review/api/monitor_docs_test.go (TestMonitorDocs) and monitor_response_docs_test.go (TestMonitorResponseDocs)",
	"docs/review.md":       "internal/review/api/docs_test.go (TestDocsReview); bench/reviewload is a load test",
	"docs/walkthrough.md":  "deploy/examples/review-loop (the walk-through's own test)",
}

// Every shell example runs. The first command that starts the gateway
// (`go run ./cmd/systemone-gateway run`) serves the root Caddyfile, with the
// caddyfile blocks marked `append` added; a block marked `serve` is what
// the next `... run --config <file>` serves. Every other command of a
// block runs, as one bash script per block, against the gateway started
// last. Blocks marked illustrative are left out; any other command the
// test does not know how to run is a failure, so that a new example is
// either run or marked.
func TestShellExamples(t *testing.T) {
	var all []block
	for _, b := range allBlocks(t) {
		if _, own := ownShellTests[b.page]; !own || b.lang == "caddyfile" {
			all = append(all, b)
		}
	}
	var appended []string
	for _, b := range all {
		if b.lang == "caddyfile" && b.has("append") && !b.has("illustrative") {
			appended = append(appended, b.text)
		}
	}
	sh := newShell(t)
	var pending string // the last caddyfile block marked serve
	started, ran := false, 0
	for _, b := range all {
		if b.has("illustrative") {
			continue
		}
		if b.lang == "caddyfile" && b.has("serve") {
			pending = b.text
			continue
		}
		if b.lang != "sh" && b.lang != "console" && b.lang != "bash" {
			continue
		}
		var script []string
		for _, c := range commands(b) {
			if m := runCommand.FindStringSubmatch(c); m != nil {
				env, file := strings.Fields(m[1]), m[2]
				switch {
				case file == "":
					sh.serve(read(t, "Caddyfile")+"\n"+strings.Join(appended, "\n"), "Caddyfile", env)
				case pending == "":
					t.Fatalf("%s: %q serves %s, and no caddyfile block before it is marked serve", b, c, file)
				case !shipped(file, pending):
					t.Errorf("%s: %q serves %s: the repository must hold that file, the same as the block marked serve before it", b, c, file)
					fallthrough
				default:
					sh.serve(pending, file, env)
					pending = ""
				}
				started = true
				continue
			}
			if strings.HasPrefix(c, "bash ") {
				file := strings.TrimPrefix(c, "bash ")
				if out, err := exec.Command("bash", "-n", filepath.Join(root, file)).CombinedOutput(); err != nil {
					t.Errorf("%s: bash -n %s: %v\n%s", b, file, err, out)
				}
				continue
			}
			if !runnable(c) {
				t.Errorf("%s: the test does not know how to run %q: make it runnable or mark the block illustrative", b, c)
				continue
			}
			if strings.Contains(c, "promtool ") && !haveTool(t, b, "promtool") ||
				strings.Contains(c, "curl ") && !haveTool(t, b, "curl") {
				continue
			}
			script = append(script, sh.ports.Replace(strings.ReplaceAll(c, gatewayCommand, "systemone-gateway")))
		}
		if len(script) == 0 {
			continue
		}
		if !started {
			t.Fatalf("%s: a command runs before any example starts the gateway", b)
		}
		ran++
		sh.run(b, script)
	}
	if !started || ran == 0 {
		t.Errorf("started a gateway %v, ran %d blocks; want both", started, ran)
	}
}

// shipped reports whether the repository holds file (a path from its
// root) with text as its content, so that an operator who runs the
// documented command from a clone serves what the docs show.
func shipped(file, text string) bool {
	data, err := os.ReadFile(filepath.Join(root, file))
	return err == nil && string(data) == text
}

// haveTool reports whether a program is installed. Where it is missing the
// command is left out, except in CI (CI=true), which installs it first:
// there a missing program is a failure.
func haveTool(t *testing.T, b block, name string) bool {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return true
	}
	if os.Getenv("CI") == "true" {
		t.Errorf("%s: %s is not installed; CI installs it (see .ci/run)", b, name)
	} else {
		t.Logf("SKIPPED %s: %s is not installed; with CI=true this is a failure", b, name)
	}
	return false
}

// run runs one block's commands as one bash script, from the repository,
// with the built binary first on the PATH. It fails on a non-zero exit, a
// 5xx status line from curl -i, and metrics without the gateway's.
func (sh *shell) run(b block, script []string) {
	t := sh.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	text := "set -euo pipefail\n" + strings.Join(script, "\n")
	cmd := exec.CommandContext(ctx, "bash", "-c", text)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(sh.bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %v\n%s\n%s", b, err, text, out)
		return
	}
	for _, m := range statusLine.FindAllSubmatch(out, -1) {
		if m[1][0] == '5' {
			t.Errorf("%s: status %s\n%s\n%s", b, m[1], text, out)
		}
	}
	// The metrics site serves the gateway's own metrics: the requests of
	// the examples before it counted.
	if strings.Contains(text, "/metrics") && !bytes.Contains(out, []byte("systemone_requests_total{")) {
		t.Errorf("%s: no systemone_requests_total in the metrics\n%s", b, out)
	}
	t.Logf("%s: %s -> %s", b, strings.Join(script, "; "), firstLine(out))
}

func firstLine(out []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	if sc.Scan() {
		return sc.Text()
	}
	return ""
}
