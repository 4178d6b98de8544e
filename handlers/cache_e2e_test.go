package handlers_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/simulator"
)

// versionBody asks one noul question about state of the concrete version
// service-1.0.0: a request whose answer the cache stores.
func versionBody(state string) string {
	s, _ := json.Marshal(state)
	return `{"model":"service-1.0.0","state":` + string(s) + `,"questions":{"q":{"type":"noul","instructions":"Is this a complaint?"}}}`
}

const cacheRoute = "\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\tnoul 0.8\n\t\t\t}\n\t\t}\n"

// cacheCounts reads systemone_cache_requests_total from a metrics endpoint:
// hits and misses so far (the counters are the process's), and the
// evaluations systemone_requests_total counts as answered from the cache.
func cacheCounts(t *testing.T, metricsURL string) (hits, misses, cached float64) {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for label, into := range map[string]*float64{`systemone_cache_requests_total{result="hit"} `: &hits, `systemone_cache_requests_total{result="miss"} `: &misses} {
			if v, ok := strings.CutPrefix(line, label); ok {
				*into, _ = strconv.ParseFloat(v, 64)
			}
		}
		if strings.HasPrefix(line, "systemone_requests_total{") && strings.Contains(line, `outcome="cached"`) {
			n, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			cached += n
		}
	}
	return hits, misses, cached
}

