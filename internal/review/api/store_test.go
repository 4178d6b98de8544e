package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

func testStore(t *testing.T) (*store, redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	return newStore(client, "systemone:", "review:human"), client
}

func mustID(t *testing.T, s string) record.ID {
	t.Helper()
	id, ok := record.ParseID(s)
	if !ok {
		t.Fatalf("bad id %q", s)
	}
	return id
}

// exportAll collects every record an export emits, and the batch sizes.
func exportAll(t *testing.T, s *store, batch int64) ([]string, []int) {
	t.Helper()
	var out []string
	var sizes []int
	err := s.export(context.Background(), batch, func(records []string) error {
		out = append(out, records...)
		sizes = append(sizes, len(records))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, sizes
}

// putMap stores records, in question id order, without the monitor.
func putMap(s *store, id record.ID, records map[string]string) error {
	var writes []labelWrite
	for _, q := range slices.Sorted(maps.Keys(records)) {
		writes = append(writes, labelWrite{question: q, record: records[q]})
	}
	return s.put(context.Background(), id, "", writes, false, time.Time{}, 0, time.Time{})
}

func TestStoreKeys(t *testing.T) {
	s, client := testStore(t)
	if err := putMap(s, mustID(t, "1700000000000-3"), map[string]string{"q": `{"x":1}`}); err != nil {
		t.Fatal(err)
	}
	keys, err := client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{"systemone:review:{review:human}:entry:1700000000000-3", "systemone:review:{review:human}:labeled"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	members, _ := client.ZRange(context.Background(), want[1], 0, -1).Result()
	if !slices.Equal(members, []string{"00000001700000000000-00000000000000000003"}) {
		t.Errorf("index members %q", members)
	}
}

// The export walks entries in stream id order (1-9 before 1-10, which a
// plain string order would swap), questions in id order, across batches;
// a later put replaces only the questions it names.
func TestStoreExportOrderAndReplace(t *testing.T) {
	s, _ := testStore(t)
	ctx := context.Background()
	puts := []struct {
		id      string
		records map[string]string
	}{
		{"2-0", map[string]string{"b": "2-0/b", "a": "2-0/a"}},
		{"1-10", map[string]string{"z": "1-10/z"}},
		{"1-9", map[string]string{"q": "1-9/q"}},
		{"10-0", map[string]string{"q": "10-0/q"}},
		{"2-0", map[string]string{"b": "2-0/b2"}}, // replaces b, keeps a
	}
	for _, p := range puts {
		if err := putMap(s, mustID(t, p.id), p.records); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"1-9/q", "1-10/z", "2-0/a", "2-0/b2", "10-0/q"}
	for _, batch := range []int64{1, 2, 3, 100} {
		got, sizes := exportAll(t, s, batch)
		if !slices.Equal(got, want) {
			t.Errorf("batch %d: export %q, want %q", batch, got, want)
		}
		if batch == 2 && !slices.Equal(sizes, []int{2, 3}) {
			// 4 entries in batches of 2 entries: 1-9 and 1-10, then 2-0 (two records) and 10-0.
			t.Errorf("batch 2: records per batch %v, want [2 3] and no empty round", sizes)
		}
	}
	labels, err := s.labels(ctx, []string{"2-0", "3-0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) != 2 || labels[0]["a"] != "2-0/a" || labels[0]["b"] != "2-0/b2" || len(labels[1]) != 0 {
		t.Errorf("labels %v", labels)
	}
	// An empty export emits nothing and succeeds.
	empty := newStore(s.client, "other:", "review:human")
	if got, _ := exportAll(t, empty, 10); len(got) != 0 {
		t.Errorf("empty export %q", got)
	}
}

// On Redis Cluster, a label write spans two keys in one MULTI: the hash
// tag keeps them in one slot.
func TestStoreCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client, err := redispool.NewClient(cluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(client, "systemone:", "review:human")
	ctx := context.Background()
	for _, id := range []string{"5-0", "1-0", "3-0"} {
		if err := putMap(s, mustID(t, id), map[string]string{"q": id}); err != nil {
			t.Fatalf("put on a cluster: %v", err)
		}
	}
	// With the monitor, the script also notes the pending observation,
	// and the take writes the state hash and the alarm set: same slot.
	params := monitor.Params{Target: 0.99, Alpha: 0.99} // alarms at the second disagreeing entry
	g := &monitor.Group{Model: "m", Type: "noul"}
	at := time.Unix(1700000000, 0)
	if err := s.put(ctx, mustID(t, "9-0"), "r9", []labelWrite{{question: "a", record: "9-0/a", group: g}, {question: "b", record: "9-0/b", group: g}}, true, at, 0, at); err != nil {
		t.Fatalf("put with the monitor on a cluster: %v", err)
	}
	if err := s.put(ctx, mustID(t, "9-1"), "r9.1", []labelWrite{{question: "a", record: "9-1/a", group: g}}, true, at, 0, at); err != nil {
		t.Fatal(err)
	}
	updates, err := s.take(ctx, at, params, 0)
	if err != nil || len(updates) != 2 || updates[1].State.Labels != 3 || updates[1].State.Entries != 2 || !updates[1].Raised {
		t.Fatalf("take on a cluster: %+v, %v", updates, err)
	}
	if st, found, err := s.monitor.Reset(ctx, *g, params); err != nil || !found || st.Sequence != 2 {
		t.Fatalf("reset on a cluster: %+v %v %v", st, found, err)
	}
	if err := s.put(ctx, mustID(t, "10-0"), "r10", []labelWrite{{question: "a", record: "10-0/a", group: g, agree: false}}, true, at, 0, at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.take(ctx, at, params, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := client.HLen(ctx, monitor.ResetKey("systemone:", "review:human")).Result(); err != nil || n != 1 {
		t.Errorf("reset tokens on a cluster: %d, %v", n, err)
	}
	if got, _ := exportAll(t, s, 2); !slices.Equal(got, []string{"1-0", "3-0", "5-0", "9-0/a", "9-0/b", "9-1/a", "10-0/a"}) {
		t.Errorf("export %q", got)
	}
	// The stream may live in any slot: reads of it are single-key.
	if err := client.XAdd(ctx, &redis.XAddArgs{Stream: "review:human", ID: "7-1", Values: []string{"org", "a"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if m, ok, err := s.entry(ctx, "7-1"); err != nil || !ok || m.Org != "a" {
		t.Errorf("entry on a cluster: %v %v %v", m, ok, err)
	}
}

// TestIndexMember: an index member reads back as its entry id, and the
// byte order of members is the order of ids.
func TestIndexMember(t *testing.T) {
	ids := []string{"0-1", "7-8", "9-0", "10-0", "18446744073709551615-18446744073709551615"}
	var members []string
	for _, s := range ids {
		id := mustID(t, s)
		m := indexMember(id)
		if back, ok := memberID(m); !ok || back != id.String() {
			t.Errorf("member round trip of %q: %q %v", s, back, ok)
		}
		members = append(members, m)
	}
	if !slices.IsSorted(members) {
		t.Errorf("members out of id order: %q", members)
	}
}

func TestCheckLabel(t *testing.T) {
	choices := kind{options: []string{"yes", "no", "maybe"}}
	tiers := kind{tiers: 4}
	for _, tc := range []struct {
		typ, label string
		k          kind
		want       string // stored form, or the error type
	}{
		{"noul", "true", kind{}, "true"},
		{"noul", "false", kind{}, "false"},
		{"noul", "1", kind{}, "bool_type"},
		{"noul", `"true"`, kind{}, "bool_type"},
		{"noul", "null", kind{}, "bool_type"},
		{"choice", `"anything"`, kind{}, `"anything"`},
		{"choice", `"maybe"`, choices, `"maybe"`},
		{"choice", `"other"`, choices, "literal_error"},
		{"choice", "1", kind{}, "string_type"},
		{"choice", "null", kind{}, "string_type"},
		{"score", "3", tiers, "3"},
		{"score", "3.0", tiers, "3"},
		{"score", "4", tiers, "less_than_equal"},
		{"score", "9", kind{}, "9"},
		{"score", "10", kind{}, "less_than_equal"},
		{"score", "-1", kind{}, "greater_than_equal"},
		{"score", "1.5", kind{}, "int_from_float"},
		{"score", `"2"`, kind{}, "int_type"},
		{"score", "true", kind{}, "int_type"},
		{"score", "null", kind{}, "int_type"},
		{"teleport", "1", kind{}, "value_error"},
	} {
		var errs errorList
		got, ok := checkLabel(&errs, loc("body", "labels", "q"), tc.typ, json.RawMessage(tc.label), tc.k)
		if ok && string(got) != tc.want || !ok && (len(errs.errs) != 1 || errs.errs[0].Type != tc.want) {
			t.Errorf("%s %s: %s %v %+v, want %s", tc.typ, tc.label, got, ok, errs.errs, tc.want)
		}
	}
	var errs errorList
	checkLabel(&errs, loc("body", "labels", "q"), "choice", json.RawMessage(`"x"`), choices)
	if e := errs.errs[0]; e.Msg != "Input should be 'yes', 'no' or 'maybe'" || e.Ctx["expected"] != "'yes', 'no' or 'maybe'" {
		t.Errorf("literal_error %+v", e)
	}
}

func TestRequestKinds(t *testing.T) {
	req := `{"state":"s","questions":{
		"c":{"type":"choice","instructions":"x","criteria":{"b":null,"a":"desc","b":"again"}},
		"s":{"type":"score","instructions":"x","criteria":["lo","mid","hi"]},
		"n":{"type":"noul","instructions":"x"}}}`
	k := requestKinds(&req)
	if !slices.Equal(k["c"].options, []string{"b", "a"}) || k["s"].tiers != 3 || len(k) != 2 {
		t.Errorf("kinds %+v", k)
	}
	bad := "not json"
	if requestKinds(&bad) != nil || requestKinds(nil) != nil {
		t.Error("kinds from no request")
	}
}

func TestUnmarshalCaddyfile(t *testing.T) {
	t.Setenv("SYSTEMONE_TEST_TARGET", "0.9")
	for _, tc := range []struct {
		in   string
		want Handler
		err  string
	}{
		{in: "systemone_review {\n redis redis://a:6379 redis://b:6379\n key_prefix p:\n stream review:human\n}",
			want: Handler{Redis: []string{"redis://a:6379", "redis://b:6379"}, KeyPrefix: "p:", Stream: "review:human"}},
		{in: "systemone_review {\n redis {env.REDIS}\n stream s\n}", want: Handler{Redis: []string{"{env.REDIS}"}, Stream: "s"}},
		{in: "systemone_review", want: Handler{}},
		{in: "systemone_review x", err: "wrong argument count"},
		{in: "systemone_review {\n redis\n}", err: "wrong argument count"},
		{in: "systemone_review {\n stream a b\n}", err: "wrong argument count"},
		{in: "systemone_review {\n stream a\n stream b\n}", err: "duplicate stream"},
		{in: "systemone_review {\n streams a\n}", err: `unknown subdirective "streams"`},
		{in: "systemone_review {\n stream a {\n x\n }\n}", err: "takes no block"},
		{in: "systemone_review {\n monitor 0.95\n}", want: Handler{Monitor: &Monitor{Target: 0.95}}},
		{in: "systemone_review {\n monitor {env.SYSTEMONE_TEST_TARGET} alpha 0.01\n}", want: Handler{Monitor: &Monitor{Target: 0.9, Alpha: 0.01}}},
		{in: "systemone_review {\n monitor\n}", err: "wrong argument count"},
		{in: "systemone_review {\n monitor 1\n}", err: "target 1 is outside (0, 1)"},
		{in: "systemone_review {\n monitor 0\n}", err: "target 0 is outside (0, 1)"},
		{in: "systemone_review {\n monitor high\n}", err: `monitor target "high" is not a number`},
		{in: "systemone_review {\n monitor 0.9 alpha\n}", err: "wrong argument count"},
		{in: "systemone_review {\n monitor 0.9 alpha 0\n}", err: "alpha 0 is outside (0, 1)"},
		{in: "systemone_review {\n monitor 0.9 alpha 1.5\n}", err: "alpha 1.5 is outside (0, 1)"},
		{in: "systemone_review {\n monitor 0.9 beta 0.1\n}", err: "then alpha <a>, by org or settle <duration>"},
		{in: "systemone_review {\n monitor 0.9 alpha 0.1 x\n}", err: `not "x"`},
		{in: "systemone_review {\n monitor 0.9 by org settle 0s\n}", want: Handler{Monitor: &Monitor{Target: 0.9, ByOrg: true, Settle: durationOf(0)}}},
		{in: "systemone_review {\n monitor 0.9 settle 1h30m alpha 0.1\n}", want: Handler{Monitor: &Monitor{Target: 0.9, Alpha: 0.1, Settle: durationOf(90 * time.Minute)}}},
		{in: "systemone_review {\n monitor 0.9 by team\n}", err: `monitor by "team": want by org`},
		{in: "systemone_review {\n monitor 0.9 by\n}", err: "wrong argument count"},
		{in: "systemone_review {\n monitor 0.9 settle -1s\n}", err: `settle "-1s" is not a duration`},
		{in: "systemone_review {\n monitor 0.9 settle soon\n}", err: `settle "soon" is not a duration`},
		{in: "systemone_review {\n monitor 0.9 settle 1s settle 2s\n}", err: "duplicate settle"},
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && (!slices.Equal(h.Redis, tc.want.Redis) || h.KeyPrefix != tc.want.KeyPrefix || h.Stream != tc.want.Stream ||
			(h.Monitor == nil) != (tc.want.Monitor == nil) || h.Monitor != nil && !sameMonitor(*h.Monitor, *tc.want.Monitor)):
			t.Errorf("%q: %+v, want %+v", tc.in, h, tc.want)
		}
	}
}

func durationOf(d time.Duration) *caddy.Duration {
	c := caddy.Duration(d)
	return &c
}

func sameMonitor(a, b Monitor) bool {
	return a.Target == b.Target && a.Alpha == b.Alpha && a.ByOrg == b.ByOrg && a.settle() == b.settle() && (a.Settle == nil) == (b.Settle == nil)
}

// An unlabeled=1 page stops scanning after maxScan entries: fewer items
// than asked, and a next cursor that goes on from where it stopped.
func TestListScanBudget(t *testing.T) {
	s, client := testStore(t)
	ctx := context.Background()
	var entries []string
	for i := range 10 {
		id, err := client.XAdd(ctx, &redis.XAddArgs{Stream: s.stream, Values: []string{"request_id", strconv.Itoa(i),
			"questions", `[{"id":"q","type":"noul","route":"human","confidence":0.1,"answer":0.45}]`}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, id)
		if i < 6 {
			if err := putMap(s, mustID(t, id), map[string]string{"q": `{"label":true}`}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := &Handler{store: s, logger: zap.NewNop(), maxScan: 4, listStep: 2}
	list := func(query string) listPage {
		t.Helper()
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/items?"+query, nil), nil); err != nil || w.Code != 200 {
			t.Fatalf("%s: %d %v %s", query, w.Code, err, w.Body)
		}
		var p listPage
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got := func(p listPage) []string {
		var out []string
		for _, it := range p.Items {
			out = append(out, it.ID)
		}
		return out
	}
	// Entries 0-5 are labelled: the first page scans 0-3 and stops.
	p := list("unlabeled=1&limit=1") // batches of 2
	if len(p.Items) != 0 || p.Next != entries[3] {
		t.Fatalf("first page %v next %q, want none and next %s", got(p), p.Next, entries[3])
	}
	p = list("unlabeled=1&limit=2&after=" + p.Next)
	if !slices.Equal(got(p), entries[6:8]) || p.Next != entries[7] {
		t.Fatalf("second page %v next %q", got(p), p.Next)
	}
	p = list("unlabeled=1&limit=2&after=" + p.Next)
	if !slices.Equal(got(p), entries[8:]) || p.Next != "" {
		t.Fatalf("last page %v next %q", got(p), p.Next)
	}
	// A labelled item shows its labels; unlabelled ones have none.
	p = list("limit=10")
	if len(p.Items) != 10 || string(p.Items[0].Labels["q"]) != "true" || p.Items[9].Labels != nil {
		t.Errorf("labels on items: %+v / %+v", p.Items[0].Labels, p.Items[9].Labels)
	}
}
