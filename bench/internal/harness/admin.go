package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// Sample is what the proxy process holds at one moment.
type Sample struct {
	Goroutines int
	// HeapLive is the heap in use right after a forced garbage collection:
	// what the process keeps, not what it has yet to collect.
	HeapLive uint64
	// RSS is the resident set size, from /proc.
	RSS int64
}

// SampleProxy reads the proxy's goroutines and live heap from its admin
// endpoint (pprof and expvar) and its RSS from /proc.
func (s *Stack) SampleProxy(ctx context.Context) (Sample, error) {
	var out Sample
	data, err := Get(ctx, s.ProxyAdmin+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		return out, err
	}
	// "goroutine profile: total 42"
	line, _, _ := bytes.Cut(data, []byte("\n"))
	total, ok := bytes.CutPrefix(line, []byte("goroutine profile: total "))
	if out.Goroutines, err = strconv.Atoi(string(total)); !ok || err != nil {
		return out, fmt.Errorf("unreadable goroutine profile: %q", line)
	}
	// The heap profile's gc=1 collects first; expvar then reports the heap
	// the collection left.
	if _, err := Get(ctx, s.ProxyAdmin+"/debug/pprof/heap?gc=1"); err != nil {
		return out, err
	}
	vars, err := Get(ctx, s.ProxyAdmin+"/debug/vars")
	if err != nil {
		return out, err
	}
	var v struct {
		Memstats struct {
			HeapAlloc uint64
		}
	}
	if err := json.Unmarshal(vars, &v); err != nil {
		return out, fmt.Errorf("unreadable /debug/vars: %v", err)
	}
	out.HeapLive = v.Memstats.HeapAlloc
	out.RSS, err = RSS(s.Proxy.PID())
	return out, err
}