// A hit answers the stored status, Content-Type, body bytes and
// x-request-id without the upstream; it still runs the limits (one request,
// no tokens, no budget), the guardrails and routing, and is logged and
// counted as a hit.
func TestCacheHitSkipsOnlyTheUpstream(t *testing.T) {
	sim := unlimitedSimulator(t)
	guard := newSimulator(t, simulator.Handler{})
	sites, url := site(t, sim.Addr(), "\t\tcache\n"+cacheRoute+guardrailsBlock(guard.URL, "")+
		"\t\tlimits {\n\t\t\tbudget 1 per day\n\t\t\tprice 1000\n\t\t}\n")
	metricsPort := gatewaytest.FreePort(t)
	g := gatewaytest.Load(t, sites+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsPort))
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	hits0, misses0, cached0 := cacheCounts(t, metricsURL)

	body := versionBody("The parcel arrived two days late.")
	first, firstBody := post(t, url, "cache-key", body, "X-Simulator-Confidence", `{"q":0.95}`)
	if first.StatusCode != 200 || first.Header.Get("X-Cache") != "miss" {
		t.Fatalf("first: %d X-Cache %q: %s", first.StatusCode, first.Header.Get("X-Cache"), firstBody)
	}
	calls := sim.Calls()
	second, secondBody := post(t, url, "cache-key", body)
	if second.StatusCode != 200 || second.Header.Get("X-Cache") != "hit" {
		t.Fatalf("second: %d X-Cache %q: %s", second.StatusCode, second.Header.Get("X-Cache"), secondBody)
	}
	if sim.Calls() != calls {
		t.Error("a hit reached the upstream")
	}
	if !bytes.Equal(secondBody, firstBody) || second.Header.Get("Content-Type") != first.Header.Get("Content-Type") ||
		second.Header.Get("X-Request-Id") == "" || second.Header.Get("X-Request-Id") != first.Header.Get("X-Request-Id") {
		t.Errorf("hit %q %q %s, want %q %q %s", second.Header.Get("Content-Type"), second.Header.Get("X-Request-Id"), secondBody,
			first.Header.Get("Content-Type"), first.Header.Get("X-Request-Id"), firstBody)
	}
	if second.Header.Get("Content-Length") != strconv.Itoa(len(firstBody)) {
		t.Errorf("Content-Length %q", second.Header.Get("Content-Length"))
	}
	// Every step but the upstream ran.
	for _, h := range []string{"X-Route", "X-Route-Reason", "X-Route-Model", "X-Route-Confidence", "X-Route-Questions", "X-Guardrails-Risk", "X-Guardrails-Action"} {
		if second.Header.Get(h) == "" || second.Header.Get(h) != first.Header.Get(h) {
			t.Errorf("%s: hit %q, miss %q", h, second.Header.Get(h), first.Header.Get(h))
		}
	}
	// One request, no tokens, nothing billed.
	reqs := func(r *http.Response) int {
		n, _ := strconv.Atoi(r.Header.Get("X-RateLimit-Remaining-Requests"))
		return n
	}
	if reqs(second) != reqs(first)-1 {
		t.Errorf("requests remaining %d after a hit, %d before: want one request counted", reqs(second), reqs(first))
	}
	if second.Header.Get("X-RateLimit-Remaining-Tokens") == "" || second.Header.Get("X-Budget-Remaining") != first.Header.Get("X-Budget-Remaining") {
		t.Errorf("hit: tokens %q budget %q; miss: tokens %q budget %q", second.Header.Get("X-RateLimit-Remaining-Tokens"),
			second.Header.Get("X-Budget-Remaining"), first.Header.Get("X-RateLimit-Remaining-Tokens"), first.Header.Get("X-Budget-Remaining"))
	}
	// (The miss's header shows its admission before its settlement; two
	// hits have none between them.)
	third, _ := post(t, url, "cache-key", body)
	tokens := func(r *http.Response) int {
		n, _ := strconv.Atoi(r.Header.Get("X-RateLimit-Remaining-Tokens"))
		return n
	}
	if third.Header.Get("X-Cache") != "hit" || tokens(third) < tokens(second) {
		t.Errorf("tokens remaining fell from %d to %d over a hit (%q)", tokens(second), tokens(third), third.Header.Get("X-Cache"))
	}

	entries := g.Entries()
	if len(entries) != 3 {
		t.Fatalf("%d log entries", len(entries))
	}
	miss, hit := entries[0], entries[1]
	if miss["cache"] != "miss" || hit["cache"] != "hit" {
		t.Errorf("cache fields %v, %v", miss["cache"], hit["cache"])
	}
	if hit["tokens_input"] != nil || hit["cost_yuan"] != nil || hit["upstream_ms"] != nil || miss["tokens_input"] == nil {
		t.Errorf("hit tokens_input %v cost_yuan %v upstream_ms %v; miss tokens_input %v", hit["tokens_input"], hit["cost_yuan"], hit["upstream_ms"], miss["tokens_input"])
	}
	if hit["request_id"] != first.Header.Get("X-Request-Id") || hit["model"] != "service-1.0.0" || hit["route"] != "auto" || hit["status"] != 200.0 {
		t.Errorf("hit entry %v", hit)
	}
	if hit["budget_remaining_yuan"] != miss["budget_remaining_yuan"] {
		t.Errorf("budget_remaining_yuan %v after the hit, %v after the miss", hit["budget_remaining_yuan"], miss["budget_remaining_yuan"])
	}
	hits, misses, cached := cacheCounts(t, metricsURL)
	if hits-hits0 != 2 || misses-misses0 != 1 || cached-cached0 != 2 {
		t.Errorf("systemone_cache_requests_total: +%v hits, +%v misses, and +%v requests_total{outcome=\"cached\"}, want +2, +1 and +2",
			hits-hits0, misses-misses0, cached-cached0)
	}

	// A request the gateway refuses before the upstream step carries no
	// X-Cache and is logged with an empty cache field.
	refused, _ := post(t, url, "cache-key", `{"model":"service-1.0.0"}`)
	if refused.StatusCode != 422 || refused.Header.Get("X-Cache") != "" {
		t.Errorf("422: %d X-Cache %q", refused.StatusCode, refused.Header.Get("X-Cache"))
	}
	if e := g.Entries(); e[len(e)-1]["cache"] != "" {
		t.Errorf("422 logged cache %v", e[len(e)-1]["cache"])
	}
}

