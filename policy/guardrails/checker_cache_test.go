package guardrails

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/ttlstore"
	"github.com/systemone/systemone-gateway/internal/ttlstore/inprocess"
)

func TestCacheInProcess(t *testing.T) {
	svc := newService(t, answer(verdictJSON("中风险", []string{"色情"}, nil, "代答", "抱歉")))
	c := newChecker(t, Config{URL: svc.URL, Cache: caddy.Duration(time.Minute)})
	clock := testclock.New(time.Unix(1_700_000_000, 0))
	c.cache = newVerdictCache(nil, "", time.Minute, nil, clock.Now)
	ctx := context.Background()

	first := c.Check(ctx, []byte(`"同一段文字"`))
	second := c.Check(ctx, []byte(`  "同一段\u6587字"  `)) // same text, other JSON
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("service called %d times, want 1", n)
	}
	if first.Cached || !second.Cached {
		t.Errorf("cached: first %v second %v", first.Cached, second.Cached)
	}
	first.Cached, first.Elapsed, second.Cached, second.Elapsed = false, 0, false, 0
	if !reflect.DeepEqual(first, second) {
		t.Errorf("cached verdict %+v differs from %+v", second, first)
	}
	// A caller changing its verdict does not change the cache's.
	second.Categories[0] = "changed"
	if v := c.Check(ctx, []byte(`"同一段文字"`)); v.Categories[0] != "pornography" {
		t.Errorf("cache changed through a verdict: %q", v.Categories)
	}

	// Other text, other roles: other entries.
	c.Check(ctx, []byte(`"另一段"`))
	c.Check(ctx, []byte(`[{"role":"user","content":"同一段文字"}]`)) // same list as the string: shared
	c.Check(ctx, []byte(`[{"role":"assistant","content":"同一段文字"}]`))
	if n := svc.calls.Load(); n != 3 {
		t.Errorf("service called %d times, want 3", n)
	}

	// Expiry.
	clock.Advance(59 * time.Second)
	c.Check(ctx, []byte(`"同一段文字"`))
	if n := svc.calls.Load(); n != 3 {
		t.Errorf("before expiry: service called %d times, want 3", n)
	}
	clock.Advance(time.Second)
	if v := c.Check(ctx, []byte(`"同一段文字"`)); v.Cached {
		t.Error("an expired verdict was used")
	}
	if n := svc.calls.Load(); n != 4 {
		t.Errorf("after expiry: service called %d times, want 4", n)
	}
}

func TestCacheKeepsNoFailures(t *testing.T) {
	svc := newService(t, status(500, ``))
	c := newChecker(t, Config{URL: svc.URL, Cache: caddy.Duration(time.Minute), OnError: OnErrorAllow})
	ctx := context.Background()
	if v := c.Check(ctx, []byte(`"x"`)); v.Action != ActionUnchecked {
		t.Fatalf("verdict %+v", v)
	}
	svc.setReply(answer(passAnswer))
	if v := c.Check(ctx, []byte(`"x"`)); v.Action != ActionPass || v.Cached {
		t.Fatalf("verdict %+v, want a fresh pass", v)
	}
	if v := c.Check(ctx, []byte(`"x"`)); !v.Cached {
		t.Fatalf("verdict %+v, want cached", v)
	}
	if n := svc.calls.Load(); n != 2 {
		t.Errorf("service called %d times, want 2", n)
	}
}

func TestCacheAppliesCurrentPolicy(t *testing.T) {
	// The cache holds what the service said; each Checker decides by its own
	// settings (instances with other settings share a Redis cache).
	svc := newService(t, answer(verdictJSON("中风险", []string{"色情"}, nil, "代答", "")))
	c := newChecker(t, Config{URL: svc.URL, Cache: caddy.Duration(time.Minute)})
	c.Check(context.Background(), []byte(`"x"`))
	c.cfg.BlockCategory = []string{"pornography"}
	if v := c.Check(context.Background(), []byte(`"x"`)); !v.Cached || v.Action != ActionBlock {
		t.Errorf("verdict %+v, want a cached block", v)
	}
}

func TestCacheKey(t *testing.T) {
	msgs := []Message{{RoleUser, "ab"}, {RoleAssistant, "c"}}
	k := cacheKey("m", msgs)
	if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Fatalf("key %q is not hex SHA-256", k)
	}
	for _, other := range []string{
		cacheKey("m2", msgs),
		cacheKey("m", []Message{{RoleUser, "a"}, {RoleAssistant, "bc"}}),
		cacheKey("m", []Message{{RoleUser, "ab"}, {RoleUser, "c"}}),
		cacheKey("m", []Message{{RoleUser, "abc"}}),
		cacheKey("mu", []Message{{"ser", "ab"}, {RoleAssistant, "c"}}),
	} {
		if other == k {
			t.Errorf("different input, same key %s", k)
		}
	}
	if cacheKey("m", slices.Clone(msgs)) != k {
		t.Error("same input, different key")
	}
}

// The in-process verdict cache is bounded in entries and bytes: a verdict
// larger than the bound is not kept.
func TestMemoryCacheBounds(t *testing.T) {
	ctx := context.Background()
	m := newVerdictCache(nil, "", time.Minute, nil, time.Now).store.(*inprocess.Store)
	for i := range defaultCacheEntries + 10 {
		m.Set(ctx, ttlstore.Entry{Key: fmt.Sprint(i), Value: encodeVerdict(assessment{Risk: RiskNone}, time.Now())})
	}
	if m.Len() != defaultCacheEntries {
		t.Errorf("%d entries, want at most %d", m.Len(), defaultCacheEntries)
	}
	huge := encodeVerdict(assessment{Risk: RiskNone, SuggestAnswer: strings.Repeat("x", defaultCacheBytes)}, time.Now())
	m.Set(ctx, ttlstore.Entry{Key: "huge", Value: huge})
	if _, ok := decodeVerdict(m.Get(ctx, "huge")[0]); ok || m.Bytes() > defaultCacheBytes {
		t.Errorf("a verdict over the byte bound was kept (%d bytes held)", m.Bytes())
	}
}
