// Command reviewload measures whether the review API's reads cost the
// request path anything: the gateway's evaluation traffic (limits in
// Redis) runs alone, then alongside reviewers loading the review page's
// own request, items?unlabeled=1&limit=1, four at a time, over a review
// stream of large entries. It prints the evaluation latency (p50, p99) of
// each phase, their ratio, the 503s and `redis lost` log entries, and the
// gateway's RSS:
//
//	go run ./bench/reviewload                       # the run docs/review.md reports
//	go run ./bench/reviewload -max-content 8MiB      # the large bodies stored too
//	go run ./bench/reviewload -bin <gateway binary> -max-content ""  # another build
//	go run ./bench/reviewload -smoke                  # seconds: CI's check
//
// It builds cmd/systemone-gateway (or runs -bin) and starts a redis-server,
// the simulated service (no latency, no limits) and the gateway with
// `route { queue ... include_content }` and `systemone_review` on the same
// Redis. The large entries are evaluation requests padded with
// insignificant JSON whitespace to -pad bytes, routed human. Phases
// alternate (alone, with reviews, alone, ...) for -rounds rounds; the
// figures are the medians over rounds. It exits non-zero when an
// evaluation got anything but a 200, when the gateway logged `redis lost`
// while reviews ran,
// or (but with -smoke, whose phases are too short for a stable p99) when
// the p99 with reviews exceeds twice the p99 without. It says in
// which phase each `redis lost` fell: on a loaded machine the limiter's
// 50ms store_timeout can run out with no review running, which
// -store-timeout tells apart.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/systemone/systemone-gateway/bench/internal/harness"
)

const stream = "review:bench"

func main() {
	bin := flag.String("bin", "", "a gateway binary to run instead of building this tree's")
	duration := flag.Duration("duration", 15*time.Second, "length of each phase")
	rounds := flag.Int("rounds", 2, "rounds of (alone, with reviews)")
	concurrency := flag.Int("concurrency", 8, "evaluation clients, each sending one request at a time")
	entries := flag.Int("entries", 60, "large review entries written before the phases")
	pad := flag.Int("pad", 3_900_000, "bytes of each large request body")
	pages := flag.Int("pages", 4, "reviewers loading the page's request during a review phase")
	pageEvery := flag.Duration("page-every", 100*time.Millisecond, "each reviewer's pause between two loads (a person takes seconds; 0 hammers the review handler, which then measures the CPU it takes from the gateway's process)")
	maxContent := flag.String("max-content", "default", `the route's max_content; "default" leaves the gateway's default, "" leaves the line out (a build without it)`)
	smoke := flag.Bool("smoke", false, "seconds: 8 entries of 1 MB, one round of 3 s phases, the ratio reported but not checked (CI's check that it still works)")
	storeTimeout := flag.String("store-timeout", "", "the limiter's store_timeout (default the gateway's, 50ms): a loaded machine may need more to tell the reviews' effect from its own")
	flag.Parse()
	maxRatio := 2.0
	if *smoke {
		*duration, *rounds, *entries, *pad, maxRatio = 3*time.Second, 1, 8, 1_000_000, 0
	}
	if err := run(maxRatio, *pageEvery, *bin, *duration, *rounds, *concurrency, *entries, *pad, *pages, *maxContent, *storeTimeout); err != nil {
		fmt.Fprintln(os.Stderr, "reviewload:", err)
		os.Exit(1)
	}
}

