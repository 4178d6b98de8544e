package handlers_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/pinblock"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/simulator"
)

// TestReplayLoop is docs/calibration.md's new-version workflow, run with the
// real binary against the real gateway, review API (behind basic_auth) and
// Redis: audit service-1.0.0's answers with their content, label them with
// the simulator's truth through the API, run the doc's commands (calibrate,
// replay to service-2.0.0, calibrate the replayed lines, the same piped),
// paste both pins, reload, and see service-2.0.0's answers route as its
// new threshold says.
func TestReplayLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	start := time.Now()
	binDir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "systemone-gateway"), "../cmd/systemone-gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built in %v", time.Since(start))
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	sim := unlimitedSimulator(t)
	port := gatewaytest.FreePort(t)
	gateway := fmt.Sprintf("http://127.0.0.1:%d", port)
	review := fmt.Sprintf("http://ann:secret@127.0.0.1:%d/review", port)
	config := func(pins string) string {
		return fmt.Sprintf(`:%d {
	handle_path /review/* {
		basic_auth {
			ann %s
		}
		systemone_review {
			redis %s
			stream review:replay
		}
	}
	handle {
		systemone {
			redis %[3]s
			route {
%[4]s
				queue review:replay maxlen 10000
				audit 1
				include_content
			}
		}
		reverse_proxy %[5]s
	}
}
`, port, hash, rs.URL(), pins, sim.Addr())
	}
	g := gatewaytest.Load(t, config(""))

	// Traffic to service-1.0.0: unpinned, every answer routes human, and
	// every one is audited with its content.
	const n = 300
	body := func(i int, model string) string {
		return fmt.Sprintf(`{"model":%q, "state": "Order %d: the parcel was promised for Monday and arrived %d days later.", "questions": {"late": {"type": "noul", "instructions": "Was the delivery late?"}}}`, model, i, i%9)
	}
	for i := range n {
		resp, text := post(t, gateway, "loop", body(i, "service-1.0.0"))
		if resp.StatusCode != 200 || resp.Header.Get("X-Route-Reason") != "unpinned_version" {
			t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, text)
		}
	}

	t.Logf("traffic sent at %v", time.Since(start))
	// A reviewer labels every entry with the truth, which they read from
	// the content (the simulator's Truth of the stored request).
	client := &http.Client{}
	getReview := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest("GET", gateway+"/review"+path, nil)
		req.SetBasicAuth("ann", "secret")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(v) != nil {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	type item struct {
		ID      string          `json:"id"`
		Audit   bool            `json:"audit"`
		Request json.RawMessage `json:"request"`
	}
	var items []item
	waitFor(t, func() bool {
		var page struct{ Items []item }
		getReview("/items?limit=500", &page)
		items = page.Items
		return len(items) == n
	}, 10*time.Second)
	for _, it := range items {
		truth, err := simulator.Truth(it.Request)
		if !it.Audit || err != nil {
			t.Fatalf("item %s: audit %v, request %s: %v", it.ID, it.Audit, it.Request, err)
		}
		label, _ := json.Marshal(map[string]any{"labels": truth, "reviewer": "ann"})
		req, _ := http.NewRequest("PUT", gateway+"/review/items/"+it.ID+"/labels", bytes.NewReader(label))
		req.SetBasicAuth("ann", "secret")
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 204 {
			t.Fatalf("PUT labels of %s: %v %v", it.ID, resp, err)
		}
		resp.Body.Close()
	}

	t.Logf("labelled at %v", time.Since(start))
	// The doc's commands, as printed there, in a shell with the binary on
	// PATH and $REVIEW, $GATEWAY and SYSTEMONE_API_KEY set.
	commands := docCommands(t, "../docs/calibration.md")
	if len(commands) != 4 {
		t.Fatalf("docs/calibration.md shows %d commands, the test knows 4: %q", len(commands), commands)
	}
	work := t.TempDir()
	// The labels were stored just now: calibrate looks as a team would a
	// day later, once the correction window (a day) has passed.
	asOf := time.Now().Add(25 * time.Hour).UTC().Format(time.RFC3339)
	shell := func(command string) (stdout, stderr string) {
		t.Helper()
		command = strings.ReplaceAll(command, "systemone-gateway calibrate ", "systemone-gateway calibrate --as-of "+asOf+" ")
		cmd := exec.Command("sh", "-c", command)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
			"REVIEW="+review, "GATEWAY="+gateway, "SYSTEMONE_API_KEY=sk-replay")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s\n%s", command, err, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}

	// 1. calibrate service-1.0.0 from the API.
	out1, _ := shell(commands[0])
	t.Logf("%s\n%s", commands[0], out1)
	pin1 := pinblock.Find(t, out1, "service-1.0.0")
	t1 := pinblock.Noul(t, pin1)

	// 2. replay to service-2.0.0: every entry once, none queued.
	_, stderr := shell(commands[1])
	summary := lastLine(stderr)
	var replayed, skipped, failed, tokens int
	var cost float64
	if k, _ := fmt.Sscanf(summary, "replayed %d skipped %d failed %d tokens %d cost %g", &replayed, &skipped, &failed, &tokens, &cost); k != 5 ||
		replayed != n || skipped != 0 || failed != 0 || tokens <= 0 || cost != math.Round(float64(tokens)*0.042)/1e6 {
		t.Fatalf("replay summary %q", summary)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	if got, _ := rdb.XLen(context.Background(), "review:replay").Result(); got != n {
		t.Errorf("the stream holds %d entries after the replay, want the %d audited ones: replays are not queued", got, n)
	}
	lines := readLines(t, filepath.Join(work, "replayed.ndjson"))
	if len(lines) != n {
		t.Fatalf("replayed.ndjson: %d lines", len(lines))
	}
	for _, l := range lines {
		if l["model"] != "service-2.0.0" || l["route"] != "replay" || l["reviewer"] != "ann" || l["audit"] != true {
			t.Fatalf("replayed line %v", l)
		}
	}

	t.Logf("replayed at %v", time.Since(start))
	// 3. calibrate service-2.0.0 from the replayed lines, and piped.
	out2, _ := shell(commands[2])
	t.Logf("%s\n%s", commands[2], out2)
	pin2 := pinblock.Find(t, out2, "service-2.0.0")
	t2 := pinblock.Noul(t, pin2)
	if piped, _ := shell(commands[3]); piped != out2 {
		t.Errorf("piped:\n%s\nwant the same as from the file:\n%s", piped, out2)
	}
	// The second version's curve is lower: the same labels ask more of it.
	if !(t2 > t1) {
		t.Errorf("service-2.0.0's threshold %v is not above service-1.0.0's %v", t2, t1)
	}

	// 4. Paste both pins, reload: service-2.0.0's answers route as its
	// threshold says, none of them queued by the replay's doing.
	g.Reload(config(pin1 + "\n" + pin2))
	autos, humans := 0, 0
	for i := range 120 {
		resp, text := post(t, gateway, "loop", body(n+i, "service-2.0.0"))
		if resp.StatusCode != 200 || resp.Header.Get("X-Route-Model") != "service-2.0.0" {
			t.Fatalf("after the reload: %d %v %s", resp.StatusCode, resp.Header, text)
		}
		var answer struct {
			Answers struct{ Late struct{ Noul float64 } }
		}
		if err := json.Unmarshal(text, &answer); err != nil {
			t.Fatal(err)
		}
		c := roundConfidence(answer.Answers.Late.Noul)
		want := "human"
		if c >= t2 {
			want = "auto"
		}
		if got := resp.Header.Get("X-Route"); got != want {
			t.Errorf("confidence %v under threshold %v: routed %s, want %s", c, t2, got, want)
		}
		if want == "auto" {
			autos++
		} else {
			humans++
		}
	}
	if autos == 0 || humans == 0 {
		t.Errorf("%d auto and %d human: the check needs both", autos, humans)
	}
}

// docCommands returns the lines of the ```sh blocks of a markdown file.
func docCommands(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		for _, l := range strings.Split(strings.TrimSpace(m[1]), "\n") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// roundConfidence is the gateway's noul confidence |2p-1|, to 9 decimals.
func roundConfidence(p float64) float64 {
	d := 2*p - 1
	if d < 0 {
		d = -d
	}
	return float64(int64(d*1e9+0.5)) / 1e9
}
