package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/wait"
)

// echo serves an echo on loopback until the test ends; closed reports the
// connections that ended on the server's side.
func echo(t *testing.T) (addr string, closed <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ends := make(chan error, 100)
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, err := io.Copy(c, c)
				ends <- err
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String(), ends
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back.
func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading the echo of %q: %v", msg, err)
	}
	return string(buf)
}

// silent asserts that nothing arrives on c for a moment. A black hole
// delivers nothing however long one waits, so the wait's length only
// bounds how late a wrongly forwarded byte could be noticed.
func silent(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v through a black hole, want nothing", buf[:n], err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, what, cond)
}

func TestPass(t *testing.T) {
	target, _ := echo(t)
	p := Start(t, target)
	c := dial(t, p.Addr())
	if got := roundTrip(t, c, "hello"); got != "hello" {
		t.Fatalf("echo %q", got)
	}
	if p.Conns() != 1 {
		t.Errorf("%d connections, want 1", p.Conns())
	}
	c.Close()
	waitFor(t, "the proxy to let go of a closed connection", func() bool { return p.Conns() == 0 && p.Goroutines() == 1 })
}

func TestLatencyPerDirection(t *testing.T) {
	target, _ := echo(t)
	p := Start(t, target)
	c := dial(t, p.Addr())
	roundTrip(t, c, "warm")
	for _, tc := range []struct{ toTarget, toClient time.Duration }{
		{100 * time.Millisecond, 0},
		{0, 100 * time.Millisecond},
	} {
		p.Latency(tc.toTarget, tc.toClient)
		start := time.Now()
		roundTrip(t, c, "x")
		if d := time.Since(start); d < tc.toTarget+tc.toClient {
			t.Errorf("latency %v/%v: round trip took %v", tc.toTarget, tc.toClient, d)
		}
	}
	// Latency delays each read, it does not queue reads behind each other:
	// ten writes come back in about one delay, not ten.
	p.Latency(0, 200*time.Millisecond)
	start := time.Now()
	for i := 0; i < 10; i++ {
		if _, err := c.Write([]byte("y")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("ten delayed writes echoed in %v, want about 200ms", d)
	}
	// Clearing the fault releases bytes already waiting.
	p.Latency(0, time.Hour)
	if _, err := c.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let the echo reach the proxy
	p.Pass()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("a byte held by a cleared latency: %v", err)
	}
}

func TestBlackHole(t *testing.T) {
	target, _ := echo(t)
	p := Start(t, target)
	old := dial(t, p.Addr())
	roundTrip(t, old, "before")

	p.BlackHole()
	if _, err := old.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	silent(t, old)
	// New connections are accepted and kept, and hear nothing either.
	fresh := dial(t, p.Addr())
	if _, err := fresh.Write([]byte("lost too")); err != nil {
		t.Fatal(err)
	}
	silent(t, fresh)
	if p.Conns() != 2 {
		t.Errorf("%d connections kept, want 2", p.Conns())
	}

	// Once passing again, bytes flow; what the black hole took stays lost.
	p.Pass()
	if got := roundTrip(t, old, "after"); got != "after" {
		t.Errorf("echo %q after the black hole, want only the new bytes", got)
	}
	if got := roundTrip(t, fresh, "after"); got != "after" {
		t.Errorf("echo %q on a connection made in the black hole", got)
	}
}

func TestReset(t *testing.T) {
	target, serverEnds := echo(t)
	p := Start(t, target)
	c := dial(t, p.Addr())
	roundTrip(t, c, "before")

	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("open connection: %v, want a reset", err)
	}
	select {
	case <-serverEnds:
	case <-time.After(5 * time.Second):
		t.Error("the target's side of the connection was not closed")
	}
	// A new connection is accepted, then reset.
	expectReset(t, p.Addr())
	p.Pass()
	if got := roundTrip(t, dial(t, p.Addr()), "after"); got != "after" {
		t.Errorf("echo %q after the resets", got)
	}
}

func TestRefuse(t *testing.T) {
	target, _ := echo(t)
	p := Start(t, target)
	c := dial(t, p.Addr())
	roundTrip(t, c, "before")

	p.Refuse()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("open connection: %v, want it closed", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial: %v, want connection refused", err)
	}
	p.Pass()
	if got := roundTrip(t, dial(t, p.Addr()), "after"); got != "after" {
		t.Errorf("echo %q after listening again", got)
	}
}

// A target that is down makes the proxy reset its clients.
func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := Start(t, addr)
	expectReset(t, p.Addr())
}

// expectReset connects to addr and expects a reset: of the connection, or
// already of the connect when the reset beat it.
func expectReset(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("%v, want a reset", err)
	}
}

// Closing the proxy ends every goroutine it started.
func TestCloseEndsGoroutines(t *testing.T) {
	target, _ := echo(t)
	var p *Proxy
	t.Run("open", func(t *testing.T) {
		p = Start(t, target)
		for i := 0; i < 5; i++ {
			roundTrip(t, dial(t, p.Addr()), "x")
		}
		p.Latency(0, time.Hour)
		_, _ = dial(t, p.Addr()).Write([]byte("held"))
		if n := p.Goroutines(); n < 1+5*4 {
			t.Errorf("%d goroutines for 6 connections", n)
		}
	})
	if n := p.Goroutines(); n != 0 {
		t.Errorf("%d goroutines after the proxy closed", n)
	}
}