func run(maxRatio float64, pageEvery time.Duration, bin string, duration time.Duration, rounds, concurrency, entries, pad, pages int, maxContent, storeTimeout string) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "systemone-reviewload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		if bin, err = harness.BuildGateway(ctx, dir); err != nil {
			return err
		}
	}
	rs, err := harness.StartRedis(dir)
	if err != nil {
		return err
	}
	defer rs.Stop()
	sim, simURL, err := harness.StartSimulator(dir, bin)
	if err != nil {
		return err
	}
	defer sim.Stop()
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	content := "include_content"
	switch maxContent {
	case "default", "":
	default:
		content += "\n\t\t\t\tmax_content " + maxContent
	}
	limits := ""
	if storeTimeout != "" {
		limits = "store_timeout " + storeTimeout
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	gw, err := harness.StartCaddy("gateway", dir, bin, fmt.Sprintf(`
:%d {
	bind 127.0.0.1
	handle_path /review/* {
		systemone_review {
			redis %[2]s
			stream %[3]s
		}
	}
	handle {
		systemone {
			redis %[2]s
			max_body 8MiB
			limits {
				requests_per_minute 10000000
				tokens_per_second   10000000
				token_burst         10000000
				%[6]s
			}
			route {
				pin service-1.0.0 {
					noul   0.8
					choice 0.6
					score  0.5
				}
				queue %[3]s maxlen 1000
				%[4]s
			}
		}
		reverse_proxy %[5]s
	}
}
`, port, rs.URL(), stream, content, strings.TrimPrefix(simURL, "http://"), limits), []string{addr})
	if err != nil {
		return err
	}
	defer gw.Stop()
	base := "http://" + addr
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}

	// The large entries: padded bodies, routed human, queued, one at a
	// time; an entry the queue lost (its write timed out on a loaded
	// machine, which the gateway logs) is sent again.
	large := strings.Replace(evalBody("late"), `,"questions"`, strings.Repeat(" ", max(0, pad-len(evalBody("late"))))+`,"questions"`, 1)
	marks := []mark{{"seeding", time.Now()}}
	resent := 0
	for n := int64(0); n < int64(entries); {
		if status, err := post(ctx, client, base, large, "0.3"); status != 200 {
			return fmt.Errorf("a large request: %d %v", status, err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			got, err := rs.Client.XLen(ctx, stream).Result()
			if err == nil && got > n {
				n = got
				break
			}
			if time.Now().After(deadline) {
				resent++
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if resent > entries {
			return fmt.Errorf("the queue lost more than %d large entries", entries)
		}
	}
	mem, _ := rs.Client.MemoryUsage(ctx, stream).Result()
	contentMem, _ := rs.Client.MemoryUsage(ctx, stream+":content").Result()
	fmt.Printf("%d large entries (%d-byte bodies, %d sent again): stream %.1f kB, content stream %.1f MB in Redis\n",
		entries, len(large), resent, float64(mem)/1e3, float64(contentMem)/1e6)

	// A warm-up: connections, the limiter's buckets, the Go runtime.
	marks = append(marks, mark{"warm-up", time.Now()})
	evaluate(ctx, client, base, concurrency, 2*time.Second, 0, 0)
	var alone, withReviews []phase
	for r := range rounds {
		marks = append(marks, mark{fmt.Sprintf("round %d alone", r+1), time.Now()})
		a := evaluate(ctx, client, base, concurrency, duration, 0, 0)
		fmt.Printf("round %d alone:        %s\n", r+1, a)
		alone = append(alone, a)
		marks = append(marks, mark{fmt.Sprintf("round %d with reviews", r+1), time.Now()})
		p := evaluate(ctx, client, base, concurrency, duration, pages, pageEvery)
		fmt.Printf("round %d with reviews: %s\n", r+1, p)
		withReviews = append(withReviews, p)
	}
	rss, _ := harness.RSS(gw.PID())
	logText, _ := os.ReadFile(dir + "/gateway.caddy.log")
	lostIn := lostByPhase(logText, marks)
	lost := 0
	for name, n := range lostIn {
		if strings.HasSuffix(name, "with reviews") {
			lost += n
		}
	}
	fmt.Printf("\"redis lost\" log entries by phase: %v\n", lostIn)
	a99, p99 := median(alone, func(p phase) time.Duration { return p.p99 }), median(withReviews, func(p phase) time.Duration { return p.p99 })
	a50, p50 := median(alone, func(p phase) time.Duration { return p.p50 }), median(withReviews, func(p phase) time.Duration { return p.p50 })
	var bad, pageLoads, pageBad int
	for _, p := range append(slices.Clone(alone), withReviews...) {
		bad += p.bad
		pageLoads += p.pages
		pageBad += p.pagesBad
	}
	ratio := float64(p99) / float64(a99)
	fmt.Printf("\nmedians over %d rounds: p50 %v alone, %v with reviews; p99 %v alone, %v with reviews: ratio %.2f\n", rounds, a50, p50, a99, p99, ratio)
	fmt.Printf("evaluations not 200: %d; page loads %d (%d not 200); \"redis lost\" while reviews ran: %d; gateway RSS %.0f MB\n",
		bad, pageLoads, pageBad, lost, float64(rss)/1e6)
	switch {
	case bad > 0:
		return fmt.Errorf("%d evaluations answered other than 200", bad)
	case lost > 0:
		return fmt.Errorf("the gateway logged \"redis lost\" %d times while reviews ran", lost)
	case pageBad > 0:
		return fmt.Errorf("%d page loads answered other than 200", pageBad)
	case maxRatio > 0 && ratio > maxRatio:
		return fmt.Errorf("p99 with reviews %v is %.2fx the p99 alone %v (at most %gx)", p99, ratio, a99, maxRatio)
	}
	return nil
}

// mark is when a phase started.
type mark struct {
	name  string
	start time.Time
}

// lostByPhase counts the gateway's "redis lost" log entries by the phase
// they fell in.
func lostByPhase(log []byte, marks []mark) map[string]int {
	out := map[string]int{}
	for _, line := range bytes.Split(log, []byte("\n")) {
		var e struct {
			Msg string  `json:"msg"`
			TS  float64 `json:"ts"`
		}
		if json.Unmarshal(line, &e) != nil || e.Msg != "redis lost" {
			continue
		}
		at := time.Unix(0, int64(e.TS*1e9))
		name := "before seeding"
		for _, m := range marks {
			if !at.Before(m.start) {
				name = m.name
			}
		}
		out[name]++
	}
	return out
}

// phase is what one phase measured.
type phase struct {
	requests, bad   int
	p50, p99        time.Duration
	pages, pagesBad int
	page50          time.Duration
}

func (p phase) String() string {
	s := fmt.Sprintf("%6d evaluations, p50 %8v p99 %8v, %d not 200", p.requests, p.p50, p.p99, p.bad)
	if p.pages > 0 {
		s += fmt.Sprintf("; %d page loads, p50 %v, %d not 200", p.pages, p.page50, p.pagesBad)
	}
	return s
}

// evaluate runs concurrency evaluation clients for duration (confident
// answers: routed auto, never queued), with pages clients loading the
// review page's request in a loop meanwhile.
func evaluate(ctx context.Context, client *http.Client, base string, concurrency int, duration time.Duration, pages int, pageEvery time.Duration) phase {
	stop := time.Now().Add(duration)
	body := evalBody("on time")
	var mu sync.Mutex
	var lat, pageLat []time.Duration
	var p phase
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for time.Now().Before(stop) {
				start := time.Now()
				status, _ := post(ctx, client, base, body, "0.99")
				d := time.Since(start)
				mu.Lock()
				lat = append(lat, d)
				if status != 200 {
					p.bad++
				}
				mu.Unlock()
			}
		})
	}
	for range pages {
		wg.Go(func() {
			for time.Now().Before(stop) {
				start := time.Now()
				status := get(ctx, client, base+"/review/items?unlabeled=1&limit=1")
				d := time.Since(start)
				mu.Lock()
				pageLat = append(pageLat, d)
				if status != 200 {
					p.pagesBad++
				}
				mu.Unlock()
				time.Sleep(pageEvery)
			}
		})
	}
	wg.Wait()
	slices.Sort(lat)
	slices.Sort(pageLat)
	p.requests, p.pages = len(lat), len(pageLat)
	p.p50, p.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
	p.page50 = percentile(pageLat, 0.5)
	return p
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func median(ps []phase, f func(phase) time.Duration) time.Duration {
	v := make([]time.Duration, len(ps))
	for i, p := range ps {
		v[i] = f(p)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// evalBody asks three questions about state.
func evalBody(state string) string {
	return `{"state":"` + state + `","questions":{` +
		`"n":{"type":"noul","instructions":"Was it late?"},` +
		`"c":{"type":"choice","instructions":"Who is at fault?","criteria":{"yes":null,"no":null}},` +
		`"s":{"type":"score","instructions":"How bad?","criteria":["fine","meh","bad"]}}}`
}

// post sends an evaluation whose every answer has the given confidence
// (the simulator's X-Simulator-Confidence) and returns its status.
func post(ctx context.Context, client *http.Client, base, body, confidence string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/systemone", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer reviewload-key")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Simulator-Confidence", fmt.Sprintf(`{"n":%[1]s,"c":%[1]s,"s":%[1]s}`, confidence))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func get(ctx context.Context, client *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
