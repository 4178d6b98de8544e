package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// upstreamStubEnv, set in a benchmark program's environment, makes it serve
// the cheap upstream on the address it holds instead of running.
const upstreamStubEnv = "SYSTEMONE_BENCH_UPSTREAM_STUB"

// Upstreams the proxy can be pointed at (Stack.UseUpstream).
const (
	// UpstreamStub answers each payload with the simulator's answer to it,
	// learnt beforehand: the upstream costs next to nothing, as a remote
	// service does seen from the gateway's machine.
	UpstreamStub = "stub"
	// UpstreamSimulator is the simulated service, on this machine.
	UpstreamSimulator = "simulator"
)

// upstreamStub is the cheap upstream: it reads each request whole and
// answers the body registered for a request of that length (POST
// /bench/answer?length=N with the answer as the body). The benchmarks
// register the simulator's own answer to each payload, and every payload
// has a length of its own, so the answer is correct and of the right size
// for the request's questions. Keying by length keeps the stub's cost to
// reading the request and writing the answer.
type upstreamStub struct {
	mu      sync.RWMutex
	answers map[int64][]byte
	bufs    sync.Pool
}

func serveUpstreamStub(addr string) {
	u := &upstreamStub{answers: make(map[int64][]byte)}
	srv := &http.Server{Addr: addr, Handler: u, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, srv.ListenAndServe())
	os.Exit(1)
}

func (u *upstreamStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/bench/answer" {
		n, err := strconv.ParseInt(r.URL.Query().Get("length"), 10, 64)
		body, rerr := io.ReadAll(r.Body)
		if err != nil || rerr != nil || r.Method != http.MethodPut {
			http.Error(w, "PUT /bench/answer?length=N with the answer", http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.answers[n] = body
		u.mu.Unlock()
		return
	}
	buf, _ := u.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer u.bufs.Put(buf)
	buf.Reset()
	_, err := buf.ReadFrom(r.Body)
	u.mu.RLock()
	answer, ok := u.answers[int64(buf.Len())]
	u.mu.RUnlock()
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case r.Method != http.MethodPost || r.URL.Path != "/v1/systemone":
		http.Error(w, "not found", http.StatusNotFound)
		return
	case len(r.Header.Get("Authorization")) < len("Bearer x"):
		http.Error(w, `{"detail":"Invalid API key"}`, http.StatusUnauthorized)
		return
	case !ok:
		http.Error(w, "no answer registered for a request of this length", http.StatusNotImplemented)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
	_, _ = w.Write(answer)
}

// startUpstreamStub runs this program again as the cheap upstream.
func startUpstreamStub(dir string) (*Process, string, error) {
	return startStub("upstream", dir, upstreamStubEnv, "does main call harness.ServeGuardrailsStubIfAsked? (it serves both stubs)")
}

// startStub runs this program again as a stub server named name, told its
// address through the environment variable env; hint says what to check
// when it does not start. It returns the stub's base URL.
func startStub(name, dir, env, hint string) (*Process, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	port, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p, err := startProcessEnv(name, dir, []string{env + "=" + addr}, self)
	if err != nil {
		return nil, "", err
	}
	if err := p.WaitListening(addr, 10*time.Second); err != nil {
		p.Stop()
		return nil, "", errors.Join(err, fmt.Errorf("the %s stub did not start: %s", name, hint))
	}
	return p, "http://" + addr, nil
}

// conflicts reports whether the stub answers requests of body's length
// for another body: it answers by length.
func (s *Stack) conflicts(body []byte) bool {
	other, ok := s.stubAnswers[len(body)]
	return ok && other != string(body)
}

// register tells the stub to answer requests of len(body) bytes with
// answer; another body of the same length is an error (the stub answers
// by length).
func (s *Stack) register(ctx context.Context, body, answer []byte) error {
	if s.conflicts(body) {
		return fmt.Errorf("two requests of %d bytes: the upstream stub answers by length and cannot tell them apart", len(body))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/bench/answer?length=%d", s.StubURL, len(body))
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(answer))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("registering an answer with the upstream stub: %s", resp.Status)
	}
	if s.stubAnswers == nil {
		s.stubAnswers = make(map[int]string)
	}
	s.stubAnswers[len(body)] = string(body)
	return nil
}
