package docs

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOneProcessPerAddress runs the flock command of operations.md ("One
// process per address") as written, paths moved to a scratch directory:
// the second start exits with 75 while the first serves. And it shows the
// mistake the lock prevents: without it, a second process on the same
// ports comes up and serves beside the first.
func TestOneProcessPerAddress(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock")
	}
	doc, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## One process per address")
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sh illustrative\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || !strings.Contains(block, "flock") {
		t.Fatal("operations.md has no flock command under \"One process per address\"")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "systemone-gateway")
	build := exec.Command("go", "build", "-o", bin, "./cmd/systemone-gateway")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	port, admin := freePort(t), freePort(t)
	config := fmt.Sprintf("{\n\tadmin localhost:%d\n}\n:%d {\n\trespond \"{env.INSTANCE}\"\n}\n", admin, port)
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	command := strings.NewReplacer(
		"/run/", dir+"/",
		"/etc/systemone-gateway/Caddyfile", filepath.Join(dir, "Caddyfile"),
		"systemone-gateway run", bin+" run",
	).Replace(strings.TrimSpace(block))

	start := func(instance, script string) *exec.Cmd {
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(os.Environ(), "INSTANCE="+instance, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	// answers collects who answers the port over fresh connections.
	answers := func() map[string]int {
		seen := map[string]int{}
		for range 40 {
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			seen[string(body)]++
		}
		return seen
	}
	waitServing := func(instance string) {
		deadline := time.Now().Add(30 * time.Second)
		for answers()[instance] == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s does not answer on :%d", instance, port)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// With the lock: the second start exits with 75, the first serves alone.
	first := start("first", "exec "+command)
	pidfile := filepath.Join(dir, "systemone-gateway.pid")
	t.Cleanup(func() { // flock's child, the gateway, outlives flock
		var pid int
		if text, err := os.ReadFile(pidfile); err == nil {
			if _, err := fmt.Sscan(string(text), &pid); err == nil && pid > 0 {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
	})
	waitServing("first")
	second := exec.Command("bash", "-c", command)
	second.Env = append(os.Environ(), "INSTANCE=second", "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	done := make(chan error, 1)
	go func() { done <- second.Run() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 75 {
			t.Fatalf("the second start: %v, want exit status 75", err)
		}
	case <-time.After(20 * time.Second):
		_ = second.Process.Kill()
		t.Fatal("the second start did not exit: the lock let it run")
	}
	if seen := answers(); seen["second"] != 0 || seen["first"] == 0 {
		t.Errorf("answers %v: want the first process only", seen)
	}
	// flock runs the gateway as its child, which holds the lock: the
	// pidfile names the gateway.
	var pid, ppid int
	text, err := os.ReadFile(pidfile)
	if _, err2 := fmt.Sscan(string(text), &pid); err != nil || err2 != nil {
		t.Fatalf("pidfile %q: %v %v", text, err, err2)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if _, rest, ok := strings.Cut(string(stat), ") "); err != nil || !ok {
		t.Fatalf("/proc/%d/stat: %v", pid, err)
	} else if _, err := fmt.Sscanf(rest, "%c %d", new(rune), &ppid); err != nil || ppid != first.Process.Pid {
		t.Errorf("the pidfile's process %d has parent %d, want flock's %d", pid, ppid, first.Process.Pid)
	}

	// Without it, a second process binds the same ports and serves too.
	start("unlocked", fmt.Sprintf("exec %s run --config %s", bin, filepath.Join(dir, "Caddyfile")))
	waitServing("unlocked")
}