// Entries are exact: another org, another byte, another version, no model
// or an alias is a miss; answers that are not 200, cannot be read, or are
// over max_size are never stored.
func TestCacheIsExact(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), "\t\tcache {\n\t\t\tmax_size 1KiB\n\t\t}\n"+cacheRoute)
	gatewaytest.Load(t, sites)
	body := versionBody("exactness")
	expect := func(what, key, body, want string, header ...string) {
		t.Helper()
		calls := sim.Calls()
		resp, b := post(t, url, key, body, header...)
		if got := resp.Header.Get("X-Cache"); got != want {
			t.Errorf("%s: X-Cache %q, want %q (%d %s)", what, got, want, resp.StatusCode, b)
		}
		if forwarded := sim.Calls() > calls; forwarded != (want == "miss") {
			t.Errorf("%s: forwarded %v", what, forwarded)
		}
	}
	expect("first", "org-a", body, "miss")
	expect("again", "org-a", body, "hit")
	expect("another org", "org-b", body, "miss")
	expect("another org, again", "org-b", body, "hit")
	expect("one byte more", "org-a", body+" ", "miss")
	expect("another version", "org-a", strings.Replace(body, "service-1.0.0", "service-1.0.1", 1), "miss")
	expect("another version, again", "org-a", strings.Replace(body, "service-1.0.0", "service-1.0.1", 1), "hit")

	noModel := stateBody("no model named")
	expect("no model", "org-a", noModel, "miss")
	expect("no model, again", "org-a", noModel, "miss")
	alias := `{"model":"service-latest",` + noModel[1:]
	expect("an alias", "org-a", alias, "miss")
	expect("an alias, again", "org-a", alias, "miss")

	failed := versionBody("first answered 500")
	expect("a 500", "org-a", failed, "miss", "X-Simulator-Status", "500")
	expect("after a 500", "org-a", failed, "miss")
	expect("after the 200", "org-a", failed, "hit")

	// The simulator's answer to a request of many questions is over 1KiB.
	qs := map[string]any{}
	for i := range 40 {
		qs[fmt.Sprintf("question-%d", i)] = map[string]any{"type": "noul", "instructions": "Is this a complaint?"}
	}
	large, _ := json.Marshal(map[string]any{"model": "service-1.0.0", "state": "large answer", "questions": qs})
	expect("over max_size", "org-a", string(large), "miss")
	expect("over max_size, again", "org-a", string(large), "miss")
}

// An answer the gateway cannot read (not JSON, no model) is never stored,
// though the upstream called it a 200.
func TestCacheNeverStoresUnreadableAnswers(t *testing.T) {
	up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Test-Answer") == "no-model" {
			_, _ = io.WriteString(w, `{"answers":{"q":{"type":"noul","noul":0.9}},"usage":{"input_tokens":5}}`)
			return
		}
		_, _ = io.WriteString(w, `{"model":"service-1.0.0","answers":`) // cut short
	}))
	sites, url := site(t, up.Addr(), "\t\tcache\n"+cacheRoute)
	gatewaytest.Load(t, sites)
	for _, kind := range []string{"broken", "no-model"} {
		body := versionBody(kind)
		for i := range 2 {
			resp, _ := post(t, url, "k", body, "X-Test-Answer", kind)
			if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "miss" || resp.Header.Get("X-Route-Reason") != "unreadable_response" && kind == "broken" {
				t.Errorf("%s, request %d: %d X-Cache %q reason %q", kind, i, resp.StatusCode, resp.Header.Get("X-Cache"), resp.Header.Get("X-Route-Reason"))
			}
		}
	}
	if up.Calls() != 4 {
		t.Errorf("%d upstream calls, want every request forwarded", up.Calls())
	}
}

// A gzipped answer is stored as the upstream sent it: a client that
// accepts gzip gets those bytes, one that does not gets them decoded.
func TestCacheKeepsTheContentCoding(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), "\t\tcache\n"+cacheRoute)
	gatewaytest.Load(t, sites)
	qs := map[string]any{}
	for i := range 20 {
		qs[fmt.Sprintf("q%d", i)] = map[string]any{"type": "noul", "instructions": "Is this a complaint?"}
	}
	body, _ := json.Marshal(map[string]any{"model": "service-1.0.0", "state": "compressed", "questions": qs})

	first, gz := post(t, url, "k", string(body), "Accept-Encoding", "gzip")
	if first.Header.Get("Content-Encoding") != "gzip" || first.Header.Get("X-Cache") != "miss" {
		t.Fatalf("first: Content-Encoding %q X-Cache %q", first.Header.Get("Content-Encoding"), first.Header.Get("X-Cache"))
	}
	hit, hitBody := post(t, url, "k", string(body), "Accept-Encoding", "gzip, deflate")
	if hit.Header.Get("X-Cache") != "hit" || hit.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(hitBody, gz) {
		t.Errorf("hit for a gzip client: X-Cache %q Content-Encoding %q, same bytes %v", hit.Header.Get("X-Cache"), hit.Header.Get("Content-Encoding"), bytes.Equal(hitBody, gz))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	for _, accept := range []string{"", "gzip;q=0", "br"} {
		resp, b := post(t, url, "k", string(body), "Accept-Encoding", accept)
		if resp.Header.Get("X-Cache") != "hit" || resp.Header.Get("Content-Encoding") != "" || !bytes.Equal(b, plain) ||
			resp.Header.Get("X-Route") == "" || resp.Header.Get("Content-Length") != strconv.Itoa(len(plain)) {
			t.Errorf("Accept-Encoding %q: X-Cache %q Content-Encoding %q route %q, decoded %v", accept, resp.Header.Get("X-Cache"),
				resp.Header.Get("Content-Encoding"), resp.Header.Get("X-Route"), bytes.Equal(b, plain))
		}
	}
	if sim.Calls() != 1 {
		t.Errorf("%d upstream calls", sim.Calls())
	}
}

