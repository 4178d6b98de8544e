package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/review/replay"
)

// candidateVersion is the second version replay --escalate calibrates.
const candidateVersion = "service-3.0.0"

// replayLines runs replay with opts against s's review API and returns
// its summary and its lines, each as "entry question stage model
// confidence answer label agree route escalated_from".
func (s *escalationStack) replayLines(t *testing.T, opts replay.Options, entries map[string]string) (replay.Summary, []string, error) {
	t.Helper()
	opts.Review, opts.APIKey, opts.Model, opts.Escalate = s.url+"/review/", "replay-key", candidateVersion, firstVersion
	var out, log bytes.Buffer
	opts.Log = &log
	sum, err := replay.Run(context.Background(), opts, &out)
	var lines []string
	for _, raw := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if raw == "" {
			continue
		}
		if opts.DryRun {
			lines = append(lines, raw)
			continue
		}
		var l map[string]any
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("line %q: %v", raw, err)
		}
		lines = append(lines, entries[l["entry"].(string)]+" "+lineShape(l))
	}
	t.Logf("replay log:\n%s", log.String())
	return sum, lines, err
}

// replay --escalate end to end: stored entries labelled through the real
// review API, a candidate second version on a loopback upstream. Only the
// first version's questions it routed human for low confidence are asked,
// one request per entry with those questions only; each is written as a
// second answer's line (stage 2, escalated_from the first version, the
// candidate's answer and agree, route replay). A question routed human for
// no threshold, one the first version was sure of, and an entry with none
// to ask are left out. --dry-run and --limit work as for a plain replay,
// and failed entries are written as disagreements, stage 2 too.
func TestReplayEscalate(t *testing.T) {
	s := newEscalationStack(t)
	entries := map[string]string{} // entry id -> a name for the test
	ask := func(name string, labels map[string]any, ids ...string) string {
		resp := s.askIDs(t, ids...)
		id := lastEntry(t, s.rdb, resp.Header.Get("X-Request-Id"))
		s.put(t, id, labels)
		entries[id] = name
		return id
	}
	// e1: sure confident, esc escalated and answered, hard escalated and
	// still human. e2: sure only. e3: esc, and a choice with no
	// threshold (human, not for confidence).
	ask("e1", map[string]any{"sure": true, "esc": true, "hard": false}, "sure", "esc", "hard")
	ask("e2", map[string]any{"sure": true}, "sure")
	e3 := ask("e3", map[string]any{"esc": false, "pick": "yes"}, "esc", "pick")
	var item struct{ Reason string }
	if r, raw := do(t, mustRequest(t, http.MethodGet, s.url+"/review/items/"+e3, "")); r.StatusCode != 200 || json.Unmarshal(raw, &item) != nil || item.Reason != "no_threshold" {
		t.Fatalf("e3: %d %s, want its reason no_threshold", r.StatusCode, raw)
	}

	// The command docs/escalation.md shows, its URLs and file adapted.
	calls := s.upstream.Calls()
	stderr, lines := s.documentedReplay(t, entries)
	want := []string{
		"e1 esc 2 service-2.0.0 0.75 0.875 true true replay service-1.0.0",
		"e1 hard 2 service-2.0.0 0.25 0.625 false false replay service-1.0.0",
		"e3 esc 2 service-2.0.0 0.75 0.875 false false replay service-1.0.0",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("the documented command's lines\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if summary := lastLine(stderr); summary != "replayed 2 skipped 0 failed 0 tokens 20 cost 0.000001" {
		t.Errorf("summary %q", summary)
	}
	if got := s.upstream.Calls() - calls; got != 2 {
		t.Errorf("%d upstream calls, want one per entry with a question to ask again (2)", got)
	}

	// One entry at a time: the upstream's last call is e3's.
	calls = s.upstream.Calls()
	sum, lines, err := s.replayLines(t, replay.Options{Upstream: s.upstream.URL, Concurrency: 1}, entries)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i] = strings.Replace(want[i], "service-2.0.0", candidateVersion, 1)
	}
	if !slices.Equal(lines, want) {
		t.Errorf("lines\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if sum.Replayed != 2 || sum.Skipped != 0 || sum.Failed != 0 || sum.Tokens != 20 {
		t.Errorf("summary %v, want 2 replayed, 20 tokens", sum)
	}
	if got := s.upstream.Calls() - calls; got != 2 {
		t.Errorf("%d upstream calls, want one per entry with a question to ask again (2)", got)
	}
	var asked struct {
		Model     string                     `json:"model"`
		State     string                     `json:"state"`
		Questions map[string]json.RawMessage `json:"questions"`
	}
	last := s.upstream.Last()
	if err := json.Unmarshal(last.Body, &asked); err != nil || asked.Model != candidateVersion || len(asked.Questions) != 1 || asked.Questions["esc"] == nil ||
		asked.State != "the parcel came a day late" || last.Header.Get("X-Systemone-Replay") != "1" || last.Header.Get("Authorization") != "Bearer replay-key" {
		t.Errorf("the last call (e3's): %s %v; want the candidate asked esc only, the same state, marked a replay", last.Body, last.Header)
	}

	// --dry-run: the entries that would be asked, their questions counted;
	// --limit: the first entries with a question to ask.
	calls = s.upstream.Calls()
	sum, lines, err = s.replayLines(t, replay.Options{Upstream: s.upstream.URL, DryRun: true}, entries)
	if err != nil || len(lines) != 2 || !strings.HasSuffix(strings.Fields(lines[0])[1], "-0") || strings.Fields(lines[0])[3] != "2" ||
		strings.Fields(lines[1])[3] != "1" || sum.Replayed != 2 || sum.Tokens == 0 || s.upstream.Calls() != calls {
		t.Errorf("dry run: %v %q %v, %d calls", sum, lines, err, s.upstream.Calls()-calls)
	}
	sum, lines, err = s.replayLines(t, replay.Options{Upstream: s.upstream.URL, Limit: 1}, entries)
	if err != nil || sum.Replayed != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], "e1 ") || !strings.HasPrefix(lines[1], "e1 ") {
		t.Errorf("--limit 1: %v %q %v", sum, lines, err)
	}

	// An upstream that refuses: each question asked is a disagreement at
	// confidence 1, of a second answer, under --model.
	down := gatewaytest.NewUpstream(t, refuseAll{})
	sum, lines, err = s.replayLines(t, replay.Options{Upstream: down.URL}, entries)
	want = []string{
		"e1 esc 2 service-3.0.0 1 <nil> true false replay_failed service-1.0.0",
		"e1 hard 2 service-3.0.0 1 <nil> false false replay_failed service-1.0.0",
		"e3 esc 2 service-3.0.0 1 <nil> false false replay_failed service-1.0.0",
	}
	if err != nil || sum.Failed != 2 || sum.Replayed != 0 || !slices.Equal(lines, want) {
		t.Errorf("failed: %v %v\n%s\nwant\n%s", sum, err, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// documentedReplay runs the `replay --escalate` command of
// docs/escalation.md against s (its review API for $REVIEW, its upstream
// for $GATEWAY, --out a file of the test's) and returns its standard error
// and lines, as replayLines writes them.
func (s *escalationStack) documentedReplay(t *testing.T, entries map[string]string) (string, []string) {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/escalation.md")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "systemone-gateway replay ") && strings.Contains(line, "--escalate") {
			args = strings.Fields(strings.TrimPrefix(line, "systemone-gateway replay "))
		}
	}
	if len(args) == 0 {
		t.Fatal("no replay --escalate command in docs/escalation.md")
	}
	out := filepath.Join(t.TempDir(), "escalated.ndjson")
	for i, a := range args {
		args[i] = strings.NewReplacer(`"$REVIEW"`, s.url+"/review/", `"$GATEWAY"`, s.upstream.URL, "escalated.ndjson", out).Replace(a)
	}
	t.Setenv(replay.APIKeyEnv, "replay-key")
	c := replay.Command()
	cmd := &cobra.Command{Use: c.Name, SilenceUsage: true, SilenceErrors: true}
	c.CobraFunc(cmd)
	var stdout, stderr bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("replay %q: %v\n%s", args, err, stderr.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, text := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("line %q: %v", text, err)
		}
		lines = append(lines, entries[l["entry"].(string)]+" "+lineShape(l))
	}
	return stderr.String(), lines
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// refuseAll answers every request 400, which replay does not retry.
type refuseAll struct{}

func (refuseAll) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprint(w, `{"detail":"refused"}`)
}
