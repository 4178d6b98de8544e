package handlers_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/simulator"
)

func int64p(n int64) *int64 { return &n }

// unlimitedSimulator is the simulator with its own upstream limits off, so
// only the gateway's limits are under test.
func unlimitedSimulator(t *testing.T) *gatewaytest.Upstream {
	return newSimulator(t, simulator.Handler{RequestsPerMinute: int64p(0), TokensPerSecond: int64p(0)})
}

func TestRequestsPerMinute(t *testing.T) {
	for _, store := range []string{"in-process", "redis"} {
		t.Run(store, func(t *testing.T) {
			sim := unlimitedSimulator(t)
			block := "\t\tlimits {\n\t\t\trequests_per_minute 300\n"
			if store == "redis" {
				block = "\t\tredis " + redistest.Start(t).URL() + "\n" + block + "\t\t\tstore_timeout 2s\n"
			}
			block += "\t\t}\n"
			sites, url := site(t, sim.Addr(), block)
			gatewaytest.Load(t, sites)

			// The bucket refills at 5 a second while the requests run, so
			// 300 plus what refilled get through, then the first 429.
			started := time.Now()
			admitted := 0
			var resp *http.Response
			var body []byte
			for i := 1; i <= 400; i++ {
				resp, body = post(t, url, "k", smallBody)
				if resp.StatusCode != 200 {
					break
				}
				admitted++
				if resp.Header.Get("X-RateLimit-Limit-Requests") != "300" || resp.Header.Get("X-RateLimit-Limit-Tokens") != "64000" ||
					resp.Header.Get("X-RateLimit-Remaining-Tokens") == "" || resp.Header.Get("X-RateLimit-Remaining-Requests") == "" {
					t.Fatalf("request %d: rate-limit headers %v", i, resp.Header)
				}
				if i == 1 && resp.Header.Get("X-RateLimit-Remaining-Requests") != "299" {
					t.Errorf("first request: remaining %q, want 299", resp.Header.Get("X-RateLimit-Remaining-Requests"))
				}
			}
			refilled := int(time.Since(started).Seconds()*5) + 1
			if admitted < 300 || admitted > 300+refilled {
				t.Errorf("%d admitted before the first 429, want 300..%d", admitted, 300+refilled)
			}
			if resp.StatusCode != 429 || resp.Header.Get("X-Gateway-Reject") != "rate_limited" || resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("first refusal: %d %q retry-after %q: %s", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), resp.Header.Get("Retry-After"), body)
			}
			var d struct{ Detail string }
			_ = json.Unmarshal(body, &d)
			if !strings.HasPrefix(d.Detail, "Rate limit exceeded: 300 requests per minute for organization key-") {
				t.Errorf("detail %q", d.Detail)
			}
			if resp.Header.Get("X-RateLimit-Remaining-Requests") != "0" {
				t.Errorf("429 remaining %q", resp.Header.Get("X-RateLimit-Remaining-Requests"))
			}
			if n := sim.Calls(); n != int64(admitted) {
				t.Errorf("%d upstream calls, want the %d admitted", n, admitted)
			}
			// Another key is another organization with buckets of its own.
			if resp, _ := post(t, url, "other-key", smallBody); resp.StatusCode != 200 {
				t.Errorf("another org: %d", resp.StatusCode)
			}
		})
	}
}

// A request estimated far over the token burst is admitted once the bucket
// is full (its charge is capped at the burst), then settled to the
// upstream's usage.
func TestLargeRequestAndSettlement(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), "\t\tlimits {\n\t\t\ttokens_per_second 1000\n\t\t\ttoken_burst 64000\n\t\t}\n")
	gatewaytest.Load(t, sites)

	big := `{"state":"` + strings.Repeat("lorem ipsum dolor sit amet ", 12000) + `","questions":{"q":{"type":"noul","instructions":"x"}}}`
	resp, body := post(t, url, "k", big)
	// The simulator counts ~72k tokens and refuses over 64k: the gateway
	// admitted it (capped charge) and refunds it (not billed).
	if resp.Header.Get("X-Gateway-Reject") != "" {
		t.Fatalf("a request over the burst was refused at the edge: %d %s", resp.StatusCode, body)
	}
	if rem := resp.Header.Get("X-RateLimit-Remaining-Tokens"); rem != "0" {
		t.Errorf("remaining tokens %q after a capped charge, want 0", rem)
	}
}

