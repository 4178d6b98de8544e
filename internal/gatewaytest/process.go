package gatewaytest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// childConfig names the environment variable through which StartProcess
// hands its child the JSON config to serve.
const childConfig = "GATEWAYTEST_CHILD_CONFIG"

// Process is a gateway in a process of its own: another instance, with
// state of its own (Redis clients, in-process buckets, breakers), as a
// second machine behind a load balancer would run it.
type Process struct {
	logFile
}

// StartProcess serves the Caddyfile sites (the global options are added, as
// Load does) in a child process, until the test ends. The child is the test
// binary itself, run again: the package's TestMain must call ServeChild
// first. It returns once the child has loaded the config.
func StartProcess(t testing.TB, sites string) *Process {
	t.Helper()
	dir := t.TempDir()
	p := &Process{logFile{t: t, path: filepath.Join(dir, "systemone.log")}}
	cfgPath := filepath.Join(dir, "caddy.json")
	if err := os.WriteFile(cfgPath, adapt(t, fmt.Sprintf(globals, p.path, "")+sites), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childConfig+"="+cfgPath)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the child gateway: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = stdin.Close() // the child stops when its stdin ends
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			t.Fatalf("the child gateway did not start: %q", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the child gateway did not start within 60s")
	}
	return p
}

// ServeChild makes this process a child gateway when StartProcess started
// it: it serves the config it was handed and exits once its parent closes
// its stdin (or dies). In any other process it returns at once. Call it
// first in TestMain.
func ServeChild() {
	path := os.Getenv(childConfig)
	if path == "" {
		return
	}
	cfg, err := os.ReadFile(path)
	if err == nil {
		err = caddy.Load(cfg, true)
	}
	if err != nil {
		fmt.Fprintf(os.Stdout, "error: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stdout, "ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = caddy.Stop()
	os.Exit(0)
}
