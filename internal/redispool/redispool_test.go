package redispool

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redistest"
)

var bg = context.Background()

func TestAcquireSharesOneClientUntilTheLastRelease(t *testing.T) {
	srv := redistest.Start(t)
	urls := []string{srv.URL()}
	c1, release1, err := Acquire(urls)
	if err != nil {
		t.Fatal(err)
	}
	c2, release2, err := Acquire(urls)
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Fatal("two acquisitions of the same URLs got different clients")
	}
	if err := c1.Set(bg, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The old config's cleanup runs after the new config started.
	if err := release1(); err != nil {
		t.Fatal(err)
	}
	if err := release1(); err != nil { // a second release is a no-op
		t.Fatal(err)
	}
	if v, err := c2.Get(bg, "k").Result(); err != nil || v != "v" {
		t.Fatalf("client closed under its remaining user: %q %v", v, err)
	}
	if err := release2(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Ping(bg).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("after the last release: %v, want a closed client", err)
	}
	c3, release3, err := Acquire(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer release3()
	if c3 == c1 || c3.Ping(bg).Err() != nil {
		t.Fatal("acquiring again must give a new, working client")
	}
}

func TestSingleServerTuning(t *testing.T) {
	c, err := NewClient([]string{"redis://:pw@127.0.0.1:1/2?read_timeout=200ms&max_retries=5&pool_size=7"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.(*redis.Client).Options()
	if o.MaxRetries != 0 || !o.ContextTimeoutEnabled || o.DialerRetries != 1 {
		t.Errorf("retries %d, context deadlines %v, dial attempts %d: want 0, true, 1", o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries)
	}
	if o.ReadTimeout != 200*time.Millisecond || o.WriteTimeout != time.Second || o.DialTimeout != time.Second || o.PoolSize != 7 {
		t.Errorf("read %s, write %s, dial %s, pool %d", o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolSize)
	}
	if o.DB != 2 || o.Password != "pw" {
		t.Errorf("db %d, password %q", o.DB, o.Password)
	}
}

func TestClusterAndForKey(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c, release, err := Acquire(cluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("several URLs gave a %T, want a cluster client", c)
	}
	if o := cc.Options(); o.MaxRetries != -1 || !o.ContextTimeoutEnabled {
		t.Errorf("cluster retries %d, context deadlines %v", o.MaxRetries, o.ContextTimeoutEnabled)
	}
	owners := map[string]bool{}
	for _, key := range []string{"{a}:x", "{b}:x", "{c}:x", "{d}:x", "{e}:x", "{f}:x"} {
		node, err := ForKey(bg, c, key)
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().MaxRetries != 0 {
			t.Errorf("node client retries %d times", node.Options().MaxRetries)
		}
		// The node owns the key: no MOVED, nothing for a cluster client to redirect.
		if err := node.Set(bg, key, "v", time.Minute).Err(); err != nil {
			t.Fatalf("SET %s on its node: %v", key, err)
		}
		owners[node.Options().Addr] = true
	}
	if len(owners) < 2 {
		t.Fatalf("six keys all on %v", owners)
	}
}

func TestForKeySingleServer(t *testing.T) {
	c, err := NewClient([]string{"redis://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if node, err := ForKey(bg, c, "k"); err != nil || node != c {
		t.Fatalf("ForKey on a single server: %v %v", node, err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := ForKey(bg, ring, "k"); err == nil {
		t.Fatal("ForKey accepted a ring")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		urls []string
		err  string
	}{
		{[]string{"redis://localhost:6379"}, ""},
		{[]string{"rediss://u:p@redis.example:6380/1"}, ""},
		{[]string{"redis://a:1", "redis://b:2", "redis://c:3"}, ""},
		{nil, "no redis URL"},
		{[]string{"unix:///tmp/redis.sock"}, `scheme "unix"`},
		{[]string{"localhost:6379"}, "scheme"},
		{[]string{"redis://"}, "without a host"},
		{[]string{"redis://127.0.0.1:0"}, "port 0 is not in 1..65535"},
		{[]string{"redis://127.0.0.1:65536"}, "port 65536 is not in 1..65535"},
		{[]string{"redis://h:1", "redis://h:00"}, "port 00 is not in 1..65535"},
		{[]string{"redis://h:1/x"}, "invalid redis URL for host h:1"},
		{[]string{"redis://h:1?bogus=1"}, "invalid redis URL for host h:1"},
		{[]string{"redis://u:secret@h:1", "redis://u:other@h:2"}, "share credentials"},
		{[]string{"redis://h:1/1", "redis://h:2"}, "no database 1"},
		{[]string{"redis://u:secret@h:port"}, "invalid redis URL"},
	} {
		err := Validate(tc.urls)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.urls, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: %v, want an error containing %q", tc.urls, err, tc.err)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("%v: the error repeats the password: %v", tc.urls, err)
		}
		if tc.err != "" {
			if _, _, err := Acquire(tc.urls); err == nil {
				t.Errorf("%v: Acquire accepted it", tc.urls)
			}
		}
	}
}

// TestContextDeadlineBoundsEveryCall: a server that accepts and never
// answers holds a call only as long as the caller's deadline, whatever the
// socket timeouts.
func TestContextDeadlineBoundsEveryCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	c, err := NewClient([]string{"redis://" + ln.Addr().String() + "?read_timeout=30s&write_timeout=30s"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Ping(ctx).Err()
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Fatalf("PING to a black hole: %v after %s", err, took)
	}
}

// A purpose gets a client and a pool of its own, shared by the callers of
// that purpose only: the gateway's client is not the review API's.
func TestAcquireForKeepsPurposesApart(t *testing.T) {
	srv := redistest.Start(t)
	urls := []string{srv.URL()}
	gateway, releaseGateway, err := Acquire(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseGateway()
	review, releaseReview, err := AcquireFor("review", urls)
	if err != nil {
		t.Fatal(err)
	}
	again, releaseAgain, err := AcquireFor("review", urls)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseAgain()
	if review == gateway || again != review {
		t.Fatalf("clients: gateway %p, review %p and %p; want the review's apart and shared", gateway, review, again)
	}
	if err := releaseReview(); err != nil {
		t.Fatal(err)
	}
	if gateway.Ping(bg).Err() != nil || again.Ping(bg).Err() != nil {
		t.Fatal("a release closed a client still in use")
	}
}
