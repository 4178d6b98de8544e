package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

func TestKeyOrg(t *testing.T) {
	for org, want := range map[string]string{
		"acme":           "acme",
		"ünïcode":        "ünïcode",
		"":               "%e",
		"a{b}c":          "a%7Bb%7Dc",
		"50%":            "50%25",
		"two words\r\n":  "two%20words%0D%0A",
		"a%7Bb%7Dc":      "a%257Bb%257Dc",
		"sha256:abcdef0": "sha256:abcdef0",
	} {
		if got := keyOrg(org); got != want {
			t.Errorf("keyOrg(%q) = %q, want %q", org, got, want)
		}
	}
	long := strings.Repeat("x", 500)
	if got := keyOrg(long); !strings.HasPrefix(got, "%h") || len(got) != 34 || got == keyOrg(long+"y") {
		t.Errorf("keyOrg(long) = %q, want a distinct %%h hash", got)
	}
	s := &Store{prefix: "p:"}
	if b := s.bucketKey("a}b{c"); b != "p:{a%7Db%7Bc}:b" {
		t.Errorf("bucketKey = %q", b)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err    error
		class  string
		outage bool
	}{
		{errBadReply, "script", false},
		{redis.Nil, "script", false},
		{errors.New("no route to host"), "connection", true},
		{context.DeadlineExceeded, "timeout", true},
		{redis.ErrPoolTimeout, "pool_exhausted", true},
	} {
		if class, outage := classify(tc.err); class != tc.class || outage != tc.outage {
			t.Errorf("classify(%v) = %s %v, want %s %v", tc.err, class, outage, tc.class, tc.outage)
		}
	}
}

// A request whose client went away says nothing about Redis.
func TestCancelledIsNoFailure(t *testing.T) {
	s := &Store{logger: zap.NewNop()}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	var h health
	s.observe(ctx, &h, "k", context.Canceled)
	if h.failures.Load() != 0 {
		t.Fatal("a cancelled request counted as a Redis failure")
	}
}

// TestKeySlot: the slots of the Redis Cluster specification's examples
// (CLUSTER KEYSLOT's documented answers, and CRC16/XMODEM's check value
// 0x31C3 for "123456789").
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"somekey":                 11058,
		"foo{hash_tag}":           2515,
		"123456789":               0x31C3,
		"{user1000}.x":            keySlot("user1000"),
		"foo{}{bar}":              keySlot("foo{}{bar}"),
		"t:{acme}:b":              keySlot("acme"),
		"t:{acme}:budget:2026-11": keySlot("acme"),
		"a{b}c{d}":                keySlot("b"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}
