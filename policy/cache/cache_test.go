package cache

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/policy/cache/memstore"
)

const body = `{"model":"service-1.0.0","state":"The parcel arrived two days late.","questions":{"late":{"type":"noul"}}}`

var answer = Answer{Status: 200, ContentType: "application/json", RequestID: "req-1", Body: []byte(`{"model":"service-1.0.0","answers":{}}`)}

func newTestCache(maxSize int64) *Cache {
	return newWithStore(memstore.New(100, time.Minute, time.Now), maxSize)
}

// Only a readable 200 from the concrete version the request named, within
// max_size, is stored.
func TestKeepStoresOnlyConcreteVersions(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                string
		requested, answered string
		a                   Answer
		maxSize             int64
		kept                bool
	}{
		{"a 200 from the version named", "service-1.0.0", "service-1.0.0", answer, 1 << 20, true},
		{"model omitted", "", "service-1.0.0", answer, 1 << 20, false},
		{"an alias", "service-latest", "service-1.0.0", answer, 1 << 20, false},
		{"another version answered", "service-1.0.0", "service-1.0.1", answer, 1 << 20, false},
		{"unreadable answer", "service-1.0.0", "", answer, 1 << 20, false},
		{"not a 200", "service-1.0.0", "service-1.0.0", Answer{Status: 429, Body: answer.Body}, 1 << 20, false},
		{"a 201", "service-1.0.0", "service-1.0.0", Answer{Status: 201, Body: answer.Body}, 1 << 20, false},
		{"over max_size", "service-1.0.0", "service-1.0.0", answer, int64(len(answer.Body)) - 1, false},
		{"exactly max_size", "service-1.0.0", "service-1.0.0", answer, int64(len(answer.Body)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(tc.maxSize)
			if got := c.Keep(ctx, "acme", []byte(body), tc.requested, tc.answered, tc.a); got != tc.kept {
				t.Fatalf("Keep = %v, want %v", got, tc.kept)
			}
			got, hit := c.Lookup(ctx, "acme", []byte(body))
			if hit != tc.kept {
				t.Fatalf("Lookup hit = %v, want %v", hit, tc.kept)
			}
			if hit && (got.Status != tc.a.Status || got.ContentType != tc.a.ContentType || got.RequestID != tc.a.RequestID || !bytes.Equal(got.Body, tc.a.Body)) {
				t.Errorf("Lookup = %+v, want %+v", got, tc.a)
			}
		})
	}
}

// A hit gives back every stored field, the content coding included.
func TestLookupGivesBackTheAnswer(t *testing.T) {
	ctx := context.Background()
	c := newTestCache(1 << 20)
	a := Answer{Status: 200, ContentType: "application/json; charset=utf-8", ContentEncoding: "gzip", RequestID: "r", Body: []byte{0x1f, 0x8b, 0, 1, 2}}
	c.Keep(ctx, "acme", []byte(body), "service-1.0.0", "service-1.0.0", a)
	got, ok := c.Lookup(ctx, "acme", []byte(body))
	if !ok || fmt.Sprint(got) != fmt.Sprint(a) {
		t.Fatalf("Lookup = %+v %v, want %+v", got, ok, a)
	}
}

// The org and the body meet in the key without a separator that either
// could forge: org "ab" with body "c..." is not org "a" with body "bc...".
func TestKeySeparatesOrgFromBody(t *testing.T) {
	if Key("ab", []byte("c")) == Key("a", []byte("bc")) {
		t.Fatal("the org's end is not marked")
	}
	if Key("", []byte("x")) == Key("x", nil) {
		t.Fatal("an empty org passes for another")
	}
	k := Key("acme", []byte(body))
	if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Errorf("key %q is not 64 hex digits", k)
	}
}

// An entry whose org is not the asker's is never answered, even under the
// asker's key (a collision, or a store written by something else).
func TestLookupChecksTheOrg(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(10, time.Minute, time.Now)
	c := newWithStore(s, 1<<20)
	s.Set(ctx, Key("acme", []byte(body)), encode("globex", answer))
	if _, ok := c.Lookup(ctx, "acme", []byte(body)); ok {
		t.Fatal("another org's entry answered")
	}
	s.Set(ctx, Key("acme", []byte(body)), []byte("garbage"))
	if _, ok := c.Lookup(ctx, "acme", []byte(body)); ok {
		t.Fatal("a corrupt entry answered")
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		err string
	}{
		{Config{}, ""},
		{Config{MaxSize: MaxMaxSize, MaxEntries: MaxMaxEntries}, ""},
		{Config{MaxSize: MaxMaxSize + 1}, "max_size 8388609: must be from 1 byte to 8MiB (8388608 bytes)"},
		{Config{MaxEntries: -1}, "max_entries -1: must be from 1 to 10000000"},
		{Config{MaxEntries: MaxMaxEntries + 1}, "max_entries 10000001: must be from 1 to 10000000"},
		{Config{TTL: -1}, "ttl must be a positive duration"},
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
	if _, err := New(Config{MaxSize: -1}, nil, "p:", nil); err == nil {
		t.Error("New took an invalid config")
	}
}

// Configs with the same prefix and settings share the in-process entries
// (a reload that keeps them); any other setting starts afresh.
func TestInProcessEntriesSurviveAReloadThatKeepsTheSettings(t *testing.T) {
	ctx := context.Background()
	prefix := t.Name() + ":"
	old, err := New(Config{}, nil, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	old.Keep(ctx, "acme", []byte(body), "service-1.0.0", "service-1.0.0", answer)
	same, _ := New(Config{TTL: 0, MaxEntries: DefaultMaxEntries}, nil, prefix, nil) // the defaults, written out
	other, _ := New(Config{MaxEntries: 5}, nil, prefix, nil)
	_ = old.Close()
	_ = old.Close() // a second close lets go of nothing more
	if _, ok := same.Lookup(ctx, "acme", []byte(body)); !ok {
		t.Error("a config with the same settings lost the entry")
	}
	if _, ok := other.Lookup(ctx, "acme", []byte(body)); ok {
		t.Error("a config with other settings shares the entries")
	}
	_ = same.Close()
	_ = other.Close()
	again, _ := New(Config{}, nil, prefix, nil)
	defer again.Close()
	if _, ok := again.Lookup(ctx, "acme", []byte(body)); ok {
		t.Error("entries outlived every config that held them")
	}
}