// Several keys mapped to one org share its buckets; an unknown key is
// refused with unknown_keys reject; a client's org_header is ignored when
// the option is off.
func TestOrgKeysAndHeader(t *testing.T) {
	sim := unlimitedSimulator(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	digest := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	if err := os.WriteFile(keys, []byte(fmt.Sprintf(`{%q:"acme",%q:"acme"}`, digest("k1"), digest("k2"))), 0o600); err != nil {
		t.Fatal(err)
	}
	sites, url := site(t, sim.Addr(), "\t\torg_keys "+keys+"\n\t\tunknown_keys reject\n\t\tlimits {\n\t\t\trequests_per_minute 2\n\t\t}\n")
	g := gatewaytest.Load(t, sites)

	post(t, url, "k1", smallBody)
	post(t, url, "k2", smallBody)
	resp, body := post(t, url, "k1", smallBody, "X-Org-Id", "someone-else")
	if resp.StatusCode != 429 || !strings.Contains(string(body), "for organization acme") {
		t.Errorf("third request of org acme: %d %s", resp.StatusCode, body)
	}
	resp, _ = post(t, url, "stranger", smallBody)
	if resp.StatusCode != 401 || resp.Header.Get("X-Gateway-Reject") != "invalid_api_key" {
		t.Errorf("unknown key: %d", resp.StatusCode)
	}
	for _, e := range g.Entries() {
		if e["org"] == "someone-else" {
			t.Error("a client-sent org header was trusted with org_header off")
		}
	}
	if log := string(g.RawLog()); strings.Contains(log, "k1") || strings.Contains(log, "stranger") || strings.Contains(log, digest("k1")) {
		t.Error("the log holds a key or its full digest")
	}
}

// With org_header, the org comes from the header a preceding handler sets.
func TestOrgHeader(t *testing.T) {
	sim := unlimitedSimulator(t)
	port := gatewaytest.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	g := gatewaytest.Load(t, fmt.Sprintf(`:%d {
	request_header X-Org-Id tenant-7
	systemone {
		org_header X-Org-Id
		limits {
			requests_per_minute 1
		}
	}
	reverse_proxy %s
}
`, port, sim.Addr()))
	post(t, url, "k1", smallBody)
	resp, body := post(t, url, "k2", smallBody)
	if resp.StatusCode != 429 || !strings.Contains(string(body), "organization tenant-7") {
		t.Errorf("second key of the same header org: %d %s", resp.StatusCode, body)
	}
	if e := g.Entries(); len(e) == 0 || e[0]["org"] != "tenant-7" {
		t.Errorf("log org %v", e)
	}
}

// The upstream's own 429 holds the org at the edge until its retry-after.
func TestUpstream429HoldsOrg(t *testing.T) {
	var calls atomic.Int64
	up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(429)
		_, _ = w.Write([]byte(`{"detail":"Rate limit exceeded: 1000 tokens per second"}`))
	}))
	sites, url := site(t, up.Addr(), "\t\tlimits\n")
	gatewaytest.Load(t, sites)

	resp, body := post(t, url, "k", smallBody)
	if resp.StatusCode != 429 || resp.Header.Get("X-Gateway-Reject") != "" || !strings.Contains(string(body), "1000 tokens") {
		t.Fatalf("first: %d %q %s, want the upstream's 429", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), body)
	}
	resp, _ = post(t, url, "k", smallBody)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || resp.Header.Get("X-Gateway-Reject") != "rate_limited" || ra < 29 || ra > 30 {
		t.Errorf("held: %d %q retry-after %d", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), ra)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1 (the held org is answered at the edge)", n)
	}
	if resp, _ := post(t, url, "another", smallBody); resp.Header.Get("X-Gateway-Reject") != "" {
		t.Error("another org was held")
	}
}

// Two gateway instances (two servers, each with its own handler and local
// state) on one Redis enforce one combined limit, counted at the upstream.
func TestTwoInstancesShareRedis(t *testing.T) {
	sim := unlimitedSimulator(t)
	redis := redistest.Start(t)
	block := "\t\tredis " + redis.URL() + "\n\t\tlimits {\n\t\t\tstore_timeout 2s\n\t\t\trequests_per_minute 100\n\t\t}\n"
	a, urlA := site(t, sim.Addr(), block)
	b, urlB := site(t, sim.Addr(), block)
	gatewaytest.Load(t, a+b)

	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	started := time.Now()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			url := urlA
			if w%2 == 1 {
				url = urlB
			}
			for i := 0; i < 15; i++ {
				resp, _ := post(t, url, "shared", smallBody)
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}(w)
	}
	wg.Wait()
	// 240 requests against 100 per minute: 100 plus what refilled during
	// the run (100/60 per second), never 200.
	most := int64(100 + time.Since(started).Seconds()*100/60 + 1)
	if n := sim.Calls(); n < 100 || n > most || ok.Load() != n || limited.Load() != 240-n {
		t.Errorf("upstream saw %d, admitted %d, refused %d; want 100..%d in all", n, ok.Load(), limited.Load(), most)
	}
}

