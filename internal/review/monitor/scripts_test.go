package monitor

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redistest"
)

// noteScript notes one label, as the review API's label script does; the
// test drives it with the store's own take and reset scripts.
var noteScript = redis.NewScript(Library + `
guarantee_note(KEYS, ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]))
return 1`)

// Exact replay: random notes (first labels, corrections, duplicates of a
// request id, questions of two groups per entry, labels after an entry
// was taken), takes at moving times with small limits, and resets, run
// through the Redis scripts and through the Ledger, give the same entries
// taken, the same states bit for bit and the same alarms, at several
// targets and alphas, crossing alarms and resets.
func TestLuaMatchesLedger(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	members := []string{"noul:m:1", "choice:m:1", "noul@acme:m:1", "score:other"}
	applied := 0 // late corrections that moved a group, over the cases
	for c, params := range []Params{{0.9, 0.05, 0}, {0.95, 0.05, 3}, {0.8, 0.01, 0}, {0.999, 0.2, 2}, {0.123456789, 0.0333, 4}} {
		rng := rand.New(rand.NewPCG(5, uint64(c)))
		keys := LuaKeys(fmt.Sprintf("case%d:", c))
		args := LuaArgs(params)
		ledger := NewLedger(params)
		p := params.Target * (0.5 + 0.5*rng.Float64())
		now, alarms, resets, corrections := int64(0), 0, 0, 0
		for step := range 3000 {
			switch op := rng.IntN(40); {
			case op < 6: // a label after the window: a late correction
				entry := fmt.Sprintf("%08d", rng.IntN(step/3+1))
				q := QuestionLabel{Question: fmt.Sprint("q", rng.IntN(4)), Agree: rng.IntN(4) == 0}
				var want []string
				for _, tk := range ledger.Correct(entry, q) {
					want = append(want, tk.Member, tk.State.Encode(), map[bool]string{true: "1", false: "0"}[tk.Raised])
					if tk.Raised {
						alarms++
					}
				}
				agree := map[bool]string{true: "1", false: "0"}[q.Agree]
				out, err := correctScript.Run(ctx, client, keys, entry, args[0], args[1], q.Question, agree).StringSlice()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, want) {
					t.Fatalf("params %+v, step %d: correction of %s %s\nLua %q\nGo  %q", params, step, entry, q.Question, out, want)
				}
				if len(want) > 0 {
					corrections++
				}
			case op < 28: // a label
				entry := fmt.Sprintf("%08d", rng.IntN(step/3+1))
				rid := fmt.Sprint("r", rng.IntN(step/2+1))
				if rng.IntN(10) == 0 {
					rid = ""
				}
				q := QuestionLabel{Question: fmt.Sprint("q", rng.IntN(4)), Member: members[rng.IntN(len(members))], Agree: rng.Float64() < p}
				due := now + int64(rng.IntN(3))*10
				// An entry of one or two questions that feed a group,
				// complete once both are noted (in the later cases).
				total := 0
				if c >= 2 {
					n, _ := strconv.Atoi(entry)
					total = 1 + n%2
				}
				ledger.NoteOf(entry, due, rid, total, now, q)
				agree := "0"
				if q.Agree {
					agree = "1"
				}
				if err := noteScript.Run(ctx, client, keys, entry, due, rid, q.Question, q.Member, agree, total, now).Err(); err != nil {
					t.Fatal(err)
				}
			case op < 39: // a take
				now += int64(rng.IntN(15))
				limit := 1 + rng.IntN(5)
				// A correction window, and a horizon (the first entry
				// with no label) in the later cases.
				if c >= 2 {
					ledger.Window = 7
					ledger.Horizon = ""
					if rng.IntN(3) == 0 {
						ledger.Horizon = fmt.Sprintf("%08d", rng.IntN(step/3+1))
					}
				}
				n, taken := ledger.Take(now, limit)
				out, err := takeScript.Run(ctx, client, keys, append(append([]string{strconv.FormatInt(now, 10), strconv.Itoa(limit)}, args...),
					strconv.FormatInt(ledger.Window, 10), ledger.Horizon, strconv.Itoa(params.MaxQuestions))).StringSlice()
				if err != nil {
					t.Fatal(err)
				}
				want := []string{strconv.Itoa(n)}
				for _, tk := range taken {
					want = append(want, tk.Member, tk.State.Encode(), map[bool]string{true: "1", false: "0"}[tk.Raised])
					if tk.Raised {
						alarms++
					}
				}
				if !slices.Equal(out, want) {
					t.Fatalf("params %+v, step %d: take\nLua %q\nGo  %q", params, step, out, want)
				}
			default: // a reset
				m := members[rng.IntN(len(members))]
				s, found := ledger.Reset(m)
				out, err := resetScript.Run(ctx, client, keys, m, args[0], "token").Text()
				if found != (err == nil) || found && out != s.Encode() {
					t.Fatalf("params %+v, step %d: reset %s: Lua %q (%v), Go %q (%v)", params, step, m, out, err, s.Encode(), found)
				}
				if found {
					resets++
				}
			}
		}
		states, err := client.HGetAll(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for m, s := range ledger.States {
			want[m] = s.Encode()
		}
		if !maps.Equal(states, want) {
			t.Fatalf("params %+v: states\nLua %v\nGo  %v", params, states, want)
		}
		inAlarm, _ := client.SMembers(ctx, keys[1]).Result()
		slices.Sort(inAlarm)
		if wantAlarm := slices.Sorted(maps.Keys(ledger.Alarms)); !slices.Equal(inAlarm, wantAlarm) {
			t.Fatalf("params %+v: alarms Lua %v, Go %v", params, inAlarm, wantAlarm)
		}
		pending, _ := client.ZCard(ctx, keys[3]).Result()
		if int(pending) != ledger.Pending() {
			t.Fatalf("params %+v: pending Lua %d, Go %d", params, pending, ledger.Pending())
		}
		applied += corrections
		t.Logf("params %+v: equal over 3,000 operations (%d alarms raised, %d resets, %d late corrections applied, %d pending)", params, alarms, resets, corrections, pending)
	}
	if applied < 10 {
		t.Fatalf("%d late corrections moved a group: too few to test them", applied)
	}
	// Lua's fresh state is Go's.
	fresh := redis.NewScript(Library + `return guarantee_fresh(tonumber(ARGV[1]))`)
	if v, err := fresh.Run(ctx, client, nil, "0.9").Text(); err != nil || v != Fresh(0.9).Encode() {
		t.Fatalf("fresh: Lua %q (%v), Go %q", v, err, Fresh(0.9).Encode())
	}
}
