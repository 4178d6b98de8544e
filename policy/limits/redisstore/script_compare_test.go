package redisstore

import (
	_ "embed"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redistest"
)

// batchBefore is the batch script as it was before the admission without
// a budget got a body of its own (kind "a" for every admission, its KEYS
// and ARGV copied into tables per item), kept to measure the two side by
// side.
//
//go:embed testdata/batch_before.lua
var batchBefore string

// BenchmarkAdmitScriptSideBySide runs the same admissions (20
// organizations in turn, one request and 1,500 tokens each, holds
// checked, no budget) through the script before and the script now, one
// call at a time, alternating (each first in turn), and reports by Redis's own account (INFO
// commandstats) the µs per item of each (before-µs/item, now-µs/item) and
// the commands each item ran (before-cmds/item, now-cmds/item), in calls
// of 1, 10 and 100 items. The machine's other work moves both alike: only
// their ratio is to be read from a busy machine.
func BenchmarkAdmitScriptSideBySide(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = c.Close() })
	before := redis.NewScript(batchBefore)
	s := &Store{prefix: "b:"}
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			beforeCalls, nowCalls := make([]*scriptCall, n), make([]*scriptCall, n)
			for i := range n {
				org := "o" + strconv.Itoa(i%20)
				beforeCalls[i] = &scriptCall{kind: kindAdmit, keys: []string{"b:{" + org + "}:b"},
					args: []any{"", benchReq.Capacity, benchReq.Rate, benchTok.Capacity, benchTok.Rate, 1, 1500, "1", 0}}
				nowCalls[i] = s.admitCall(org, admission(benchReq, benchTok, 1500), 0)
			}
			var usec, cmds [2]float64
			scripts := [2]struct {
				script *redis.Script
				calls  []*scriptCall
			}{{before, beforeCalls}, {batchScript, nowCalls}}
			for i := range b.N {
				for j := range 2 {
					k := (i + j) % 2 // either first in turn
					sc := scripts[k]
					if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
						b.Fatal(err)
					}
					keys, args := batchArgs(sc.calls)
					if err := sc.script.Run(bg, c, keys, args...).Err(); err != nil {
						b.Fatal(err)
					}
					all := redistest.CommandStats(b, srv.Addr)
					v, err := strconv.ParseFloat(all["evalsha"]["usec"], 64)
					if err != nil {
						v, _ = strconv.ParseFloat(all["eval"]["usec"], 64) // the first call loads it
					}
					usec[k] += v
					for name, fields := range all {
						switch name {
						case "evalsha", "eval", "config|resetstat", "info", "script|load":
						default:
							calls, _ := strconv.ParseFloat(fields["calls"], 64)
							cmds[k] += calls
						}
					}
				}
			}
			items := float64(b.N * n)
			b.ReportMetric(usec[0]/items, "before-µs/item")
			b.ReportMetric(usec[1]/items, "now-µs/item")
			b.ReportMetric(cmds[0]/items, "before-cmds/item")
			b.ReportMetric(cmds[1]/items, "now-cmds/item")
		})
	}
}
