package cache

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/ttlstore"
	"github.com/systemone/systemone-gateway/internal/ttlstore/inprocess"
)

const body = `{"model":"service-1.0.0","state":"The parcel arrived two days late.","questions":{"late":{"type":"noul","instructions":"Is it late?"}}}`

const answered = `{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.9}}}`

var answer = Answer{Status: 200, ContentType: "application/json", RequestID: "req-1", Body: []byte(answered)}

// acme is an org_keys asker of org acme, with its key.
func asker(scope, org, key string) Asker {
	return Asker{Scope: scope, Org: org, KeySum: sha256.Sum256([]byte(key))}
}

var acme = asker("org_keys", "acme", "acme-key-1")

func newTestCache(maxSize int64) *Cache {
	return newWithStore(inprocess.New(inprocess.Limits{Entries: 100, TTL: time.Minute}, time.Now), time.Minute, maxSize)
}

// store answers who's request as a miss the upstream answered 200 would.
func store(c *Cache, who Asker, b string, a Answer) {
	ctx := context.Background()
	c.Record(ctx, c.Lookup(ctx, who, []byte(b)), 200, &a)
}

func hit(c *Cache, who Asker, b string) (Answer, bool) {
	l := c.Lookup(context.Background(), who, []byte(b))
	defer c.Done(l)
	return l.Hit()
}

func parse(t *testing.T, req, resp string) (*evaluation.Request, *evaluation.Response) {
	t.Helper()
	r, err := evaluation.ParseRequest([]byte(req))
	if err != nil {
		t.Fatal(err)
	}
	a, err := evaluation.ParseResponse([]byte(resp))
	if err != nil {
		a = nil
	}
	return r, a
}

// Only a readable, complete 200 from the concrete version the request
// named, within max_size, is taken.
func TestTakesOnlyCompleteAnswersOfTheVersionNamed(t *testing.T) {
	alias := strings.Replace(body, "service-1.0.0", "service-latest", 1)
	noModel := strings.Replace(body, `"model":"service-1.0.0",`, "", 1)
	for _, tc := range []struct {
		name      string
		req, resp string
		status    int
		maxSize   int64
		takes     bool
	}{
		{"a complete 200 from the version named", body, answered, 200, 1 << 20, true},
		{"model omitted", noModel, answered, 200, 1 << 20, false},
		{"an alias", alias, answered, 200, 1 << 20, false},
		{"another version answered", body, strings.Replace(answered, "1.0.0", "1.0.1", 1), 200, 1 << 20, false},
		{"unreadable answer", body, `{"model":`, 200, 1 << 20, false},
		{"an error's detail with a 200", body, `{"model":"service-1.0.0","detail":"internal error, retry"}`, 200, 1 << 20, false},
		{"no answers", body, `{"model":"service-1.0.0","answers":{}}`, 200, 1 << 20, false},
		{"another question answered", body, `{"model":"service-1.0.0","answers":{"early":{"type":"noul","noul":0.9}}}`, 200, 1 << 20, false},
		{"not a 200", body, answered, 429, 1 << 20, false},
		{"a 201", body, answered, 201, 1 << 20, false},
		{"over max_size", body, answered, 200, int64(len(answered)) - 1, false},
		{"exactly max_size", body, answered, 200, int64(len(answered)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, resp := parse(t, tc.req, tc.resp)
			if got := newTestCache(tc.maxSize).Takes(tc.status, req, resp, len(tc.resp)); got != tc.takes {
				t.Errorf("Takes = %v, want %v", got, tc.takes)
			}
		})
	}
}

// A hit gives back every stored field, the content coding included.
func TestLookupGivesBackTheAnswer(t *testing.T) {
	c := newTestCache(1 << 20)
	a := Answer{Status: 200, ContentType: "application/json; charset=utf-8", ContentEncoding: "gzip", RequestID: "r", Body: []byte{0x1f, 0x8b, 0, 1, 2}}
	store(c, acme, body, a)
	got, ok := hit(c, acme, body)
	if !ok || fmt.Sprint(got) != fmt.Sprint(a) {
		t.Fatalf("Lookup = %+v %v, want %+v", got, ok, a)
	}
}