// With Redis down and on_store_error deny, evaluation calls get the 503.
func TestRedisDownDeny(t *testing.T) {
	sim := unlimitedSimulator(t)
	redis := redistest.Start(t)
	sites, url := site(t, sim.Addr(), "\t\tredis "+redis.URL()+"\n\t\tlimits {\n\t\t\ton_store_error deny\n\t\t}\n")
	gatewaytest.Load(t, sites)
	redis.Stop()
	resp, body := post(t, url, "k", smallBody)
	if resp.StatusCode != 503 || resp.Header.Get("X-Gateway-Reject") != "rate_limiter_unavailable" || resp.Header.Get("Retry-After") != "1" ||
		string(body) != `{"detail":"rate_limiter_unavailable"}` {
		t.Errorf("redis down, deny: %d %q %q %s", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), resp.Header.Get("Retry-After"), body)
	}
	if sim.Calls() != 0 {
		t.Error("a request reached the upstream while the limiter was unavailable")
	}
}

// The token estimate against the simulator's usage.input_tokens, over
// English, Chinese, mixed and structured payloads. The bound is loose: the
// estimator is documented as a pre-charge that settlement corrects.
func TestEstimatorError(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), "")
	g := gatewaytest.Load(t, sites)
	payloads := map[string]string{
		"english":    `{"state":"` + strings.Repeat("The customer asked for a refund because the parcel arrived damaged. ", 40) + `","questions":{"a":{"type":"noul","instructions":"Is a refund due?"},"b":{"type":"choice","instructions":"Tone?","criteria":{"angry":null,"calm":"no complaint"}}}}`,
		"chinese":    `{"state":"` + strings.Repeat("客户因为包裹损坏要求退款，并且对配送速度表示不满。", 40) + `","questions":{"a":{"type":"noul","instructions":"是否应该退款？"}}}`,
		"mixed":      `{"state":"` + strings.Repeat("订单 #4521 was late 三天, customer 很生气. ", 40) + `","questions":{"a":{"type":"score","instructions":"Severity","criteria":["low","medium","high"]}}}`,
		"structured": `{"state":{"messages":[` + strings.Repeat(`{"role":"user","content":"Where is my order 4521?"},{"role":"assistant","content":"It ships tomorrow."},`, 20) + `{"role":"user","content":"ok"}]},"questions":{"a":{"type":"noul","instructions":"Was the user satisfied?"}}}`,
	}
	for name, body := range payloads {
		resp, text := post(t, url, "k", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, text)
		}
	}
	for _, e := range g.Entries() {
		est, actual := e["tokens_estimated"].(float64), e["tokens_input"].(float64)
		ratio := est / actual
		t.Logf("estimate %.0f, usage %.0f, ratio %.2f", est, actual, ratio)
		if ratio < 0.5 || ratio > 2 {
			t.Errorf("estimate %.0f vs usage %.0f: off by more than 2x", est, actual)
		}
	}
}

// Answers the gateway gives itself (413, 422) count one request each, charge
// no tokens and carry the headers of that admission; once the requests
// bucket is empty they are refused like any request, so a client cannot
// make the gateway read and parse bodies for free. A 401 has no org, so no
// buckets to report.
func TestEarlyAnswersCountOneRequest(t *testing.T) {
	for _, store := range []string{"in-process", "redis"} {
		t.Run(store, func(t *testing.T) {
			sim := unlimitedSimulator(t)
			block := "\t\tmax_body 1KiB\n\t\tlimits {\n\t\t\trequests_per_minute 4\n\t\t\ttokens_per_second 1\n\t\t}\n"
			if store == "redis" {
				block = "\t\tredis " + redistest.Start(t).URL() + "\n" + block
			}
			sites, url := site(t, sim.Addr(), block)
			gatewaytest.Load(t, sites)
			for i, body := range []string{`{"state":"s"}`, `{"state":"` + strings.Repeat("x", 2048) + `"}`, `not json`, `[]`} {
				resp, _ := post(t, url, "k", body)
				if resp.StatusCode != 422 && resp.StatusCode != 413 ||
					resp.Header.Get("X-RateLimit-Limit-Requests") != "4" || resp.Header.Get("X-RateLimit-Remaining-Requests") != strconv.Itoa(3-i) ||
					resp.Header.Get("X-RateLimit-Limit-Tokens") != "64000" || resp.Header.Get("X-RateLimit-Remaining-Tokens") != "64000" {
					t.Errorf("refusal %d: %d %v, want %d requests and every token left", i, resp.StatusCode, resp.Header, 3-i)
				}
			}
			resp, body := post(t, url, "k", smallBody)
			if err := contractAnswer(resultOf(resp, body), "rate_limited"); err != nil {
				t.Errorf("a request from an org that spent its limit on invalid bodies: %v", err)
			}
			if n := sim.Calls(); n != 0 {
				t.Errorf("%d upstream calls, want none", n)
			}
			if resp, _ := post(t, url, "", smallBody); resp.Header.Get("X-RateLimit-Limit-Requests") != "" {
				t.Error("401 carries rate-limit headers")
			}
		})
	}
}

