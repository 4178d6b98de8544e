package harness

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// guardrailsStubEnv, set in a benchmark program's environment, makes it
// serve the guardrails stub on the address it holds instead of running.
const guardrailsStubEnv = "SYSTEMONE_BENCH_GUARDRAILS_STUB"

// stubVerdict is the guardrails service's answer for clean text, as the
// guardrails seed shows it.
var stubVerdict = []byte(`{"id":"req_bench","result":{"compliance":{"risk_level":"无风险","categories":[]},` +
	`"security":{"risk_level":"无风险","categories":[]}},"overall_risk_level":"无风险","suggest_action":"通过","suggest_answer":""}`)

// ServeGuardrailsStubIfAsked serves the guardrails stub, and never returns,
// when the program was started as the stack's guardrails service. Benchmark
// programs call it first thing in main.
//
// The stub is G's "fast guardrails server": it reads each request whole,
// checks that it is a POST to /v1/guardrails with a bearer key and a JSON
// object holding messages, and answers the clean verdict. The simulator's
// own /v1/guardrails scans every message for its trigger phrases, about
// 5 ms for a 256 KiB state: a benchmark against it would measure the
// simulator, not the gateway's call.
//
// The same call serves the cheap upstream (see UpstreamStub) when the
// program was started as that.
func ServeGuardrailsStubIfAsked() {
	if addr := os.Getenv(upstreamStubEnv); addr != "" {
		serveUpstreamStub(addr)
	}
	addr := os.Getenv(guardrailsStubEnv)
	if addr == "" {
		return
	}
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(serveStub), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, srv.ListenAndServe())
	os.Exit(1)
}

func serveStub(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case r.Method != http.MethodPost || r.URL.Path != "/v1/guardrails":
		http.Error(w, "not found", http.StatusNotFound)
		return
	case len(r.Header.Get("Authorization")) < len("Bearer x"):
		http.Error(w, `{"code":40101,"message":"Invalid API key"}`, http.StatusUnauthorized)
		return
	case !bytes.HasPrefix(body, []byte(`{`)) || !bytes.Contains(body, []byte(`"messages":[{`)):
		http.Error(w, `{"code":40001,"message":"Invalid request parameters"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(stubVerdict)))
	_, _ = w.Write(stubVerdict)
}

// startGuardrailsStub runs this program again as the guardrails stub.
func startGuardrailsStub(dir string) (*Process, string, error) {
	return startStub("guardrails", dir, guardrailsStubEnv, "does main call harness.ServeGuardrailsStubIfAsked?")
}