// A hit needs a key the upstream accepted within the ttl: another key of
// the same org misses until the upstream answers it a 200 (on any body), a
// key the upstream refuses loses its hits at once, and a key accepted
// longer than the ttl ago misses though the entry lives.
func TestHitOnlyForAnAcceptedKey(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	ttl := 10 * time.Minute
	c := newWithStore(inprocess.New(inprocess.Limits{Entries: 100, TTL: ttl}, clock.Now), ttl, 1<<20)
	c.now = clock.Now
	store(c, acme, body, answer)
	if _, ok := hit(c, acme, body); !ok {
		t.Fatal("the storing key missed")
	}
	other := asker("org_keys", "acme", "acme-key-2")
	if _, ok := hit(c, other, body); ok {
		t.Fatal("a key the upstream never accepted got a hit")
	}
	l := c.Lookup(ctx, other, []byte(`{"model":"service-1.0.0","state":"another body","questions":{"late":{"type":"noul"}}}`))
	c.Record(ctx, l, 200, nil) // accepted on another body; nothing stored
	if _, ok := hit(c, other, body); !ok {
		t.Fatal("a key the upstream accepted missed the org's entry")
	}

	l = c.Lookup(ctx, other, []byte(`{"model":"service-1.0.0","state":"revoked","questions":{}}`))
	c.Record(ctx, l, 401, nil)
	if _, ok := hit(c, other, body); ok {
		t.Fatal("a key the upstream refused still got a hit")
	}
	if _, ok := hit(c, acme, body); !ok {
		t.Fatal("refusing one key cost another its hits")
	}

	// The entry stored again late in the key's ttl renews the key's record
	// (older than half the ttl); a key not seen for the ttl misses.
	clock.Advance(ttl/2 + time.Second)
	third := asker("org_keys", "acme", "acme-key-3")
	store(c, third, body+" ", answer)
	clock.Advance(ttl / 2)
	if _, ok := hit(c, acme, body); ok {
		t.Error("a hit for a key accepted more than the ttl ago")
	}
	if _, ok := hit(c, third, body+" "); !ok {
		t.Error("a key accepted within the ttl missed")
	}
}

// The identity modes never mix: one org name and one key under org_header,
// org_keys or a key's own fingerprint are three askers.
func TestScopesNeverMix(t *testing.T) {
	c := newTestCache(1 << 20)
	scopes := []string{"org_header", "org_keys", "key"}
	for _, scope := range scopes {
		store(c, asker(scope, "acme", "one-key"), body, Answer{Status: 200, RequestID: scope, Body: []byte(answered)})
	}
	for _, scope := range scopes {
		got, ok := hit(c, asker(scope, "acme", "one-key"), body)
		if !ok || got.RequestID != scope {
			t.Errorf("%s: %v, the entry of %q", scope, ok, got.RequestID)
		}
	}
	only := newTestCache(1 << 20)
	store(only, asker("org_header", "acme", "one-key"), body, answer)
	for _, scope := range scopes[1:] {
		if _, ok := hit(only, asker(scope, "acme", "one-key"), body); ok {
			t.Errorf("%s got org_header's entry", scope)
		}
	}
}

// Scope, org and body meet in the key without a separator that any could
// forge.
func TestKeySeparatesScopeOrgAndBody(t *testing.T) {
	if EntryKey("s", "ab", []byte("c")) == EntryKey("s", "a", []byte("bc")) {
		t.Fatal("the org's end is not marked")
	}
	if EntryKey("ab", "c", nil) == EntryKey("a", "bc", nil) {
		t.Fatal("the scope's end is not marked")
	}
	if EntryKey("s", "", []byte("x")) == EntryKey("s", "x", nil) {
		t.Fatal("an empty org passes for another")
	}
	k := EntryKey("s", "acme", []byte(body))
	if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Errorf("key %q is not 64 hex digits", k)
	}
	if r := keyRecordKey(acme); strings.Contains(r, "acme-key-1") || !strings.HasPrefix(r, keyRecordPrefix) {
		t.Errorf("key record %q", r)
	}
}

// An entry whose scope or org is not the asker's is never answered, even
// under the asker's key (a collision, or a store written by something
// else), and neither is a corrupt one.
func TestLookupChecksTheOwner(t *testing.T) {
	ctx := context.Background()
	s := inprocess.New(inprocess.Limits{Entries: 10, TTL: time.Minute}, time.Now)
	c := newWithStore(s, time.Minute, 1<<20)
	store(c, acme, body, answer) // the key's record
	key := EntryKey(acme.Scope, acme.Org, []byte(body))
	for _, forged := range [][]byte{encode(acme.Scope, "globex", answer), encode("org_header", acme.Org, answer), []byte("garbage")} {
		s.Set(ctx, ttlstore.Entry{Key: key, Value: forged})
		if _, ok := hit(c, acme, body); ok {
			t.Errorf("entry %q answered", forged[:min(len(forged), 20)])
		}
	}
}

