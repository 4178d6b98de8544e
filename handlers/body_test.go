package handlers

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The pooled body goes back to the pool only when its last user lets go,
// whatever the order: the handler, the transport (closing late, from
// another goroutine, maybe during a Read) and a parallel check.
func TestPooledBodyLastUserReleases(t *testing.T) {
	for range 200 {
		r, _ := http.NewRequest("POST", "/", strings.NewReader(`{"state":"s"}`))
		b, err := readBody(r, 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		check := b.retain()
		up := new(upstreamBody)
		up.init(b)
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { // the transport: reads, and closes while another read may run
			defer wg.Done()
			go func() { _, _ = io.Copy(io.Discard, up) }()
			_ = up.Close()
			_ = up.Close() // a second close is harmless
		}()
		go func() { // a parallel check reads the state, then lets go
			defer wg.Done()
			if !bytes.Equal(check.bytes(), []byte(`{"state":"s"}`)) {
				t.Error("the check read another body")
			}
			check.release()
		}()
		go func() { // the handler, done with its log record
			defer wg.Done()
			b.release()
		}()
		wg.Wait()
		if n := b.refs.Load(); n != 0 {
			t.Fatalf("%d references left", n)
		}
		if _, err := up.Read(make([]byte, 1)); err != http.ErrBodyReadAfterClose {
			t.Fatalf("read after close: %v", err)
		}
	}
}

func TestPooledBodyReleasedTooOftenPanics(t *testing.T) {
	r, _ := http.NewRequest("POST", "/", strings.NewReader(`{}`))
	b, _ := readBody(r, 1<<10)
	b.release()
	defer func() {
		if recover() == nil {
			t.Error("a second release did not panic")
		}
	}()
	b.release()
}

func TestReadBodyBounds(t *testing.T) {
	r, _ := http.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 11)))
	if _, err := readBody(r, 10); err != errTooLarge {
		t.Errorf("11 bytes over a 10-byte bound: %v", err)
	}
	r, _ = http.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 11)))
	r.ContentLength = -1 // chunked: only reading finds out
	if _, err := readBody(r, 10); err != errTooLarge {
		t.Errorf("chunked 11 bytes: %v", err)
	}
}