// A reload with new thresholds re-routes hits: routing is computed at each
// hit, never stored. The in-process entries survive a reload that keeps
// the cache settings, and only that.
func TestCacheReloadReroutesHits(t *testing.T) {
	sim := unlimitedSimulator(t)
	port := gatewaytest.FreePort(t)
	config := func(threshold, cache string) string {
		return fmt.Sprintf(":%d {\n\tsystemone {\n\t\t%s\n\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\tnoul %s\n\t\t\t}\n\t\t}\n\t}\n\treverse_proxy %s\n}\n", port, cache, threshold, sim.Addr())
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	g := gatewaytest.Load(t, config("0.8", "cache"))
	body := versionBody("re-route me")
	first, _ := post(t, url, "k", body, "X-Simulator-Confidence", `{"q":0.95}`) // confidence 0.90
	if first.Header.Get("X-Route") != "auto" || first.Header.Get("X-Cache") != "miss" {
		t.Fatalf("first: route %q cache %q", first.Header.Get("X-Route"), first.Header.Get("X-Cache"))
	}

	g.Reload(config("0.95", "cache"))
	hit, _ := post(t, url, "k", body)
	if hit.Header.Get("X-Cache") != "hit" {
		t.Fatalf("after a reload that kept the cache settings: X-Cache %q", hit.Header.Get("X-Cache"))
	}
	if hit.Header.Get("X-Route") != "human" || hit.Header.Get("X-Route-Reason") != "low_confidence" || hit.Header.Get("X-Route-Confidence") != "0.90" {
		t.Errorf("hit under the new threshold: %q %q %q", hit.Header.Get("X-Route"), hit.Header.Get("X-Route-Reason"), hit.Header.Get("X-Route-Confidence"))
	}

	g.Reload(config("0.95", "cache {\n\t\t\tttl 1h\n\t\t}"))
	if resp, _ := post(t, url, "k", body); resp.Header.Get("X-Cache") != "miss" {
		t.Errorf("after a reload with other cache settings: X-Cache %q", resp.Header.Get("X-Cache"))
	}
	if sim.Calls() != 2 {
		t.Errorf("%d upstream calls, want 2", sim.Calls())
	}
}

// The breaker step runs for a hit: an open breaker refuses it as any
// request for that model, and a hit counts neither as a success nor as a
// failure of the upstream.
func TestCacheHitMeetsTheBreaker(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), "\t\tcache\n\t\tbreaker {\n\t\t\tfailures 2\n\t\t\topen_for 1h\n\t\t}\n")
	gatewaytest.Load(t, sites)
	body := versionBody("breaker")
	post(t, url, "k", body)
	post(t, url, "k", versionBody("overloaded 1"), "X-Simulator-Overloaded", "1")
	// Were a hit a success, it would end the run of failures.
	if resp, _ := post(t, url, "k", body); resp.Header.Get("X-Cache") != "hit" {
		t.Fatalf("X-Cache %q", resp.Header.Get("X-Cache"))
	}
	post(t, url, "k", versionBody("overloaded 2"), "X-Simulator-Overloaded", "1")
	resp, b := post(t, url, "k", body)
	if resp.StatusCode != 529 || resp.Header.Get("X-Gateway-Reject") != "breaker_open" || resp.Header.Get("X-Cache") != "" {
		t.Errorf("a hit with the breaker open: %d %q X-Cache %q: %s", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), resp.Header.Get("X-Cache"), b)
	}
}

