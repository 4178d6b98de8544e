package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// TestReplayNeitherQueuedNorAudited: a request carrying X-Systemone-Replay: 1
// passes every policy as any other (limits count it, it is routed and its
// headers stamped, the upstream gets it unchanged, header included), but no
// review entry is written for it, though it routes human and audit is 1.
func TestReplayNeitherQueuedNorAudited(t *testing.T) {
	sim := unlimitedSimulator(t)
	rs := redistest.Start(t)
	block := "\t\tredis " + rs.URL() + "\n\t\tlimits {\n\t\t\trequests_per_minute 100\n\t\t\tstore_timeout 2s\n\t\t}\n" +
		"\t\troute {\n\t\t\tpin service-1.0.0 {\n\t\t\t\tnoul 0.8\n\t\t\t}\n\t\t\tqueue review:replay maxlen 1000\n\t\t\taudit 1\n\t\t\tinclude_content\n\t\t}\n"
	sites, url := site(t, sim.Addr(), block)
	gatewaytest.Load(t, sites)

	low := []string{"X-Simulator-Confidence", `{"q":0.5}`}
	for i, conf := range []string{`{"q":0.5}`, `{"q":1}`} {
		resp, text := post(t, url, "k", stateBody("replayed"), "X-Simulator-Confidence", conf, "X-Systemone-Replay", "1")
		wantRoute := []string{"human", "auto"}[i]
		if resp.StatusCode != 200 || resp.Header.Get("X-Route") != wantRoute || resp.Header.Get("X-Route-Model") != "service-1.0.0" ||
			resp.Header.Get("X-RateLimit-Remaining-Requests") != []string{"99", "98"}[i] {
			t.Fatalf("replayed request %d: %d %v %s", i, resp.StatusCode, resp.Header, text)
		}
		if got := sim.Last().Header.Get("X-Systemone-Replay"); got != "1" {
			t.Errorf("the upstream got X-Systemone-Replay %q, want it forwarded unchanged", got)
		}
	}
	// Any value but 1 is an ordinary request: queued and audited.
	resp, _ := post(t, url, "k", stateBody("ordinary"), append(low, "X-Systemone-Replay", "0")...)
	if resp.StatusCode != 200 || resp.Header.Get("X-Route") != "human" {
		t.Fatalf("ordinary request: %d %v", resp.StatusCode, resp.Header)
	}

	client := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer client.Close()
	var entries []redis.XMessage
	waitFor(t, func() bool {
		entries, _ = client.XRange(context.Background(), "review:replay", "-", "+").Result()
		return len(entries) > 0
	}, wait.Bound)
	// The enqueue is asynchronous and the replayed requests came first: a
	// queued replay would be in the stream by now, or very nearly (the
	// route package's TestEnqueueReplay checks it without a race).
	time.Sleep(100 * time.Millisecond)
	entries, _ = client.XRange(context.Background(), "review:replay", "-", "+").Result()
	if len(entries) != 1 || entries[0].Values["request_id"] != resp.Header.Get("X-Request-Id") || entries[0].Values["audit"] != "1" {
		t.Fatalf("stream entries %v, want only the ordinary request's, audited", entries)
	}
}
