package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// The attribution table: where each configuration's proxy CPU goes, per
// request, by group of code, from the CPU profiles -profile records. A
// sample goes to the group of the deepest frame of its stack that opens
// one (see groups): inside the handler, the limits' frames are the limits'
// group and reverse_proxy's frames reverse_proxy's; a frame that opens no
// group (an allocation, zap's encoder, a map) counts for the group of its
// caller; system calls and the collector's work have groups of their own,
// wherever they run. Per request is the group's CPU over the requests the
// profile covered. The transport's connection goroutines carry no caller:
// they count as reverse_proxy's, including a guardrails call's (G).

// group is a part of the proxy's work, opened by any frame whose function
// name starts with one of prefixes.
type group struct {
	name     string
	prefixes []string
}

const gatewayHandlers = "github.com/systemone/systemone-gateway/handlers."

// groups in the order the table prints them; a frame opens the first
// group one of whose prefixes it has.
var groups = []group{
	{"garbage collection (marking, assists, sweeping)", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.gcMarkTermination", "runtime.bgsweep", "runtime.bgscavenge", "runtime.markroot"}},
	{"gateway: the log entry and metrics", []string{gatewayHandlers + "(*Handler).record"}},
	{"gateway: limits", []string{"github.com/systemone/systemone-gateway/policy/limits"}},
	{"gateway: guardrails", []string{"github.com/systemone/systemone-gateway/policy/guardrails"}},
	{"gateway: reading and inspecting the request", []string{gatewayHandlers + "(*Handler).inspect"}},
	{"gateway: reading and routing the answer, its headers", []string{gatewayHandlers + "(*forwarding).commit", gatewayHandlers + "(*Handler).readAnswer", "github.com/systemone/systemone-gateway/policy/route"}},
	{"reverse_proxy (the upstream call)", []string{"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy", "net/http.(*persistConn)"}},
	{"gateway: the rest of the handler", []string{gatewayHandlers}},
	{"Caddy's server (routes, replacer, its logs)", []string{"github.com/caddyserver/caddy/v2"}},
	{"net/http server (reading requests, writing answers)", []string{"net/http.(*conn)", "net/http.(*response)", "net/http.(*chunkWriter)", "net/http.serverHandler"}},
	{"system calls and the scheduler (netpoll, goroutines)", []string{"syscall.", "internal/poll.", "runtime.netpoll", "runtime.schedule", "runtime.findRunnable", "runtime.mcall", "runtime.park_m"}},
}

// otherGroup takes the samples no group opens.
const otherGroup = "other (runtime, allocation outside a group)"

// attribute reads a CPU profile (as /debug/pprof/profile writes it) and
// returns the CPU nanoseconds of each group, otherGroup included.
func attribute(data []byte) (map[string]int64, error) {
	p, err := parseProfile(data)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64)
	for _, s := range p.samples {
		name := otherGroup
	stack:
		for _, loc := range s.locations { // the deepest first
			for _, fn := range p.functionsAt[loc] { // inlined ones first
				if g, ok := groupOf(p.names[fn]); ok {
					name = g
					break stack
				}
			}
		}
		out[name] += s.cpu
	}
	return out, nil
}

// groupOf is the group a function opens.
func groupOf(function string) (string, bool) {
	for _, g := range groups {
		for _, prefix := range g.prefixes {
			if strings.HasPrefix(function, prefix) {
				return g.name, true
			}
		}
	}
	return "", false
}

// profile is what attribute reads of a pprof profile.
type profile struct {
	samples     []sample
	functionsAt map[uint64][]uint64 // location id -> function ids, inlined first
	names       map[uint64]string   // function id -> name
}

type sample struct {
	locations []uint64 // leaf first
	cpu       int64    // ns: the value whose type is cpu
}

