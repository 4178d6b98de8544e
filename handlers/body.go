package handlers

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// buffers recycles request and response buffers across requests.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// pooledBody is an evaluation request's body, read into a pooled buffer and
// shared by everyone who reads it: the handler (inspection, routing, the log
// record), the transport that sends it upstream (which may close it late,
// from another goroutine) and a parallel guardrails check. Each user holds
// one reference and releases it once; the last release puts the buffer back
// in the pool. A reference never released (a transport that never closed
// the body) only leaves the buffer to the garbage collector.
type pooledBody struct {
	buf  *bytes.Buffer
	refs atomic.Int32
}

// readBody reads r's body into a pooled buffer, at most limit bytes
// (errTooLarge beyond). The caller holds the one reference.
func readBody(r *http.Request, limit int64) (*pooledBody, error) {
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	b := &pooledBody{buf: buffers.Get().(*bytes.Buffer)}
	b.buf.Reset()
	b.refs.Store(1)
	if r.ContentLength > 0 {
		b.buf.Grow(int(r.ContentLength))
	}
	n, err := b.buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	var tooLarge *http.MaxBytesError // a request_body limit before this handler
	switch {
	case errors.As(err, &tooLarge):
		b.release()
		return nil, errTooLarge
	case err != nil:
		b.release()
		return nil, err
	case n > limit:
		b.release()
		return nil, errTooLarge
	}
	return b, nil
}

// bytes returns the body; valid while the caller holds a reference.
func (b *pooledBody) bytes() []byte { return b.buf.Bytes() }

// retain takes one more reference for a new user.
func (b *pooledBody) retain() *pooledBody {
	b.refs.Add(1)
	return b
}

// release lets go of one reference; a nil body has none.
func (b *pooledBody) release() {
	if b == nil {
		return
	}
	switch n := b.refs.Add(-1); {
	case n == 0:
		buffers.Put(b.buf)
	case n < 0:
		panic("handlers: pooled request body released once too often")
	}
}

// upstreamBody is the body handed to the upstream: a reader over a pooled
// body holding its own reference, released on Close. The transport always
// closes a request body, sometimes from another goroutine while a Read is
// under way (HTTP/2): Close waits for the Read, and no Read touches the
// buffer after it.
type upstreamBody struct {
	mu   sync.Mutex
	r    *bytes.Reader
	body *pooledBody // nil once closed
}

func newUpstreamBody(b *pooledBody) *upstreamBody {
	return &upstreamBody{r: bytes.NewReader(b.retain().bytes()), body: b}
}

// Read implements io.Reader.
func (u *upstreamBody) Read(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.body == nil {
		return 0, http.ErrBodyReadAfterClose
	}
	return u.r.Read(p)
}

// Close implements io.Closer.
func (u *upstreamBody) Close() error {
	u.mu.Lock()
	b := u.body
	u.body = nil
	u.mu.Unlock()
	if b != nil {
		b.release()
	}
	return nil
}