// With redis, two gateway instances (two processes) share the entries: one
// stores, the other answers from them, to the same org only. A hit is
// neither queued nor drawn by the audit: repeated identical requests,
// hits on either instance, leave exactly one queue entry.
func TestCacheSharedThroughRedis(t *testing.T) {
	sim := unlimitedSimulator(t)
	rs := redistest.Start(t)
	block := "\t\tredis " + rs.URL() + "\n\t\tcache\n\t\tlimits {\n\t\t\tstore_timeout 2s\n\t\t}\n" +
		"\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\tnoul 0.8\n\t\t\t}\n\t\t\tqueue review:all maxlen 100\n\t\t\taudit 1\n\t\t}\n"
	sitesA, urlA := site(t, sim.Addr(), block)
	sitesB, urlB := site(t, sim.Addr(), block)
	a := gatewaytest.Load(t, sitesA)
	b := gatewaytest.StartProcess(t, sitesB)

	body := versionBody("shared by two instances")
	first, firstBody := post(t, urlA, "shared-key", body)
	if first.Header.Get("X-Cache") != "miss" {
		t.Fatalf("A: X-Cache %q", first.Header.Get("X-Cache"))
	}
	hit, hitBody := post(t, urlB, "shared-key", body)
	if hit.Header.Get("X-Cache") != "hit" || !bytes.Equal(hitBody, firstBody) || hit.Header.Get("X-Request-Id") != first.Header.Get("X-Request-Id") {
		t.Fatalf("B: X-Cache %q, same body %v, request id %q want %q", hit.Header.Get("X-Cache"), bytes.Equal(hitBody, firstBody),
			hit.Header.Get("X-Request-Id"), first.Header.Get("X-Request-Id"))
	}
	if other, _ := post(t, urlB, "another-key", body); other.Header.Get("X-Cache") != "miss" {
		t.Errorf("another org on B: X-Cache %q", other.Header.Get("X-Cache"))
	}
	if sim.Calls() != 2 {
		t.Errorf("%d upstream calls, want 2", sim.Calls())
	}
	// Keys under key_prefix, one per stored answer and one per accepted
	// key (a hash, never the key), living their ttl.
	client := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer client.Close()
	keys, err := client.Keys(context.Background(), "systemone:cache:*").Result()
	records, _ := client.Keys(context.Background(), "systemone:cache:key:*").Result()
	// A miss whose upstream call lasted over 100 ms (a loaded machine)
	// left a marker, deleted in the background: not an entry.
	keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, "systemone:cache:run:") })
	if err != nil || len(keys) != 4 || len(records) != 2 {
		t.Errorf("cache keys %q %v, want the two orgs' entries and their keys' records", keys, err)
	}
	for _, k := range keys {
		if ttl := client.PTTL(context.Background(), k).Val(); ttl <= 9*time.Minute || ttl > 10*time.Minute {
			t.Errorf("%s lives %v, want ttl's 10m", k, ttl)
		}
		if v, _ := client.Get(context.Background(), k).Result(); strings.Contains(k+v, "shared-key") || strings.Contains(k+v, "another-key") {
			t.Errorf("%s holds a bearer key", k)
		}
	}
	if hitLog := b.Entries(); len(hitLog) != 2 || hitLog[0]["cache"] != "hit" || hitLog[1]["cache"] != "miss" {
		t.Errorf("B's log %v", hitLog)
	}
	if missLog := a.Entries(); len(missLog) != 1 || missLog[0]["cache"] != "miss" {
		t.Errorf("A's log %v", missLog)
	}

	// More hits on both instances: still one entry for the stored answer.
	for i := range 10 {
		url := urlA
		if i%2 == 1 {
			url = urlB
		}
		if resp, _ := post(t, url, "shared-key", body); resp.Header.Get("X-Cache") != "hit" {
			t.Fatalf("repeat %d: X-Cache %q", i, resp.Header.Get("X-Cache"))
		}
	}
	// audit 1: each routed 200 forwarded is queued, once: the two misses,
	// then one new request per instance. Each instance writes its entries
	// in order, so once the last two are there, any a hit wrote would be.
	for _, url := range []string{urlA, urlB} {
		if resp, _ := post(t, url, "shared-key", versionBody("the last, on "+url)); resp.Header.Get("X-Cache") != "miss" {
			t.Fatalf("a new body: X-Cache %q", resp.Header.Get("X-Cache"))
		}
	}
	var entries []redis.XMessage
	lasts := func() int {
		n := 0
		for _, e := range entries {
			if q, _ := e.Values["questions"].(string); e.Values["request_id"] != first.Header.Get("X-Request-Id") && q != "" {
				n++
			}
		}
		return n
	}
	wait.Until(t, "every forwarded answer's queue entry", func() bool {
		entries, _ = client.XRange(context.Background(), "review:all", "-", "+").Result()
		return lasts() >= 3
	})
	ids := 0
	for _, e := range entries {
		if e.Values["request_id"] == first.Header.Get("X-Request-Id") {
			ids++
		}
	}
	if len(entries) != 4 || ids != 1 {
		t.Errorf("%d queue entries, %d of them the stored answer's, want 4 and 1: a hit was queued or drawn", len(entries), ids)
	}
}

