package guardrails

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCheckOneConnection measures one check of a small state against a service on
// loopback that answers at once on one kept-alive connection (served on
// one goroutine, so that the service's own work stays small and alike):
// the check's encoding, the call over the shared connection, and the
// verdict. Each check has a state of its own (no call is shared); the
// process's CPU time per check is reported as cpu-ns/op.
func BenchmarkCheckOneConnection(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go serveOneConnection(ln, passAnswer)
	c := newChecker(b, Config{URL: "http://" + ln.Addr().String()})
	states := make([][]byte, 1024)
	for i := range states {
		states[i] = []byte(strconv.Quote("The parcel arrived two days late, order " + strconv.Itoa(i)))
	}
	c.Check(context.Background(), states[0]) // dials
	b.ReportAllocs()
	var ru syscall.Rusage
	cpu := func() time.Duration {
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	i := 0
	for b.Loop() {
		if v := c.Check(context.Background(), states[i%len(states)]); v.Action != ActionPass {
			b.Fatalf("%+v", v)
		}
		i++
	}
	b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
}

// serveOneConnection accepts one connection and answers every request on
// it with body, on this goroutine.
func serveOneConnection(ln net.Listener, body string) {
	conn, err := ln.Accept()
	if err != nil {
		return
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		resp := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if _, err := io.WriteString(conn, resp); err != nil {
			return
		}
	}
}
