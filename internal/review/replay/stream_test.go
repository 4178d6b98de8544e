package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/systemone/systemone-gateway/simulator"
)

// Lines out of the export's order (an entry's lines apart), or a line
// that is not a /labels line, stop the reading there: the entries before
// are replayed and written, and Run returns the error.
func TestLabelsOrderAndMalformedLines(t *testing.T) {
	f := newFixture(t)
	lines := strings.Split(strings.TrimSpace(labelsNDJSON), "\n")
	for _, tt := range []struct {
		name, labels, want string
		replayed, written  int // entries replayed and lines written before the fault
	}{
		// 1-0's lines apart: replaying them would ask twice for 1-0.
		{"apart", lines[0] + "\n" + lines[2] + "\n" + lines[1] + "\n", "line 3: entry 1-0 comes after entry 2-0: the review API exports an entry's lines together, in entry order", 1, 1},
		{"backwards", lines[0] + "\n" + lines[1] + "\n" + lines[4] + "\n" + lines[3] + "\n", "line 4: entry 3-0 comes after entry 4-0", 1, 2},
		{"malformed", lines[0] + "\n" + lines[1] + "\n" + lines[4] + "\n" + `{"entry":"5-0"}` + "\n", "line 4 is not a /labels line", 1, 2},
		{"not an id", strings.Replace(lines[0], `"1-0"`, `"x"`, 1) + "\n", `line 1 is not a /labels line: "entry" is "x", want a stream entry id`, 0, 0},
		{"too long", lines[0] + "\n" + lines[1] + "\n" + strings.Repeat(" ", maxLine+1) + "\n", "line 3 is longer than", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			review := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/review/labels" {
					io.WriteString(w, tt.labels)
					return
				}
				f.review.Config.Handler.ServeHTTP(w, r)
			}))
			t.Cleanup(review.Close)
			var out bytes.Buffer
			sum, err := Run(context.Background(), Options{
				Review: review.URL + "/review", Upstream: f.upstream.URL, Model: "service-2.0.0", APIKey: "k",
			}, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "GET "+review.URL+"/review/labels: ") {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if sum.Replayed != tt.replayed || strings.Count(out.String(), "\n") != tt.written {
				t.Errorf("summary %+v, output:\n%s", sum, out.String())
			}
		})
	}
}

var labelLines = flag.Int("replay.lines", 50_000, "lines of the generated /labels in TestReplayMemoryFlat (BENCHMARKS.md gives the figure at 1,000,000)")

// memoryGrowth bounds how far replay's live heap may grow over a /labels
// of any length, in TestReplayMemoryFlat. Holding the lines, as a replay
// that reads all of /labels first does, grows it by 14 MiB at 50,000
// lines and 1.1 GB at a million.
const memoryGrowth = 6 << 20

// Replay's memory does not grow with the number of /labels lines: over a
// generated /labels served by a loopback review API (50 labelled questions
// per entry, every entry replayed against a loopback upstream), the live
// heap, sampled every 2,500 lines as the review API writes them, grows by
// less than memoryGrowth.
func TestReplayMemoryFlat(t *testing.T) {
	const perEntry, sampleEvery = 50, 2500
	questions := map[string]any{}
	for q := range perEntry {
		questions["q"+strconv.Itoa(q)] = map[string]any{"type": "noul", "instructions": "Is it so?"}
	}
	request, _ := json.Marshal(map[string]any{"model": "service-1.0.0", "state": "a state", "questions": questions})
	answer := simulatedAnswer(t, request)
	item := `{"id":"1-0","questions":[],"request":` + string(request) + `}`

	// sample measures the live heap: a collection first, so that the
	// figure is what replay holds, not when the collector last ran.
	var peak uint64
	sample := func() {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapAlloc)
	}
	sample()
	base := peak
	review := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/review/labels" {
			io.WriteString(w, item)
			return
		}
		bw := bufio.NewWriter(w)
		for n := range *labelLines {
			fmt.Fprintf(bw, `{"entry":"%d-0","request_id":"req_%d","org":"acme","model":"service-1.0.0","type":"noul","question":"q%d",`+
				`"confidence":0.9,"answer":0.95,"label":true,"agree":true,"audit":true,"audit_p":0.05,"route":"auto","reviewer":"ann","ts":"2026-01-01T00:00:00Z"}`+"\n",
				n/perEntry+1, n/perEntry, n%perEntry)
			if n%sampleEvery == 0 {
				sample() // the handler alone samples: no timer, no race on peak
			}
		}
		bw.Flush()
	}))
	t.Cleanup(review.Close)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Request-Id", "req_new")
		w.Write(answer)
	}))
	t.Cleanup(upstream.Close)

	var out countingWriter
	sum, err := Run(context.Background(), Options{
		Review: review.URL + "/review", Upstream: upstream.URL, Model: "service-2.0.0", APIKey: "k",
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if want := (*labelLines + perEntry - 1) / perEntry; sum.Replayed != want || out.lines != *labelLines {
		t.Fatalf("replayed %d of %d entries, wrote %d of %d lines", sum.Replayed, want, out.lines, *labelLines)
	}
	t.Logf("%d lines: live heap peak %.1f MiB (%.1f MiB before)", *labelLines, float64(peak)/(1<<20), float64(base)/(1<<20))
	if peak-base > memoryGrowth {
		t.Errorf("the live heap grew by %.1f MiB over %d lines, bound %d MiB", float64(peak-base)/(1<<20), *labelLines, memoryGrowth>>20)
	}
}

// simulatedAnswer is the simulator's 200 answer to request.
func simulatedAnswer(t *testing.T, request []byte) []byte {
	t.Helper()
	sim, err := simulator.New(simulator.Handler{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/systemone", bytes.NewReader(request))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	sim.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("simulator: %d %s", rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// countingWriter counts the lines written to it, and keeps none.
type countingWriter struct {
	mu    sync.Mutex
	lines int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.lines += bytes.Count(p, []byte("\n"))
	c.mu.Unlock()
	return len(p), nil
}

// A failed write stops the replay: the entries not yet asked are not sent
// to the upstream, whose calls cost money.
func TestWriteFailureStops(t *testing.T) {
	const entries = 1000
	request := []byte(`{"model":"service-1.0.0","state":"s","questions":{"q":{"type":"noul","instructions":"?"}}}`)
	answer := simulatedAnswer(t, request)
	review := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/review/labels" {
			io.WriteString(w, `{"id":"1-0","questions":[],"request":`+string(request)+`}`)
			return
		}
		for n := range entries {
			fmt.Fprintf(w, `{"entry":"%d-0","model":"service-1.0.0","question":"q","type":"noul","confidence":0.9,"answer":0.9,"label":true,"agree":true,"audit":true}`+"\n", n+1)
		}
	}))
	t.Cleanup(review.Close)
	var calls atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Write(answer)
	}))
	t.Cleanup(upstream.Close)
	_, err := Run(context.Background(), Options{
		Review: review.URL + "/review", Upstream: upstream.URL, Model: "service-2.0.0", APIKey: "k", Concurrency: 2,
	}, failingWriter{})
	if err == nil || !strings.Contains(err.Error(), "writing the output: disk full") {
		t.Errorf("error %v", err)
	}
	if n := calls.Load(); n > 10 {
		t.Errorf("%d of %d entries sent after the output failed", n, entries)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
