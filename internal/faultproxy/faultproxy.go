// Package faultproxy is a TCP proxy for tests that puts network faults
// between a client and a server on loopback, as toxiproxy does: added
// latency in either direction, a black hole, connection resets and refused
// connections. The fault is switched while connections are open, and
// applies to them at once.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mode is what the proxy does with connections and their bytes.
type mode int

const (
	modeForward   mode = iota // pass bytes on, after the configured latency
	modeBlackHole             // accept and keep connections, drop every byte
	modeReset                 // reset every connection
	modeRefuse                // not listening
)

// chunkSize is the most read from a connection at once.
const chunkSize = 32 << 10

// Proxy forwards connections from its loopback address to a target. Its
// methods are safe for concurrent use. It starts in pass mode.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu       sync.Mutex
	ln       net.Listener // nil while refusing
	mode     mode
	toTarget time.Duration
	toClient time.Duration
	changed  chan struct{} // closed and replaced at every change
	links    map[*link]struct{}
	closed   bool

	wg         sync.WaitGroup
	goroutines atomic.Int64
}

// Start listens on a free loopback port and forwards every connection to
// target (host:port) until the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	p := &Proxy{
		t:       t,
		target:  target,
		addr:    ln.Addr().String(),
		changed: make(chan struct{}),
		links:   make(map[*link]struct{}),
	}
	p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port, to give clients in place of the target's.
func (p *Proxy) Addr() string { return p.addr }

// Pass forwards every byte at once: the fault is over. A refusing proxy
// listens again on the same address.
func (p *Proxy) Pass() { p.Latency(0, 0) }

// Latency forwards every byte late: toTarget for what the client sends,
// toClient for what the target answers. Each read is delayed on its own,
// so latency adds to a response's time, not to its bandwidth. Bytes
// already waiting take the new delay.
func (p *Proxy) Latency(toTarget, toClient time.Duration) {
	p.set(modeForward, func() { p.toTarget, p.toClient = toTarget, toClient })
}

// BlackHole accepts connections and keeps them open, but drops every byte
// either way, like a network that lost its route: clients see only their
// own timeouts. Bytes sent during the black hole are lost for good.
func (p *Proxy) BlackHole() { p.set(modeBlackHole, nil) }

// Reset resets every open connection (TCP RST, both sides) and every new
// one as soon as it is accepted.
func (p *Proxy) Reset() { p.set(modeReset, nil) }

// Refuse stops listening, so that connecting is refused, and closes every
// open connection, as a stopped server does.
func (p *Proxy) Refuse() { p.set(modeRefuse, nil) }

// Conns is the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Goroutines is the number of goroutines the proxy runs now (four per
// connection), for tests that count the goroutines of the code under test.
func (p *Proxy) Goroutines() int { return int(p.goroutines.Load()) }

// set switches the mode, runs apply under the lock, and applies the change
// to listening and to the open connections.
func (p *Proxy) set(m mode, apply func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.mode = m
	if apply != nil {
		apply()
	}
	close(p.changed)
	p.changed = make(chan struct{})

	switch m {
	case modeRefuse:
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		for l := range p.links {
			l.close(false)
		}
	case modeReset:
		for l := range p.links {
			l.close(true)
		}
	}
	if m != modeRefuse && p.ln == nil {
		// The port was ours a moment ago; Go listeners set SO_REUSEADDR,
		// so connections in TIME_WAIT do not keep it.
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			p.t.Errorf("faultproxy: listening again on %s: %v", p.addr, err)
			return
		}
		p.serve(ln)
	}
}

// serve accepts connections on ln until it is closed. Called with p.mu
// held or before p is shared.
func (p *Proxy) serve(ln net.Listener) {
	p.ln = ln
	p.spawn(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accept(c.(*net.TCPConn))
		}
	})
}

func (p *Proxy) accept(c *net.TCPConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == modeReset || p.mode == modeRefuse {
		reset(c)
		return
	}
	l := &link{client: c, done: make(chan struct{})}
	p.links[l] = struct{}{}
	p.spawn(func() { p.forward(l) })
}

// spawn runs f on a goroutine the proxy counts and waits for on close.
func (p *Proxy) spawn(f func()) {
	p.wg.Add(1)
	p.goroutines.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.goroutines.Add(-1)
		f()
	}()
}

// forward connects l to the target and pipes both ways until either side
// closes or the fault closes l.
func (p *Proxy) forward(l *link) {
	defer func() {
		l.close(false)
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(l.client) // the target refused: so does the proxy
		return
	}
	if !l.attach(server.(*net.TCPConn)) {
		_ = server.Close() // the fault closed l meanwhile
		return
	}
	done := make(chan struct{})
	p.spawn(func() {
		defer close(done)
		p.pipe(l, server, l.client, true)
	})
	p.pipe(l, l.client, server, false)
	<-done
}

// chunk is bytes read from one side, waiting to be written to the other.
type chunk struct {
	data []byte
	read time.Time
}

// pipe copies src to dst through the fault until src ends or l closes;
// then it closes l, which ends the other direction too.
func (p *Proxy) pipe(l *link, dst, src net.Conn, toTarget bool) {
	defer l.close(false)
	chunks := make(chan chunk, 16)
	p.spawn(func() {
		defer close(chunks)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: buf[:n], read: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range chunks {
		forward, ok := p.await(l, c.read, toTarget)
		if !ok {
			return
		}
		if !forward {
			continue // black hole
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// await waits until a chunk read at read is due under the current fault:
// forward says to write it (false: drop it); ok is false once l closed.
func (p *Proxy) await(l *link, read time.Time, toTarget bool) (forward, ok bool) {
	for {
		p.mu.Lock()
		m, changed := p.mode, p.changed
		delay := p.toClient
		if toTarget {
			delay = p.toTarget
		}
		p.mu.Unlock()
		if m != modeForward {
			return false, true
		}
		wait := time.Until(read.Add(delay))
		if wait <= 0 {
			return true, true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			return true, true
		case <-changed:
			t.Stop() // the fault changed: wait for the new one instead
		case <-l.done:
			t.Stop()
			return false, false
		}
	}
}

// close stops the proxy and waits for its goroutines.
func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for l := range p.links {
		l.close(false)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// link is one client connection and its connection to the target.
type link struct {
	client *net.TCPConn
	done   chan struct{}

	mu     sync.Mutex
	server *net.TCPConn // nil until connected
	closed bool
}

// attach sets the connection to the target; false if l is already closed.
func (l *link) attach(server *net.TCPConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.server = server
	return true
}

// close closes both connections, with a reset when rst is set; calling it
// again does nothing.
func (l *link) close(rst bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	for _, c := range []*net.TCPConn{l.client, l.server} {
		if c == nil {
			continue
		}
		if rst {
			reset(c)
		} else {
			_ = c.Close()
		}
	}
}

// reset closes c with a TCP RST instead of a FIN.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
