package handlers

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// buffers recycles response buffers across requests.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// bodies recycles request bodies, each with its buffer, across requests.
var bodies = sync.Pool{New: func() any { return &pooledBody{buf: new(bytes.Buffer)} }}

// pooledBody is an evaluation request's body, read into a pooled buffer and
// shared by everyone who reads it: the handler (inspection, routing, the log
// record), the transport that sends it upstream (which may close it late,
// from another goroutine) and a parallel guardrails check. Each user holds
// one reference and releases it once; the last release puts the buffer back
// in the pool (the body and its buffer, together). A reference never
// released (a transport that never closed the body) only leaves them to the
// garbage collector.
type pooledBody struct {
	buf  *bytes.Buffer
	refs atomic.Int32
	// limited reads the request's body: inside the pooled body, so that
	// reading allocates no reader of its own.
	limited io.LimitedReader
}

// readBody reads r's body into a pooled buffer, at most limit bytes
// (errTooLarge beyond). The caller holds the one reference.
func readBody(r *http.Request, limit int64) (*pooledBody, error) {
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	b := bodies.Get().(*pooledBody)
	b.buf.Reset()
	b.refs.Store(1)
	if r.ContentLength > 0 {
		b.buf.Grow(int(r.ContentLength))
	}
	b.limited = io.LimitedReader{R: r.Body, N: limit + 1}
	n, err := b.buf.ReadFrom(&b.limited)
	b.limited.R = nil                // the request's, not the pool's
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
		bodies.Put(b)
	case n < 0:
		panic("handlers: pooled request body released once too often")
	}
}

// upstreamBody is the body handed to the upstream: a reader over a pooled
// body holding its own reference, released on Close. The transport always
// closes a request body, sometimes from another goroutine while a Read is
// under way (HTTP/2): Close waits for the Read, and no Read touches the
// buffer after it. It lives in the exchange (see forwarding).
type upstreamBody struct {
	mu   sync.Mutex
	r    bytes.Reader
	body *pooledBody // nil once closed
}

// init makes u read b, with a reference of its own.
func (u *upstreamBody) init(b *pooledBody) {
	u.r.Reset(b.retain().bytes())
	u.body = b
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
