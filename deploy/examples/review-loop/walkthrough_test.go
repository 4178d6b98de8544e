package reviewloop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/pinblock"
)

// walkthroughDeadline bounds the whole run; a run takes about a minute,
// most of it the build (the link, once the build cache holds the
// packages).
const walkthroughDeadline = 5 * time.Minute

// TestWalkthrough runs docs/walkthrough.md as a reader does: its sh blocks
// in order, as one bash script in one shell, from the root of the clone,
// with the real binaries it builds, the real redis-server it starts and
// the example it copies. Only the ports change: the example's (:8080
// gateway, :9080 simulator, :2019 admin, :9180 metrics) and the Redis's
// (6380) become free ones, in the commands and in the scratch copy of the
// Caddyfile. Each block's output is compared with the text block the doc
// shows after it; the clone's git status is the same after the run as
// before.
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	steps := readSteps(t, filepath.Join(root, "docs/walkthrough.md"))
	if len(steps) < 10 {
		t.Fatalf("docs/walkthrough.md has %d sh blocks: is the fence parser broken?", len(steps))
	}
	first := steps[0].sh
	for _, want := range []string{"walk=$(mktemp -d)", "cp deploy/examples/review-loop/Caddyfile ", `"$walk"`, `cd "$walk"`} {
		if !strings.Contains(first, want) {
			t.Fatalf("the first block does not hold %q: the test rewrites the ports of the copy it makes in $walk:\n%s", want, first)
		}
	}

	ports, rewrite := freePorts(t)
	tmp := t.TempDir()
	times := filepath.Join(tmp, "times")
	run := script(steps, ports, map[int]string{0: rewrite}, times)
	scriptFile := filepath.Join(tmp, "walkthrough.sh")
	if err := os.WriteFile(scriptFile, []byte(run), 0o600); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(tmp, "tmp") // the reader's $TMPDIR: mktemp -d makes $walk there
	if err := os.Mkdir(scratch, 0o700); err != nil {
		t.Fatal(err)
	}

	before := gitStatus(t, root)
	start := time.Now()
	out := runScript(t, root, scriptFile, scratch)
	t.Logf("walk-through run in %v; per block: %s", time.Since(start).Round(time.Second/10), blockTimes(times))
	outputs, done := splitOutputs(out, len(steps))
	fail := func(format string, args ...any) {
		t.Helper()
		logs, _ := filepath.Glob(filepath.Join(scratch, "*", "gateway.log"))
		for _, l := range logs {
			text, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, text)
		}
		t.Fatalf(format+"\n--- the script's output:\n%s", append(args, out)...)
	}
	if !done {
		fail("the walk-through stopped before its end")
	}

	// Each block prints what the doc shows after it.
	bindings := map[string]string{}
	for i, s := range steps {
		if s.want == nil {
			continue
		}
		if !matchOutput(s.want, normalize(outputs[i]), bindings) {
			fail("docs/walkthrough.md:%d: the block\n%s\nprinted\n%s\nwhere the doc shows\n%s", s.line, s.sh, outputs[i], strings.Join(s.want, "\n"))
		}
	}
	if bindings["<id>"] == "" {
		fail("the doc's outputs name no certificate <id>")
	}

	// What the doc says of outputs it does not show whole.
	items := outputOf(t, steps, outputs, "/review/items?")
	var next struct {
		Items []struct {
			Audit   bool            `json:"audit"`
			Reason  string          `json:"reason"`
			Request json.RawMessage `json:"request"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(items), &next); err != nil || len(next.Items) != 1 || !next.Items[0].Audit ||
		next.Items[0].Reason != "unpinned_version" || len(next.Items[0].Request) == 0 {
		fail("the next item: %+v %v", next, err)
	}
	// The alarm is service-1.0.0's own yes/no group's, and only its: the
	// groups of the escalation step (service-2.0.0's answers, and the
	// escalated ones) were labelled with the truth.
	var g struct {
		Groups []struct {
			Model, Type      string
			Escalated, Alarm bool
		}
	}
	if err := json.Unmarshal([]byte(outputOf(t, steps, outputs, "/review/guarantee\n")), &g); err != nil || len(g.Groups) != 3 {
		fail("the guarantee after the disagreeing labels: %+v %v", g, err)
	}
	for _, gr := range g.Groups {
		if alarmed := gr.Model == "service-1.0.0" && gr.Type == "noul" && !gr.Escalated; gr.Alarm != alarmed {
			fail("the guarantee after the disagreeing labels: group %+v, want alarm %v", gr, alarmed)
		}
	}
	var progress struct {
		Groups []struct {
			Threshold *float64
		}
	}
	if err := json.Unmarshal([]byte(outputOf(t, steps, outputs, "/review/progress?")), &progress); err != nil ||
		len(progress.Groups) != 1 || progress.Groups[0].Threshold == nil {
		fail("progress: %+v %v", progress, err)
	}
	pin1 := pinblock.Noul(t, pinblock.Find(t, outputOf(t, steps, outputs, "| tee calibrate.txt"), "service-1.0.0"))
	pin2 := pinblock.Noul(t, pinblock.Find(t, outputOf(t, steps, outputs, "| tee calibrate-2.txt"), "service-2.0.0"))
	if pin1 != *progress.Groups[0].Threshold || !(pin2 > pin1) {
		fail("thresholds: /progress %v, service-1.0.0 %v, service-2.0.0 %v: want the first two equal, the third above", *progress.Groups[0].Threshold, pin1, pin2)
	}
	// The escalation step's pin and block are the ones it writes to
	// pins.caddy: service-2.0.0's answers below its pin go to service-1.0.0.
	escalation := outputOf(t, steps, outputs, "| tee calibrate-3.txt")
	pinblock.Noul(t, pinblock.Find(t, escalation, "service-2.0.0"))
	pinblock.Noul(t, pinblock.FindEscalate(t, escalation, "service-2.0.0", "service-1.0.0"))

	if after := gitStatus(t, root); after != before {
		t.Errorf("the walk-through changed the clone: git status --porcelain --ignored was\n%s\nand is\n%s", before, after)
	}
}

// freePorts returns the replacer of the doc's ports by free ones, and the
// command that makes the same change in the scratch copy of the Caddyfile.
func freePorts(t *testing.T) (*strings.Replacer, string) {
	t.Helper()
	used := map[int]bool{}
	free := func() int {
		for {
			if p := gatewaytest.FreePort(t); !used[p] {
				used[p] = true
				return p
			}
		}
	}
	var pairs []string
	sed := []string{"sed -i"}
	for _, p := range []string{":8080", ":9080", ":2019", ":9180"} {
		to := fmt.Sprintf(":%d", free())
		pairs = append(pairs, p, to)
		sed = append(sed, fmt.Sprintf("-e 's/%s/%s/g'", p, to))
	}
	redis := fmt.Sprint(free())
	pairs = append(pairs, "--port 6380", "--port "+redis, "localhost:6380", "localhost:"+redis, "-p 6380", "-p "+redis)
	return strings.NewReplacer(pairs...), strings.Join(append(sed, `"$walk/Caddyfile"`), " ")
}

// runScript runs the script with bash from dir, in a process group of its
// own (the gateway and the Redis it starts in the background are in it
// too, and are stopped with it if it fails), with $TMPDIR at tmp and
// Caddy's state under it; stdout and stderr together, as a terminal shows
// them.
func runScript(t *testing.T, dir, file, tmp string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), walkthroughDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", file)
	cmd.Dir = dir
	// Go reads its settings (go env -w) from the user's config directory:
	// named by GOENV, they stay the reader's when Caddy's state moves.
	goenv, err := exec.Command("go", "env", "GOENV").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(withoutEnv(os.Environ(), "REDIS_URL", "SYSTEMONE_API_KEY", "TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "GOENV"),
		"TMPDIR="+tmp, "XDG_CONFIG_HOME="+tmp, "XDG_DATA_HOME="+tmp, "GOENV="+strings.TrimSpace(string(goenv)))
	outFile := filepath.Join(filepath.Dir(file), "output.log")
	f, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) })
	runErr := cmd.Wait()
	out, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Logf("the walk-through's script failed (%v)", runErr)
	}
	return string(out)
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

// outputOf returns the output of the one block whose text holds s.
func outputOf(t *testing.T, steps []step, outputs []string, s string) string {
	t.Helper()
	found := -1
	for i, st := range steps {
		if strings.Contains(st.sh+"\n", s) {
			if found >= 0 {
				t.Fatalf("more than one block of the walk-through holds %q", s)
			}
			found = i
		}
	}
	if found < 0 {
		t.Fatalf("no block of the walk-through holds %q", s)
	}
	return outputs[found]
}

// gitStatus is the clone's `git status --porcelain`, its untracked and
// ignored files each named (a binary built at the root is ignored, and
// still a trace), or "" with a note when dir is not a git work tree (a
// source archive): then nothing is compared.
func gitStatus(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=all", "--ignored").Output()
	if err != nil {
		t.Logf("git status in %s: %v: the clone is not compared before and after", dir, err)
		return ""
	}
	return string(out)
}
