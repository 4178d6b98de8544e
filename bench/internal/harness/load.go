package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Request is one request a Driver sends, and what it must get back.
type Request struct {
	// URL is the full URL, e.g. http://127.0.0.1:1234/v1/systemone.
	URL  string
	Key  string // bearer key
	Body []byte
	// Want is the body the answer must carry, byte for byte: the upstream's
	// own answer to Body.
	Want []byte
	// Check, when set, inspects the answer's header (the gateway's headers).
	Check func(http.Header) error
}

// Result is what one run of a Driver saw.
type Result struct {
	// Requests is how many requests completed, all of them checked.
	Requests int
	// Err is the first failure (a transport error, a status other than
	// 200, an answer that is not the upstream's); the run stops at it.
	Err error
	// Elapsed is the run's wall-clock time.
	Elapsed time.Duration
	// Latencies holds every request's latency, sorted. In an open-loop run
	// a request's latency counts from when it was due, so time spent
	// waiting for a free connection counts too.
	Latencies []time.Duration
}

// Throughput is completed requests per second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Percentile returns the latency at or below which a fraction q (0..1) of
// the requests completed.
func (r Result) Percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q*float64(len(r.Latencies))+0.5) - 1
	return r.Latencies[min(max(i, 0), len(r.Latencies)-1)]
}

// Driver sends requests over kept-alive loopback connections.
type Driver struct {
	client *http.Client
}

// NewDriver returns a driver keeping up to conns connections per server
// open. Responses are not decompressed: a client sees the bytes the
// upstream sent.
func NewDriver(conns int) *Driver {
	return &Driver{client: &http.Client{Transport: &http.Transport{
		Proxy:               nil, // loopback only
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        4 * conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}}
}

// Close closes the idle connections.
func (d *Driver) Close() { d.client.CloseIdleConnections() }

// Do sends one request and checks its answer; buf holds the body read.
func (d *Driver) Do(ctx context.Context, r Request, buf *bytes.Buffer) error {
	header, err := d.post(ctx, r, buf)
	switch {
	case err != nil:
		return err
	case !bytes.Equal(buf.Bytes(), r.Want):
		return fmt.Errorf("%s: the answer (%d bytes) is not the upstream's (%d bytes)", r.URL, buf.Len(), len(r.Want))
	case r.Check != nil:
		if err := r.Check(header); err != nil {
			return fmt.Errorf("%s: %v", r.URL, err)
		}
	}
	return nil
}

// Answer sends one request and returns the body of its 200 answer, without
// checks: how a reference answer is read.
func (d *Driver) Answer(ctx context.Context, r Request) ([]byte, error) {
	var buf bytes.Buffer
	_, err := d.post(ctx, r, &buf)
	return buf.Bytes(), err
}

// post sends r and reads the answer into buf; anything but a 200 is an error.
func (d *Driver) post(ctx context.Context, r Request, buf *bytes.Buffer) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: reading the answer: %v", r.URL, err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s answered %s (X-Gateway-Reject %q): %.300s", r.URL, resp.Status, resp.Header.Get("X-Gateway-Reject"), buf.Bytes())
	}
	return resp.Header, nil
}

// Closed runs a closed loop: concurrency clients each send reqs in turn
// (spread over them round-robin), one at a time, for duration.
func (d *Driver) Closed(ctx context.Context, reqs []Request, concurrency int, duration time.Duration) Result {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	start := time.Now()
	deadline := start.Add(duration)
	lat := make([][]time.Duration, concurrency)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			var buf bytes.Buffer
			for ctx.Err() == nil && time.Now().Before(deadline) {
				r := reqs[int(next.Add(1)-1)%len(reqs)]
				t := time.Now()
				if err := d.Do(ctx, r, &buf); err != nil {
					cancel(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		})
	}
	wg.Wait()
	return result(ctx, start, lat)
}

// Open runs an open loop: requests are due at rate per second for duration
// whatever the answers' pace, sent by up to workers clients at a time. A
// request that finds every worker busy waits, and its latency includes the
// wait, so a server that falls behind shows it.
func (d *Driver) Open(ctx context.Context, reqs []Request, rate float64, duration time.Duration, workers int) Result {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type job struct {
		due time.Time
		r   Request
	}
	total := int(rate * duration.Seconds())
	jobs := make(chan job, total)
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var buf bytes.Buffer
			for j := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if err := d.Do(ctx, j.r, &buf); err != nil {
					cancel(err)
					continue
				}
				lat[w] = append(lat[w], time.Since(j.due))
			}
		})
	}
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; i < total && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		jobs <- job{due, reqs[i%len(reqs)]}
	}
	close(jobs)
	wg.Wait()
	return result(ctx, start, lat)
}

func result(ctx context.Context, start time.Time, lat [][]time.Duration) Result {
	r := Result{Elapsed: time.Since(start), Latencies: slices.Concat(lat...)}
	slices.Sort(r.Latencies)
	r.Requests = len(r.Latencies)
	// A failed request, or the caller's cancellation, ends the run early.
	r.Err = context.Cause(ctx)
	return r
}