// parseProfile decodes a gzipped pprof profile (profile.proto), keeping
// the samples' stacks and CPU values, locations and function names.
func parseProfile(data []byte) (*profile, error) {
	if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
		if data, err = io.ReadAll(zr); err != nil {
			return nil, err
		}
	}
	p := &profile{functionsAt: map[uint64][]uint64{}, names: map[uint64]string{}}
	var strs []string
	var valueTypes [][2]int64 // type, unit string indexes
	var rawSamples [][]byte
	funcNames := map[uint64]int64{} // function id -> string index
	err := fields(data, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch num {
		case 1: // sample_type
			var vt [2]int64
			err := fields(b, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
				if n == 1 || n == 2 {
					vt[n-1] = int64(v)
				}
				return nil
			})
			valueTypes = append(valueTypes, vt)
			return err
		case 2: // sample
			rawSamples = append(rawSamples, b)
		case 4: // location
			var id uint64
			var fns []uint64
			err := fields(b, func(n protowire.Number, _ protowire.Type, v uint64, line []byte) error {
				switch n {
				case 1:
					id = v
				case 4:
					return fields(line, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
						if n == 1 {
							fns = append(fns, v)
						}
						return nil
					})
				}
				return nil
			})
			p.functionsAt[id] = fns
			return err
		case 5: // function
			var id uint64
			var name int64
			err := fields(b, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
				switch n {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			funcNames[id] = name
			return err
		case 6: // string_table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for id, i := range funcNames {
		if i >= 0 && i < int64(len(strs)) {
			p.names[id] = strs[i]
		}
	}
	cpu := -1
	for i, vt := range valueTypes {
		if vt[0] >= 0 && vt[0] < int64(len(strs)) && strs[vt[0]] == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("not a CPU profile: no sample type cpu")
	}
	for _, b := range rawSamples {
		var s sample
		var values []int64
		err := fields(b, func(n protowire.Number, typ protowire.Type, v uint64, packed []byte) error {
			switch n {
			case 1:
				s.locations = appendVarints(s.locations, typ, v, packed)
			case 2:
				for _, u := range appendVarints(nil, typ, v, packed) {
					values = append(values, int64(u))
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if cpu < len(values) {
			s.cpu = values[cpu]
		}
		p.samples = append(p.samples, s)
	}
	return p, nil
}

// appendVarints appends a repeated varint field's values, packed or not.
func appendVarints(out []uint64, typ protowire.Type, v uint64, packed []byte) []uint64 {
	if typ == protowire.VarintType {
		return append(out, v)
	}
	for len(packed) > 0 {
		u, n := protowire.ConsumeVarint(packed)
		if n < 0 {
			break
		}
		out, packed = append(out, u), packed[n:]
	}
	return out
}

// fields calls f for each field of a protobuf message: a varint's value in
// v, a length-delimited field's bytes in b (other wire types are skipped).
func fields(msg []byte, f func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return fmt.Errorf("profile: %w", protowire.ParseError(n))
		}
		msg = msg[n:]
		var v uint64
		var b []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(msg)
		case protowire.BytesType:
			b, n = protowire.ConsumeBytes(msg)
		default:
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 {
			return fmt.Errorf("profile: %w", protowire.ParseError(n))
		}
		msg = msg[n:]
		if typ == protowire.VarintType || typ == protowire.BytesType {
			if err := f(num, typ, v, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// profiled is one configuration's CPU profile: what each group took and
// the requests it covered.
type profiled struct {
	config   string
	groups   map[string]int64 // ns
	requests float64
}

// attributionTable prints, for one payload, the CPU µs per request of each
// group under each configuration profiled, and each configuration's
// difference to the first (P).
func attributionTable(out io.Writer, payloadName string, ps []profiled) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(out, "\n## Where the proxy's CPU goes, %s: µs per request by group, from the CPU profiles\n\n", payloadName)
	header := []string{"group"}
	for _, p := range ps {
		header = append(header, p.config)
	}
	for _, p := range ps[1:] {
		header = append(header, p.config+" − "+ps[0].config)
	}
	tw := newTable(out, header...)
	names := make([]string, 0, len(groups)+1)
	for _, g := range groups {
		names = append(names, g.name)
	}
	names = append(names, otherGroup, "all")
	per := func(p profiled, name string) float64 {
		var ns int64
		if name == "all" {
			for _, v := range p.groups {
				ns += v
			}
		} else {
			ns = p.groups[name]
		}
		return float64(ns) / 1000 / max(p.requests, 1)
	}
	for _, name := range names {
		cells := []string{name}
		for _, p := range ps {
			cells = append(cells, fmt.Sprintf("%.1f", per(p, name)))
		}
		for _, p := range ps[1:] {
			cells = append(cells, fmt.Sprintf("%+.1f", per(p, name)-per(ps[0], name)))
		}
		tw.row(cells...)
	}
	tw.flush()
}
