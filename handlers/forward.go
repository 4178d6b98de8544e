package handlers

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// forwarding is an exchange's upstream step: the interceptor that holds
// the upstream's response back, the body handed to the transport, the
// response header as it was before the upstream's, and what the commit
// needs. It lives inside the exchange, so the step allocates nothing of
// its own. It is not pooled, nor is the exchange: the transport may close
// the body after the handler returned (from its own goroutine), and
// Caddy's access log reads the exchange's placeholders after the handler
// returned too; no point in the handler knows when both are done.
type forwarding struct {
	h   *Handler
	x   *exchange
	ctx context.Context

	rec    interceptor
	body   upstreamBody
	before headerSnapshot
	// serveErr is next's error, known when a whole 200 is committed;
	// committing is the gateway's own work inside the upstream call.
	serveErr   error
	committing time.Duration
}

// forward hands the request to the upstream and reads its answer on the way
// back. With a parallel guardrails check, the answer is held until the
// verdict is in, and dropped if the verdict refuses the request.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, x *exchange) error {
	f := &x.fwd
	f.h, f.x, f.ctx = h, x, r.Context()
	// What to restore if none of the upstream's response reaches the client
	// (a parallel verdict refused it, or it broke off before the commit).
	f.before.take(w.Header())

	respBuf := buffers.Get().(*bytes.Buffer)
	respBuf.Reset()
	defer buffers.Put(respBuf)
	f.rec = interceptor{w: w, buf: respBuf, limit: maxResponseBuffer, owned: h.ownedPrefixes, commit: f}
	rec := &f.rec
	// The identical requests waiting for this one answer its failure too.
	rec.holdFailures = x.lookup.Leads()

	f.body.init(x.body)
	r.Body = &f.body
	x.forwarded = true
	if h.cache != nil {
		x.cache = cacheMiss
	}
	started := h.now()
	call := startUpstreamCall(r.Context(), x, x.req.ModelOrDefault())
	defer func() {
		// An answer that broke off after part of it reached the client
		// aborts the handler (the connection must break). The upstream's
		// failure when the upstream broke it: logged as one, counted by
		// the breaker, not billed; the client's doing when the client
		// went away: 499, billed (the upstream billed its 200).
		if rec.brokeOff {
			x.status, x.upstream, x.upstreamStatus = http.StatusBadGateway, h.now().Sub(started), 0
			cause := errIncompleteResponse
			if rec.clientGone {
				x.status, x.upstreamStatus, cause = statusClientClosed, rec.upstreamStatus, context.Canceled
			}
			if x.ticket != nil {
				x.ticket.Done(x.status, cause)
			}
		}
		call.end(x.callResult(rec, f.serveErr))
	}()
	err := rec.serve(next, r)
	f.serveErr = err
	// reverse_proxy may never close a body it did not read (a dial
	// failure): the handler's reference then goes back here.
	_ = f.body.Close()
	sent := rec.finish()
	x.upstream = h.now().Sub(started)
	x.waited += x.upstream - f.committing
	x.upstreamStatus = rec.upstreamStatus
	if x.ticket != nil {
		x.ticket.Done(rec.status, err)
	}
	if sent {
		if rec.streamed {
			// Committed while next ran: trailers it set after the
			// commit are seen only now.
			dropTrailers(w.Header(), h.ownedPrefixes)
		}
		x.status = rec.status
		return err
	}

	// None of the upstream's response reached the client: nor do the
	// headers it left behind (a response that broke off mid-body).
	f.before.restore(w.Header())
	// The verdict still decides whether the client hears of the refusal or
	// of the upstream's answer or failure.
	if a, refused := x.refusedByVerdict(); refused {
		return x.answer(w, a)
	}
	if rec.clientGone || errorStatus(err) == statusClientClosed {
		// The client went away: nobody is left to answer.
		x.status = statusClientClosed
		return err
	}
	x.upstreamErr = err
	failure := upstreamFailure(err)
	h.shareFailure(x, failure)
	return x.answer(w, failure)
}

// commit implements committer: just before the upstream's response goes
// to the client, the answer is read and routed and the gateway's headers
// added, unless a parallel verdict refuses the request.
func (f *forwarding) commit(status int, raw []byte) bool {
	h, x := f.h, f.x
	from := h.now()
	defer func() { f.committing += h.now().Sub(from) }()
	header := f.rec.w.Header()
	if _, refused := x.refusedByVerdict(); refused {
		if status == http.StatusOK {
			x.readUsage(header, raw) // billed all the same
		}
		return false
	}
	h.readAnswer(f.ctx, x, header, status, raw)
	if h.cache != nil && f.serveErr == nil {
		h.recordAnswer(f.ctx, x, header, status, raw) // the upstream's, escalated afresh on a hit
	}
	f.rec.replacement = x.esc.body
	return true
}

// headerSnapshot is a response header's fields as they were before the
// upstream's step, to put back when none of the upstream's response
// reaches the client: names and values copied into arrays of its own (a
// header holds a few fields then: Server, what earlier handlers set), a
// clone only for a larger one.
type headerSnapshot struct {
	fields [4]snapshotField
	values [8]string
	n      int
	large  http.Header // the fields, when they do not fit
}

type snapshotField struct {
	name       string
	start, end int // of its values in values
}

// take records h's fields.
func (s *headerSnapshot) take(h http.Header) {
	s.n, s.large = 0, nil
	values := 0
	for name, vv := range h {
		if s.n == len(s.fields) || values+len(vv) > len(s.values) {
			s.n, s.large = 0, h.Clone()
			return
		}
		copy(s.values[values:], vv)
		s.fields[s.n] = snapshotField{name, values, values + len(vv)}
		s.n, values = s.n+1, values+len(vv)
	}
}

// restore makes h hold exactly the fields taken.
func (s *headerSnapshot) restore(h http.Header) {
	clear(h)
	if s.large != nil {
		for name, vv := range s.large {
			h[name] = vv
		}
		return
	}
	for _, f := range s.fields[:s.n] {
		h[f.name] = append([]string(nil), s.values[f.start:f.end]...)
	}
}
