package handlers

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// committer's commit is called once, just before the first byte of the
// upstream's response would reach the client, with the response's status
// and — for a 200 (or a held 5xx) whose body fit the buffering bound — the
// whole body as the upstream sent it (body is nil otherwise). The header
// holds none of the upstream's fields in the gateway's namespaces by then.
// It adds the gateway's headers to the response headers, and returns false
// to discard the upstream's response (a parallel guardrails check that
// blocked), in which case the handler answers instead.
type committer interface {
	commit(status int, body []byte) (keep bool)
}

// interceptor holds back an upstream response until the gateway has read
// what it needs from it and added its headers, then passes the upstream's
// bytes on unchanged. A 200 body is buffered up to limit bytes; a larger one,
// or any other status, is committed at once and streamed.
type interceptor struct {
	w      http.ResponseWriter
	limit  int
	owned  []string // the gateway's header namespaces: the upstream's fields in them are dropped
	commit committer
	buf    *bytes.Buffer
	// holdFailures buffers a 5xx as a 200 is, so that its whole body
	// reaches the commit (the requests waiting for this one answer it).
	holdFailures bool
	// replacement, when the commit sets it, is sent in place of the
	// buffered body (an escalated answer); the commit fixed the headers.
	replacement []byte

	status         int  // of the response the client gets, if it is the upstream's
	upstreamStatus int  // the status the upstream wrote, kept when its response is dropped
	wroteHeader    bool // the upstream wrote its header
	committed      bool // the client has the header
	serving        bool // next is running
	streamed       bool // committed while next was running: trailers may come after
	discard        bool // commit said to drop the upstream's response
	brokeOff       bool // the response broke off after part of it reached the client
	clientGone     bool // the client went away (reverse_proxy's 499, or an abort on a cancelled request)
}

// errIncompleteResponse is an upstream response that broke off before its
// end while the gateway still held all of it back.
var errIncompleteResponse = errors.New("upstream response broke off before its end")

// serve runs next with the interceptor as its response writer.
// reverse_proxy aborts (panics with http.ErrAbortHandler) when it cannot copy
// the upstream's body after its header: the upstream broke off, or the client
// went away and took the request's context with it. While nothing has
// reached the client, the interceptor forgets that response and serve
// returns an error for the handler to answer: 499 when the client is gone
// (the upstream is not to blame), else 502, as for an upstream that failed
// before answering, so the client gets a whole answer instead of a dropped
// connection. Once the client has part of the response, the abort goes on:
// the connection must break so that the client sees it is incomplete.
func (i *interceptor) serve(next caddyhttp.Handler, r *http.Request) (err error) {
	i.serving = true
	defer func() {
		i.serving = false
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler || i.committed {
				i.brokeOff = v == http.ErrAbortHandler
				i.clientGone = i.brokeOff && r.Context().Err() != nil
				panic(v)
			}
			i.status, i.wroteHeader = 0, false
			i.buf.Reset()
			if cause := r.Context().Err(); cause != nil {
				err = caddyhttp.Error(statusClientClosed, cause)
				return
			}
			err = caddyhttp.Error(http.StatusBadGateway, errIncompleteResponse)
		}
	}()
	return next.ServeHTTP(i, r)
}

// Header returns the real response's header map: the upstream's headers
// land there directly, and nothing is sent before the commit.
func (i *interceptor) Header() http.Header { return i.w.Header() }

func (i *interceptor) WriteHeader(status int) {
	if i.wroteHeader {
		return
	}
	if status >= 100 && status < 200 {
		// Informational responses (103 Early Hints) pass through at once,
		// without the upstream's headers in the gateway's namespaces.
		if !i.committed {
			dropHeaders(i.w.Header(), i.owned)
			i.w.WriteHeader(status)
		}
		return
	}
	if status == statusClientClosed && !i.committed {
		// reverse_proxy records a client that went away before the
		// upstream answered as a 499 of its own: not the upstream's
		// status, and nobody is left to send it to.
		i.clientGone = true
		return
	}
	i.status, i.upstreamStatus, i.wroteHeader = status, status, true
	if status != http.StatusOK && (!i.holdFailures || status < http.StatusInternalServerError) {
		i.flushOut(nil)
	}
}

func (i *interceptor) Write(p []byte) (int, error) {
	if !i.wroteHeader {
		i.WriteHeader(http.StatusOK)
	}
	switch {
	case i.discard:
		return len(p), nil
	case i.committed:
		return i.w.Write(p)
	case i.buf.Len()+len(p) > i.limit:
		// Over the bound: the gateway gives up reading it and streams.
		i.flushOut(nil)
		if i.discard {
			return len(p), nil
		}
		return i.w.Write(p)
	default:
		return i.buf.Write(p)
	}
}

