package cache

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/ttlstore/inprocess"
)

// FuzzExactness: an entry stored for (scope, org, body) is a hit for
// exactly that asker with an accepted key. Any other org, any other
// identity mode, another key never accepted, any change to one byte of the
// body (the requested version is in the body: changing it is such a
// change), a body one byte longer or shorter, or another layout version is
// a miss, and no other org ever receives the entry.
func FuzzExactness(f *testing.F) {
	f.Add("org_keys", "acme", []byte(body), "globex", "k1", "k2", uint(10), byte('2'))
	f.Add("org_header", "", []byte("{}"), "a", "", "x", uint(0), byte(0))
	f.Add("key", "a", []byte(""), "", "k", "k", uint(3), byte(0xff))
	f.Fuzz(func(t *testing.T, scope, org string, b []byte, otherOrg, key, otherKey string, at uint, with byte) {
		ctx := context.Background()
		c := newWithStore(inprocess.New(inprocess.Limits{Entries: 16, TTL: time.Hour}, time.Now), time.Hour, 1<<20)
		who := asker(scope, org, key)
		a := Answer{Status: 200, ContentType: "application/json", RequestID: org, Body: b}
		c.Record(ctx, c.Lookup(ctx, who, b), 200, &a)
		l := c.Lookup(ctx, who, bytes.Clone(b))
		got, ok := l.Hit()
		if !ok || !bytes.Equal(got.Body, b) || got.RequestID != org {
			t.Fatalf("the same asker and body: %+v %v", got, ok)
		}
		miss := func(what string, as Asker, m []byte) {
			t.Helper()
			l := c.Lookup(ctx, as, m)
			defer c.Done(l)
			if _, ok := l.Hit(); ok {
				t.Fatalf("%s: a hit for %+v %q, stored %+v %q", what, as, m, who, b)
			}
		}
		if otherOrg != org {
			miss("another org, the same key", asker(scope, otherOrg, key), b)
		}
		for _, s := range []string{"org_header", "org_keys", "key", scope + "x"} {
			if s != scope {
				miss("another identity mode", asker(s, org, key), b)
			}
		}
		if otherKey != key {
			miss("a key never accepted", asker(scope, org, otherKey), b)
		}
		if len(b) > 0 {
			m := bytes.Clone(b)
			i := int(at % uint(len(m)))
			m[i] ^= with | 1 // never the same byte
			miss("one byte changed", who, m)
			miss("one byte shorter", who, b[:len(b)-1])
		}
		miss("one byte longer", who, append(bytes.Clone(b), with))
		if EntryKey(scope, org, b) == keyOf(layout+1, kindEntry, scope, org, b) {
			t.Fatal("another layout version has the same key")
		}
	})
}

// FuzzDecode: no stored bytes make decode or decodeAccepted panic, and
// what encode lays out decodes to itself.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{layout, 200, 1}, "org_keys", "acme", "application/json", "gzip", "r", []byte("{}"))
	f.Add(encode("key", "acme", answer), "", "", "", "", "", []byte(nil))
	f.Add(encodeAccepted(time.Unix(1_800_000_000, 0)), "s", "o", "", "", "", []byte{1})
	f.Fuzz(func(t *testing.T, data []byte, scope, org, ct, ce, id string, b []byte) {
		_, _, _, _ = decode(data)
		_, _ = decodeAccepted(data)
		a := Answer{Status: 200, ContentType: ct, ContentEncoding: ce, RequestID: id, Body: b}
		gotScope, gotOrg, got, err := decode(encode(scope, org, a))
		if err != nil || gotScope != scope || gotOrg != org || got.Status != 200 || got.ContentType != ct || got.ContentEncoding != ce || got.RequestID != id || !bytes.Equal(got.Body, b) {
			t.Fatalf("round trip: %q %q %+v %v", gotScope, gotOrg, got, err)
		}
	})
}
