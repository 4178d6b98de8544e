package main

import (
	"errors"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// gcPercent reads the collector's current GOGC.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestMemoryDefaults: with nothing in the environment the binary sets GOGC
// 400 and a soft memory limit of 90% of the available memory, and writes
// both into the environment (so that Caddy's `run` keeps the limit); with
// GOGC, GOMEMLIMIT or AUTOMEMLIMIT set, it leaves that setting alone.
func TestMemoryDefaults(t *testing.T) {
	oldPercent, oldLimit := gcPercent(), debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	})
	const total = 8 << 30
	available := func() (uint64, error) { return total, nil }
	for _, tt := range []struct {
		name        string
		env         map[string]string
		wantPercent int   // 0: left alone
		wantLimit   int64 // 0: left alone
	}{
		{"nothing set", nil, 400, total * 9 / 10},
		{"GOGC set", map[string]string{"GOGC": "50"}, 0, total * 9 / 10},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, 400, 0},
		{"AUTOMEMLIMIT set", map[string]string{"AUTOMEMLIMIT": "0.5"}, 400, 0},
		{"both set", map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const sentinelPercent, sentinelLimit = 123, int64(3 << 30)
			debug.SetGCPercent(sentinelPercent)
			debug.SetMemoryLimit(sentinelLimit)
			written := map[string]string{}
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			setenv := func(k, v string) error { written[k] = v; return nil }
			got := applyMemoryDefaults(lookup, setenv, available)
			if got != (memoryDefaults{tt.wantPercent, tt.wantLimit}) {
				t.Fatalf("applied %+v, want GOGC %d and limit %d", got, tt.wantPercent, tt.wantLimit)
			}
			wantPercent, wantLimit := tt.wantPercent, tt.wantLimit
			if wantPercent == 0 {
				wantPercent = sentinelPercent
			} else if written["GOGC"] != strconv.Itoa(wantPercent) {
				t.Errorf("GOGC written %q", written["GOGC"])
			}
			if wantLimit == 0 {
				wantLimit = sentinelLimit
			} else if written["GOMEMLIMIT"] != strconv.FormatInt(wantLimit, 10) {
				t.Errorf("GOMEMLIMIT written %q", written["GOMEMLIMIT"])
			}
			if p := gcPercent(); p != wantPercent {
				t.Errorf("GOGC in effect %d, want %d", p, wantPercent)
			}
			if l := debug.SetMemoryLimit(-1); l != wantLimit {
				t.Errorf("memory limit in effect %d, want %d", l, wantLimit)
			}
			for k := range tt.env {
				if _, ok := written[k]; ok {
					t.Errorf("%s was set in the environment and written over", k)
				}
			}
		})
	}
	// Unreadable memory: no limit is set.
	debug.SetMemoryLimit(oldLimit)
	if got := applyMemoryDefaults(func(string) (string, bool) { return "", false }, func(string, string) error { return nil },
		func() (uint64, error) { return 0, errors.New("no cgroup, no sysinfo") }); got.memoryLimit != 0 || debug.SetMemoryLimit(-1) != oldLimit {
		t.Errorf("a limit was set without the memory known: %+v", got)
	}
}

// TestMemoryDefaultsInTheBinary: the built binary's environment (what its
// `environ` command prints, which Caddy's `run` reads) holds GOGC=400 and
// a GOMEMLIMIT by default, and exactly what the operator set otherwise.
func TestMemoryDefaultsInTheBinary(t *testing.T) {
	environ := func(extra ...string) map[string]string {
		t.Helper()
		cmd := exec.Command(bin, "environ")
		cmd.Dir = t.TempDir()
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "GOGC" && k != "GOMEMLIMIT" && k != "AUTOMEMLIMIT" {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, extra...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("environ: %v", err)
		}
		env := map[string]string{}
		for line := range strings.SplitSeq(string(out), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		return env
	}
	env := environ()
	if env["GOGC"] != "400" {
		t.Errorf("default GOGC %q, want 400", env["GOGC"])
	}
	if limit, err := strconv.ParseInt(env["GOMEMLIMIT"], 10, 64); err != nil || limit <= 0 {
		t.Errorf("default GOMEMLIMIT %q, want a number of bytes", env["GOMEMLIMIT"])
	}
	env = environ("GOGC=50", "GOMEMLIMIT=1GiB")
	if env["GOGC"] != "50" || env["GOMEMLIMIT"] != "1GiB" {
		t.Errorf("with GOGC=50 GOMEMLIMIT=1GiB set, the binary runs with GOGC=%q GOMEMLIMIT=%q", env["GOGC"], env["GOMEMLIMIT"])
	}
}