// A Redis that hangs or is gone degrades the cache to misses: every request
// is answered by the upstream, none fails.
func TestCacheRedisFailureIsAMiss(t *testing.T) {
	sim := unlimitedSimulator(t)
	rs := redistest.Start(t)
	proxy := faultproxy.Start(t, rs.Addr)
	sites, url := site(t, sim.Addr(), "\t\tredis redis://"+proxy.Addr()+"\n\t\tcache\n"+cacheRoute)
	g := gatewaytest.Load(t, sites)
	body := versionBody("redis fails")
	post(t, url, "k", body)
	// The client's first dial through the proxy may exceed the cache's
	// timeout on a loaded machine (a miss, and a second without Redis).
	hitWithin(t, url, "k", body, 5*time.Second)
	for _, fail := range []func(){proxy.BlackHole, proxy.Refuse, rs.Stop} {
		fail()
		for i := range 3 {
			calls := sim.Calls()
			resp, b := post(t, url, "k", body)
			if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "miss" || sim.Calls() != calls+1 {
				t.Fatalf("request %d with Redis failing: %d X-Cache %q: %s", i, resp.StatusCode, resp.Header.Get("X-Cache"), b)
			}
		}
	}
	warned := 0
	for _, e := range g.Log() {
		if e["msg"] == "answer cache: redis failing, answering misses" {
			warned++
		}
	}
	if warned < 1 || warned > 2 {
		t.Errorf("%d warnings, want one for the outage (and one for a slow first dial)", warned)
	}
}

// hitWithin posts body until it is answered from the cache.
func hitWithin(t *testing.T, url, key, body string, within time.Duration) {
	t.Helper()
	wait.Within(t, within, "a cache hit", func() error {
		resp, _ := post(t, url, key, body)
		if got := resp.Header.Get("X-Cache"); got != "hit" {
			return fmt.Errorf("X-Cache %q", got)
		}
		return nil
	})
}

// A hit costs nothing, so an org whose budget is spent still gets the
// answers it has already paid for; anything to be forwarded gets 402.
func TestCacheHitPastASpentBudget(t *testing.T) {
	sim := unlimitedSimulator(t)
	sites, url := site(t, sim.Addr(), "\t\tcache\n\t\tlimits {\n\t\t\tbudget 0.000001 per day\n\t\t\tprice 1000\n\t\t}\n")
	gatewaytest.Load(t, sites)
	body := versionBody("paid once")
	if resp, b := post(t, url, "k", body); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, url, "k", versionBody("not paid")); resp.StatusCode != 402 {
		t.Fatalf("a new request past the budget: %d %s", resp.StatusCode, b)
	}
	resp, b := post(t, url, "k", body)
	if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "hit" || resp.Header.Get("X-Budget-Remaining") != "0.00" {
		t.Errorf("a hit past the budget: %d X-Cache %q X-Budget-Remaining %q: %s", resp.StatusCode, resp.Header.Get("X-Cache"), resp.Header.Get("X-Budget-Remaining"), b)
	}
}