// flushOut commits the header (body is what the gateway could read) and
// sends what was buffered. The upstream's fields and trailers in the
// gateway's namespaces are dropped first, in one pass over the header.
func (i *interceptor) flushOut(body []byte) {
	if i.committed || i.discard {
		return
	}
	dropOwned(i.w.Header(), i.owned)
	if !i.commit.commit(i.status, body) {
		i.discard = true
		return
	}
	i.committed, i.streamed = true, i.serving
	i.w.WriteHeader(i.status)
	if i.replacement != nil {
		_, _ = i.w.Write(i.replacement)
		i.buf.Reset()
		return
	}
	if i.buf.Len() > 0 {
		_, _ = i.w.Write(i.buf.Bytes())
		i.buf.Reset()
	}
}

// finish commits a response that was buffered whole. It reports whether the
// upstream's response went (or is going) to the client; false means nothing
// was written and the handler must answer.
func (i *interceptor) finish() bool {
	if i.wroteHeader && !i.committed && !i.discard {
		i.flushOut(i.buf.Bytes())
	}
	return i.committed
}

// FlushError holds flushes back until the commit; after it, they reach the
// client. Implementing it keeps http.ResponseController from unwrapping past
// the interceptor and flushing an uncommitted header.
func (i *interceptor) FlushError() error {
	if !i.committed {
		return nil
	}
	return http.NewResponseController(i.w).Flush()
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (i *interceptor) Unwrap() http.ResponseWriter { return i.w }

// dropTrailers removes the trailers in the given namespaces. Once the
// handler returns, net/http sends as trailers the names the header declared
// in Trailer when it was written, and the keys prefixed with
// http.TrailerPrefix, with their values in the header map then: the
// declaration is cleaned before the header is written, the prefixed keys
// again once the response is done.
func dropTrailers(h http.Header, prefixes []string) {
	dropDeclaredTrailers(h, prefixes)
	for name := range h {
		if ownedTrailer(name, prefixes) {
			delete(h, name)
		}
	}
}

// dropOwned removes, in one pass over h, the fields in the given
// namespaces and the trailers in them (see dropTrailers).
func dropOwned(h http.Header, prefixes []string) {
	dropDeclaredTrailers(h, prefixes)
	for name := range h {
		if inNamespaces(name, prefixes) || ownedTrailer(name, prefixes) {
			delete(h, name)
		}
	}
}

// ownedTrailer reports whether name is a trailer (http.TrailerPrefix) in
// the given namespaces.
func ownedTrailer(name string, prefixes []string) bool {
	t, ok := strings.CutPrefix(name, http.TrailerPrefix)
	return ok && inNamespaces(http.CanonicalHeaderKey(t), prefixes)
}

// dropDeclaredTrailers removes the names in the given namespaces from the
// Trailer declaration.
func dropDeclaredTrailers(h http.Header, prefixes []string) {
	if declared, ok := h["Trailer"]; ok {
		var keep []string
		dropped := false
		for _, v := range declared {
			for name := range strings.SplitSeq(v, ",") {
				if name = strings.TrimSpace(name); name != "" && inNamespaces(http.CanonicalHeaderKey(name), prefixes) {
					dropped = true
				} else if name != "" {
					keep = append(keep, name)
				}
			}
		}
		switch {
		case !dropped:
		case len(keep) == 0:
			delete(h, "Trailer")
		default:
			h["Trailer"] = []string{strings.Join(keep, ", ")}
		}
	}
}

// headerGuard is the response writer for requests other than evaluations,
// whose responses the gateway does not read: it removes the upstream's
// headers in the gateway's namespaces as the header is written (interim
// responses too), and its trailers in them when done.
type headerGuard struct {
	http.ResponseWriter
	owned []string
	wrote bool // the final header is written
}

func (g *headerGuard) WriteHeader(status int) {
	if !g.wrote {
		dropOwned(g.Header(), g.owned)
		g.wrote = status >= 200
	}
	g.ResponseWriter.WriteHeader(status)
}

func (g *headerGuard) Write(p []byte) (int, error) {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	return g.ResponseWriter.Write(p)
}

// FlushError writes the header through the guard first, as a flush before
// the header would write it.
func (g *headerGuard) FlushError() error {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(g.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// Hijack for upgrades).
func (g *headerGuard) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// done removes the trailers in the gateway's namespaces once next returned.
func (g *headerGuard) done() {
	if g.wrote {
		dropTrailers(g.Header(), g.owned)
	}
}