// An org this instance knows to be over its per-minute limit is refused
// before its body is read: a request whose body never arrives gets its 429
// at once (a gateway reading the body would wait for it).
func TestKnownOverLimitRefusedBeforeTheBody(t *testing.T) {
	for _, store := range []string{"in-process", "redis"} {
		t.Run(store, func(t *testing.T) {
			sim := unlimitedSimulator(t)
			block := "\t\tlimits {\n\t\t\trequests_per_minute 1\n\t\t}\n"
			if store == "redis" {
				block = "\t\tredis " + redistest.Start(t).URL() + "\n" + block
			}
			sites, url := site(t, sim.Addr(), block)
			gatewaytest.Load(t, sites)
			post(t, url, "k", smallBody)
			if resp, body := post(t, url, "k", smallBody); resp.StatusCode != 429 {
				t.Fatalf("second request: %d %s", resp.StatusCode, body)
			}
			conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Headers and a promise of a megabyte that never comes.
			fmt.Fprintf(conn, "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"state\":")
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer without the body: %v", err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			if err := contractAnswer(resultOf(resp, body), "rate_limited"); err != nil {
				t.Errorf("known over its limit: %v", err)
			}
		})
	}
}

// TestLocalAllowanceEndToEnd: two gateways (two sites, each its own
// handler and leases) share one org's Redis bucket of 60 requests a minute
// with `local_allowance 10% 10s` (leases of 6 requests). Alternating
// between them, the org gets its 60 requests within the bound of
// docs/limits.md#local-allowance
// ((N−1)·s + min(s, r·T) = 12 beyond exact admission, plus the refill of
// the run), at most (N−1)·s = 6 short of it, then the contract's 429; and
// Redis runs a fraction of the scripts exact admission would (without the
// option, this run costs more scripts than requests).
func TestLocalAllowanceEndToEnd(t *testing.T) {
	sim := unlimitedSimulator(t)
	srv := redistest.Start(t)
	block := "\t\tredis " + srv.URL() + "\n\t\tlimits {\n\t\t\trequests_per_minute 60\n\t\t\tlocal_allowance 10% 10s\n\t\t\tstore_timeout 2s\n\t\t}\n"
	sitesA, urlA := site(t, sim.Addr(), block)
	sitesB, urlB := site(t, sim.Addr(), block)
	gatewaytest.Load(t, sitesA+sitesB)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}

	started := time.Now()
	admitted := 0
	var resp *http.Response
	var body []byte
	for i := range 100 {
		url := urlA
		if i%2 == 1 {
			url = urlB
		}
		resp, body = post(t, url, "k", smallBody)
		if resp.StatusCode != 200 {
			break
		}
		admitted++
		if resp.Header.Get("X-RateLimit-Limit-Requests") != "60" || resp.Header.Get("X-RateLimit-Remaining-Requests") == "" {
			t.Fatalf("request %d: rate-limit headers %v", i, resp.Header)
		}
	}
	refilled := int(time.Since(started).Seconds()) + 1 // 1 request a second
	if admitted < 60-6 || admitted > 60+12+refilled {
		t.Errorf("%d admitted before the first refusal, want 54..%d", admitted, 72+refilled)
	}
	if resp.StatusCode != 429 || resp.Header.Get("X-Gateway-Reject") != "rate_limited" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("first refusal: %d %q retry-after %q: %s", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), resp.Header.Get("Retry-After"), body)
	}
	var d struct{ Detail string }
	_ = json.Unmarshal(body, &d)
	if !strings.HasPrefix(d.Detail, "Rate limit exceeded: 60 requests per minute for organization key-") {
		t.Errorf("detail %q", d.Detail)
	}
	stats, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	for line := range strings.SplitSeq(stats, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd+"calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				scripts += n
			}
		}
	}
	// About one lease per 6 requests per gateway, a few settlements and
	// the refusal's own call: far below one script per request.
	if scripts == 0 || scripts > (admitted+1)/2 {
		t.Errorf("%d scripts ran in Redis for %d requests, want leases to pay most of them", scripts, admitted+1)
	}
	t.Logf("%d admitted, %d scripts in Redis", admitted, scripts)
}