// 32 identical misses at once ask the upstream once: the first leads,
// the others wait for its answer and hit. A waiter whose key the upstream
// never accepted misses after the wait, and one whose client leaves stops
// waiting. The flight table empties.
func TestIdenticalMissesWaitForOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newTestCache(1 << 20)
		store(c, acme, `{"model":"service-1.0.0","state":"accepts the key","questions":{}}`, answer)
		leader := c.Lookup(ctx, acme, []byte(body))
		if _, ok := leader.Hit(); ok || leader.leads == nil {
			t.Fatal("the first miss leads nothing")
		}
		hits := make([]bool, 31)
		var wg sync.WaitGroup
		for i := range hits {
			wg.Go(func() { _, hits[i] = hit(c, acme, body) })
		}
		var stranger bool
		wg.Go(func() { _, stranger = hit(c, asker("org_keys", "acme", "never-accepted"), body) })
		leaving, cancel := context.WithCancel(ctx)
		var left *Lookup
		wg.Go(func() { left = c.Lookup(leaving, acme, []byte(body)) })
		synctest.Wait() // all wait for the leader
		cancel()
		synctest.Wait()
		if left == nil || left.hit || left.leads != nil {
			t.Fatalf("the waiter whose client left: %+v", left)
		}
		c.Record(ctx, leader, 200, &answer)
		wg.Wait()
		for i, ok := range hits {
			if !ok {
				t.Errorf("waiter %d missed", i)
			}
		}
		if stranger {
			t.Error("a waiter whose key was never accepted got the leader's answer")
		}
		if len(c.flights) != 0 {
			t.Errorf("%d flights left", len(c.flights))
		}
		c.Done(leader) // again: nothing
	})
}

// A leader that ends without an answer (refused before the upstream, a
// failure) lets its waiters go to the upstream themselves.
func TestWaitersOfALeaderWithoutAnAnswerMiss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newTestCache(1 << 20)
		store(c, acme, `{"other":1}`, answer)
		leader := c.Lookup(ctx, acme, []byte(body))
		var waiter *Lookup
		done := make(chan struct{})
		go func() { waiter = c.Lookup(ctx, acme, []byte(body)); close(done) }()
		synctest.Wait()
		c.Done(leader)
		<-done
		if _, ok := waiter.Hit(); ok || waiter.leads != nil {
			t.Errorf("waiter: %+v", waiter)
		}
	})
}

// Through Redis a hit is one round trip (the entry and the key's record
// together).
func TestRedisHitIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	rdb, err := redispool.NewClient([]string{srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(Config{}, rdb, "p:", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	store(c, acme, body, answer)
	hook := new(redistest.CountHook)
	rdb.AddHook(hook)
	for range 10 {
		if _, ok := hit(c, acme, body); !ok {
			t.Fatal("no hit")
		}
	}
	if n := hook.Sent.Load(); n != 10 {
		t.Errorf("%d round trips for 10 hits", n)
	}
	other := asker("org_keys", "acme", "acme-key-2")
	if _, ok := hit(c, other, body); ok {
		t.Error("a key never accepted got a hit through Redis")
	}
	// Across a reload (a new cache on the same Redis) the key stays known.
	again, _ := New(Config{}, rdb, "p:", nil, nil)
	if _, ok := hit(again, acme, body); !ok {
		t.Error("the accepted key missed after a reload")
	}
	// The scopes never mix through Redis either.
	if _, ok := hit(again, asker("org_header", "acme", "acme-key-1"), body); ok {
		t.Error("org_header got org_keys' entry through Redis")
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		err string
	}{
		{Config{}, ""},
		{Config{MaxSize: maxMaxSize, MaxEntries: maxMaxEntries}, ""},
		{Config{MaxSize: maxMaxSize + 1}, "max_size 8388609: must be from 1 byte to 8MiB (8388608 bytes)"},
		{Config{MaxEntries: -1}, "max_entries -1: must be from 1 to 10000000"},
		{Config{MaxEntries: maxMaxEntries + 1}, "max_entries 10000001: must be from 1 to 10000000"},
		{Config{TTL: -1}, "ttl -1ns: must be a positive duration"},
	} {
		err := tc.cfg.Validate()
		if (err == nil && tc.err != "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.err)
		}
	}
	d := Config{}.withDefaults()
	if time.Duration(d.TTL) != 10*time.Minute || d.MaxEntries != 10000 || d.MaxSize != 1<<20 {
		t.Errorf("defaults %+v", d)
	}
	if _, err := New(Config{MaxSize: -1}, nil, "p:", nil, nil); err == nil {
		t.Error("New took an invalid config")
	}
}

// Configs with the same prefix and settings share the in-process entries
// and key records (a reload that keeps them); any other setting starts
// afresh.
func TestInProcessEntriesSurviveAReloadThatKeepsTheSettings(t *testing.T) {
	prefix := t.Name() + ":"
	old, err := New(Config{}, nil, prefix, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	store(old, acme, body, answer)
	same, _ := New(Config{TTL: 0, MaxEntries: DefaultMaxEntries}, nil, prefix, nil, nil) // the defaults, written out
	other, _ := New(Config{MaxEntries: 5}, nil, prefix, nil, nil)
	_ = old.Close()
	_ = old.Close() // a second close lets go of nothing more
	if _, ok := hit(same, acme, body); !ok {
		t.Error("a config with the same settings lost the entry")
	}
	if _, ok := hit(other, acme, body); ok {
		t.Error("a config with other settings shares the entries")
	}
	_ = same.Close()
	_ = other.Close()
	again, _ := New(Config{}, nil, prefix, nil, nil)
	defer again.Close()
	if _, ok := hit(again, acme, body); ok {
		t.Error("entries outlived every config that held them")
	}
}
