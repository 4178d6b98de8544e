package cache

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/policy/cache/memstore"
)

// FuzzExactness: an entry stored for (org, body) is a hit for exactly that
// pair. Any other org, any change to one byte of the body (the requested
// version is in the body: changing it is such a change), a body one byte
// longer or shorter, or another layout version is a miss, and no other
// org ever receives the entry.
func FuzzExactness(f *testing.F) {
	f.Add("acme", []byte(body), "globex", uint(10), byte('2'))
	f.Add("", []byte("{}"), "a", uint(0), byte(0))
	f.Add("a", []byte(""), "", uint(3), byte(0xff))
	f.Fuzz(func(t *testing.T, org string, b []byte, otherOrg string, at uint, with byte) {
		ctx := context.Background()
		c := newWithStore(memstore.New(16, time.Hour, time.Now), 1<<20)
		a := Answer{Status: 200, ContentType: "application/json", RequestID: org, Body: b}
		if !c.Keep(ctx, org, b, "service-1.0.0", "service-1.0.0", a) {
			t.Fatal("not stored")
		}
		got, ok := c.Lookup(ctx, org, bytes.Clone(b))
		if !ok || !bytes.Equal(got.Body, b) || got.RequestID != org {
			t.Fatalf("the same org and body: %+v %v", got, ok)
		}
		if otherOrg != org {
			if _, ok := c.Lookup(ctx, otherOrg, b); ok {
				t.Fatalf("org %q received org %q's entry", otherOrg, org)
			}
		}
		miss := func(what string, m []byte) {
			t.Helper()
			if _, ok := c.Lookup(ctx, org, m); ok {
				t.Fatalf("%s: a hit for %q, stored %q", what, m, b)
			}
		}
		if len(b) > 0 {
			m := bytes.Clone(b)
			i := int(at % uint(len(m)))
			m[i] ^= with | 1 // never the same byte
			miss("one byte changed", m)
			miss("one byte shorter", b[:len(b)-1])
		}
		miss("one byte longer", append(bytes.Clone(b), with))
		if Key(org, b) == keyOf(layout+1, org, b) {
			t.Fatal("another layout version has the same key")
		}
	})
}

// FuzzDecode: no stored bytes make decode panic, and what encode lays out
// decodes to itself.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{layout, 200, 1}, "acme", "application/json", "gzip", "r", []byte("{}"))
	f.Add(encode("acme", answer), "", "", "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, data []byte, org, ct, ce, id string, b []byte) {
		_, _, _ = decode(data)
		a := Answer{Status: 200, ContentType: ct, ContentEncoding: ce, RequestID: id, Body: b}
		gotOrg, got, err := decode(encode(org, a))
		if err != nil || gotOrg != org || got.Status != 200 || got.ContentType != ct || got.ContentEncoding != ce || got.RequestID != id || !bytes.Equal(got.Body, b) {
			t.Fatalf("round trip: %q %+v %v", gotOrg, got, err)
		}
	})
}
