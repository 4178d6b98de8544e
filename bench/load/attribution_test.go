package main

import (
	"bytes"
	"compress/gzip"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// synthetic writes a gzipped CPU profile whose samples have the given
// stacks (function names, the deepest first) and CPU nanoseconds.
func synthetic(stacks [][]string, cpu []int64) []byte {
	strs := []string{"", "samples", "count", "cpu", "nanoseconds"}
	index := func(s string) uint64 {
		for i, t := range strs {
			if t == s {
				return uint64(i)
			}
		}
		strs = append(strs, s)
		return uint64(len(strs) - 1)
	}
	msg := func(build func(b []byte) []byte) []byte { return build(nil) }
	var b []byte
	for _, vt := range [][2]string{{"samples", "count"}, {"cpu", "nanoseconds"}} {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, msg(func(m []byte) []byte {
			m = protowire.AppendTag(m, 1, protowire.VarintType)
			m = protowire.AppendVarint(m, index(vt[0]))
			m = protowire.AppendTag(m, 2, protowire.VarintType)
			return protowire.AppendVarint(m, index(vt[1]))
		}))
	}
	fnID := map[string]uint64{}
	for i, stack := range stacks {
		var locs []byte
		for _, name := range stack {
			id, ok := fnID[name]
			if !ok {
				id = uint64(len(fnID) + 1)
				fnID[name] = id
				b = protowire.AppendTag(b, 5, protowire.BytesType) // function
				b = protowire.AppendBytes(b, msg(func(m []byte) []byte {
					m = protowire.AppendTag(m, 1, protowire.VarintType)
					m = protowire.AppendVarint(m, id)
					m = protowire.AppendTag(m, 2, protowire.VarintType)
					return protowire.AppendVarint(m, index(name))
				}))
				b = protowire.AppendTag(b, 4, protowire.BytesType) // location, one per function
				b = protowire.AppendBytes(b, msg(func(m []byte) []byte {
					m = protowire.AppendTag(m, 1, protowire.VarintType)
					m = protowire.AppendVarint(m, id)
					m = protowire.AppendTag(m, 4, protowire.BytesType)
					return protowire.AppendBytes(m, msg(func(l []byte) []byte {
						l = protowire.AppendTag(l, 1, protowire.VarintType)
						return protowire.AppendVarint(l, id)
					}))
				}))
			}
			locs = protowire.AppendVarint(locs, id)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType) // sample: packed locations and values
		b = protowire.AppendBytes(b, msg(func(m []byte) []byte {
			m = protowire.AppendTag(m, 1, protowire.BytesType)
			m = protowire.AppendBytes(m, locs)
			m = protowire.AppendTag(m, 2, protowire.BytesType)
			return protowire.AppendBytes(m, protowire.AppendVarint(protowire.AppendVarint(nil, 1), uint64(cpu[i])))
		}))
	}
	for _, s := range strs {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, _ = w.Write(b)
	_ = w.Close()
	return z.Bytes()
}

// TestAttribute: each sample goes to the group of the deepest frame that
// opens one; a frame that opens none (an allocation, zap) counts for its
// caller's group, system calls and the collector for theirs wherever they
// run, and what no frame opens for "other".
func TestAttribute(t *testing.T) {
	handler := gatewayHandlers + "(*Handler).ServeHTTP"
	conn := "net/http.(*conn).serve"
	data := synthetic([][]string{
		{"runtime.mallocgc", "go.uber.org/zap/zapcore.(*jsonEncoder).AddString", gatewayHandlers + "(*Handler).record", handler, conn},
		{"github.com/redis/go-redis/v9.(*Client).Process", "github.com/systemone/systemone-gateway/policy/limits.(*Limiter).Admit", handler, conn},
		{"syscall.Syscall6", "net/http.(*persistConn).readLoop"},
		{"net/http.Header.Clone", "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.(*Handler).ServeHTTP", handler, conn},
		{"runtime.gcAssistAlloc", "runtime.mallocgc", gatewayHandlers + "(*Handler).inspect", handler, conn},
		{"bufio.(*Reader).Read", conn},
		{"runtime.futex", "runtime.sysmon"},
		{"strings.HasSuffix", handler, conn},
	}, []int64{10, 20, 30, 40, 50, 60, 70, 80})
	got, err := attribute(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"gateway: the log entry and metrics":                   10,
		"gateway: limits":                                      20,
		"system calls and the scheduler (netpoll, goroutines)": 30,
		"reverse_proxy (the upstream call)":                    40,
		"garbage collection (marking, assists, sweeping)":      50,
		"net/http server (reading requests, writing answers)":  60,
		otherGroup:                         70,
		"gateway: the rest of the handler": 80,
	}
	for name, ns := range want {
		if got[name] != ns {
			t.Errorf("%s: %d ns, want %d (all: %v)", name, got[name], ns, got)
		}
	}
	var out bytes.Buffer
	scaled := map[string]int64{}
	for name, ns := range got {
		scaled[name] = 100 * ns // per request: 10 requests, ten times the microseconds
	}
	attributionTable(&out, "small-en", []profiled{{config: "P", groups: map[string]int64{otherGroup: 2000}, requests: 1},
		{config: "L", groups: scaled, requests: 10}})
	for _, want := range []string{"| gateway: limits                                      | 0.0 | 0.2 | +0.2 |", "| all                                                  | 2.0 | 3.6 | +1.6 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestAttributeRealProfile: a CPU profile the Go runtime writes, as the
// admin endpoint's, is read: its samples, their CPU, their functions.
func TestAttributeRealProfile(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skip("a CPU profile is already running:", err)
	}
	// Busy for 200ms of this process's CPU (a loaded machine gives it
	// less than the wall clock's), at most 10s.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano())
	}
	start, deadline := cpu(), time.Now().Add(10*time.Second)
	n := 0
	for cpu()-start < 200*time.Millisecond && time.Now().Before(deadline) {
		n += len(strings.Repeat("x", 1000))
	}
	pprof.StopCPUProfile()
	got, err := attribute(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, ns := range got {
		total += ns
	}
	if total < int64(50*time.Millisecond) {
		t.Fatalf("%v of CPU in the profile of a busy loop of 200ms of CPU: %v", time.Duration(total), got)
	}
	p, _ := parseProfile(buf.Bytes())
	found := false
	for _, name := range p.names {
		found = found || strings.HasSuffix(name, "TestAttributeRealProfile")
	}
	if !found {
		t.Fatal("the busy test function is not among the profile's functions")
	}
}
