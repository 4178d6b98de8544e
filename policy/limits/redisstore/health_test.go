package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// serverError is a Redis error reply, for a reply no test server can be
// brought to give on demand.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// pipelineErr sends one settlement script to client in a pipeline, as a
// flush does, and returns its error; the script must fail.
func pipelineErr(t *testing.T, client *redis.Client, keys ...string) error {
	t.Helper()
	res, err := settleIn(client, 300*time.Millisecond, keys...)
	if err == nil {
		t.Fatalf("keys %v: the script ran (%v), want an error", keys, res)
	}
	return err
}

// settleIn sends one settlement script to client in a pipeline bounded by
// timeout, as a flush does, and returns its answer: keys are the bucket's
// and budget periods', the settlement's id is new.
func settleIn(client *redis.Client, timeout time.Duration, keys ...string) (any, error) {
	s := New(client, "t:", Options{Timeout: timeout})
	defer s.Close()
	args := []any{"", defReq.Capacity, defReq.Rate, defTok.Capacity, defTok.Rate, int64(5) * store.Unit, 0}
	for range keys[1:] {
		args = append(args, 1000, 0, 0, time.Now().Add(time.Hour).UnixMicro())
	}
	id := strings.TrimSuffix(keys[0], ":b") + ":s:" + settleID()
	keys = append([]string{keys[0], id}, keys[1:]...)
	c := &scriptCall{node: client, kind: kindSettle, keys: keys, args: args}
	s.pipeline(client, []*scriptCall{c})
	return c.res, c.err
}

func nodeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c, err := redispool.NewClient([]string{"redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*redis.Client)
}

// proxied starts a Redis behind a fault proxy and returns a client
// connected to it through the proxy.
func proxied(t *testing.T) (*redistest.Server, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	c := nodeClient(t, proxy.Addr())
	if err := c.Ping(bg).Err(); err != nil {
		t.Fatal(err)
	}
	return srv, proxy, c
}

// do runs a command on addr and fails the test unless it answers want.
func do(t *testing.T, addr, want string, args ...string) {
	t.Helper()
	if reply, err := redistest.Do(addr, args...); err != nil || !strings.HasPrefix(reply, want) {
		t.Fatalf("%v on %s: %q %v, want %s", args, addr, reply, err, want)
	}
}

// TestRefusedScriptIsNotSentAgain: the replies with which Redis refuses a
// script before it writes, taken from real servers, say the script did
// not run (it is queued again), as do a refused connection and a closed
// client; a timeout after the write and a script error do not (it may
// have run). Of those, a timeout and a connection broken mid-reply say
// its answer was lost (a settlement is sent again with its id); a script
// error is an answer. Each outage reply also counts towards the node's
// loss.
func TestRefusedScriptIsNotSentAgain(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cc, err := redispool.NewClient(cluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	const key = "t:{migrating}:b"
	owner, err := cc.(*redis.ClusterClient).MasterForKey(bg, key)
	if err != nil {
		t.Fatal(err)
	}
	var other *redis.Client
	for _, n := range cluster.Nodes {
		if n.Addr != owner.Options().Addr {
			other = nodeClient(t, n.Addr)
			break
		}
	}
	otherID, err := other.ClusterMyID(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot, err := cc.(*redis.ClusterClient).ClusterKeySlot(bg, key).Result()
	if err != nil {
		t.Fatal(err)
	}

	type want struct {
		notSent, answerLost bool
		class               string
	}
	cases := map[string]struct {
		err  func(t *testing.T) error
		want want
	}{
		"MOVED": {func(t *testing.T) error { return pipelineErr(t, other, key) }, want{true, false, "moved"}},
		"ASK": {func(t *testing.T) error {
			do(t, owner.Options().Addr, "+OK", "CLUSTER", "SETSLOT", strconv.FormatInt(slot, 10), "MIGRATING", otherID)
			defer do(t, owner.Options().Addr, "+OK", "CLUSTER", "SETSLOT", strconv.FormatInt(slot, 10), "STABLE")
			return pipelineErr(t, owner, key)
		}, want{true, false, "moved"}},
		"TRYAGAIN": {func(t *testing.T) error {
			if err := owner.Set(bg, "t:{migrating}:budget:2026-11", "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			do(t, owner.Options().Addr, "+OK", "CLUSTER", "SETSLOT", strconv.FormatInt(slot, 10), "MIGRATING", otherID)
			defer do(t, owner.Options().Addr, "+OK", "CLUSTER", "SETSLOT", strconv.FormatInt(slot, 10), "STABLE")
			return pipelineErr(t, owner, key, "t:{migrating}:budget:2026-11")
		}, want{true, false, "unavailable"}},
		"CLUSTERDOWN": {func(t *testing.T) error {
			// A cluster node that serves no slot answers PING, and
			// CLUSTERDOWN to every keyed command.
			lone := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
			return pipelineErr(t, nodeClient(t, lone.Addr), key)
		}, want{true, false, "unavailable"}},
		"MASTERDOWN": {func(t *testing.T) error {
			replica := redistest.Start(t)
			do(t, replica.Addr, "+OK", "CONFIG", "SET", "replica-serve-stale-data", "no")
			do(t, replica.Addr, "+OK", "REPLICAOF", "127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
			return pipelineErr(t, nodeClient(t, replica.Addr), "t:{acme}:b")
		}, want{true, false, "unavailable"}},
		"READONLY": {func(t *testing.T) error {
			replica := redistest.Start(t)
			do(t, replica.Addr, "+OK", "REPLICAOF", "127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
			return pipelineErr(t, nodeClient(t, replica.Addr), "t:{acme}:b")
		}, want{true, false, "unavailable"}},
		"OOM": {func(t *testing.T) error {
			full := redistest.Start(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
			return pipelineErr(t, nodeClient(t, full.Addr), "t:{acme}:b")
		}, want{true, false, "unavailable"}},
		"LOADING": {func(*testing.T) error {
			return fmt.Errorf("pipeline: %w", serverError("LOADING Redis is loading the dataset in memory"))
		}, want{true, false, "unavailable"}},
		"connection refused": {func(t *testing.T) error {
			stopped := redistest.Start(t)
			stopped.Stop()
			return pipelineErr(t, nodeClient(t, stopped.Addr), "t:{acme}:b")
		}, want{true, false, "connection_refused"}},
		"client closed": {func(t *testing.T) error {
			srv := redistest.Start(t)
			c := nodeClient(t, srv.Addr)
			_ = c.Close()
			return pipelineErr(t, c, "t:{acme}:b")
		}, want{true, false, "client_closed"}},
		"timeout after the write": {func(t *testing.T) error {
			_, proxy, c := proxied(t)
			proxy.BlackHole()
			return pipelineErr(t, c, "t:{acme}:b")
		}, want{false, true, "timeout"}},
		"connection reset mid-reply": {func(t *testing.T) error {
			srv, proxy, c := proxied(t)
			// The script runs; its answer is held up, and the connection
			// reset once Redis has run it.
			if err := batchScript.Load(bg, c).Err(); err != nil {
				t.Fatal(err)
			}
			proxy.Latency(0, time.Minute)
			got := make(chan error, 1)
			go func() {
				_, err := settleIn(c, time.Minute, "t:{acme}:b")
				got <- err
			}()
			wait.Until(t, "the script run", func() bool { reply, _ := srv.Do("EXISTS", "t:{acme}:b"); return reply == ":1" })
			proxy.Reset()
			return <-got
		}, want{false, true, "connection_closed"}},
		"WRONGTYPE": {func(t *testing.T) error {
			srv := redistest.Start(t)
			c := nodeClient(t, srv.Addr)
			if err := c.Set(bg, "t:{acme}:b", "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			return pipelineErr(t, c, "t:{acme}:b")
		}, want{false, false, "script"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.err(t)
			if !strings.Contains(err.Error(), strings.Fields(name)[0]) && strings.ToUpper(name) == name {
				t.Fatalf("got %v, want a %s reply", err, name)
			}
			class, _ := classify(err)
			if got := (want{notSent(err), answerLost(err), class}); got != tc.want {
				t.Errorf("%v: got %+v, want %+v", err, got, tc.want)
			}
		})
	}
}

// clusterStore is a Store on a cluster client of the test's own.
func clusterStore(t *testing.T, c *redistest.Cluster, o Options) (*testStore, *redis.ClusterClient) {
	t.Helper()
	client, err := redispool.NewClient(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	o.Logger = zap.New(core)
	if o.Timeout == 0 {
		o.Timeout = 300 * time.Millisecond
	}
	s := New(client, "t:", o)
	t.Cleanup(func() {
		_ = s.Close()
		_ = client.Close()
	})
	return &testStore{s, client, logs, "t:"}, client.(*redis.ClusterClient)
}

// orgOn returns an organization whose keys the master at addr serves.
func orgOn(t *testing.T, s *Store, cc *redis.ClusterClient, addr string) string {
	t.Helper()
	for i := range 1000 {
		org := "org" + strconv.Itoa(i)
		key := s.bucketKey(org)
		node, err := cc.MasterForKey(bg, key)
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == addr {
			return org
		}
	}
	t.Fatalf("no organization on %s", addr)
	return ""
}

// answersWith waits until addr answers a keyed script with a reply that
// starts with prefix.
func answersWith(t *testing.T, addr, key, prefix string) {
	t.Helper()
	wait.Until(t, addr+" answering "+prefix, func() bool {
		reply, _ := redistest.Do(addr, "EVAL", "return redis.call('EXISTS', KEYS[1])", "1", key)
		return strings.HasPrefix(reply, prefix)
	})
}

// TestClusterDownSettlementWaitsForRedis: with one master of three killed
// past the node timeout, every node answers CLUSTERDOWN; a budget charge
// settled meanwhile, for an organization whose master stayed up and for
// one whose master is down, stays queued (nothing counted lost) and is in
// Redis once the cluster is back. The store logs `redis lost` once and
// `redis back` once. The dead master keeps its data (append-only file):
// what it held before is still there after its restart.
func TestClusterDownSettlementWaitsForRedis(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, "--cluster-node-timeout", "1000", "--appendonly", "yes", "--appendfsync", "always")
	s, cc := clusterStore(t, cluster, Options{ProbeMin: 20 * time.Millisecond, ProbeMax: 200 * time.Millisecond})
	up, dead := cluster.Nodes[0], cluster.Nodes[2]
	orgUp, orgDead := orgOn(t, s.Store, cc, up.Addr), orgOn(t, s.Store, cc, dead.Addr)
	end := time.Now().Add(24 * time.Hour).UnixMicro()
	// A charge alone is queued; one that also releases a reservation is
	// sent at once (settleNow), and queued when Redis refuses it.
	charge := func(org string, n, release int64) {
		s.Settle(org, store.Settlement{Req: defReq, Tok: defTok, Spend: &store.SpendSettle{Period: "p", End: end, Charge: n, Release: release}}, time.Time{})
	}
	charge(orgUp, 1, 0)
	charge(orgDead, 1, 0)
	s.drain(t)

	dead.Stop()
	keyUp := s.bucketKey(orgUp)
	answersWith(t, up.Addr, keyUp, "-CLUSTERDOWN")
	charge(orgUp, 10, 1)
	if st := s.Stats(); st.SettlementsUnanswered != 0 || st.Pending == 0 {
		t.Fatalf("%+v: want the refused settlement queued, none lost", st)
	}
	charge(orgDead, 10, 0)
	wait.Until(t, "Redis counted lost", func() bool { return !s.Up() })
	if st := s.Stats(); st.SettlementsUnanswered != 0 || st.Pending == 0 {
		t.Fatalf("%+v: want the charges queued, none lost", st)
	}
	charge(orgUp, 100, 0)
	charge(orgDead, 100, 1)

	dead.Restart()
	wait.Until(t, "Redis back", s.Up)
	s.drain(t)
	for _, org := range []string{orgUp, orgDead} {
		got := redistest.HashInts(t, cc, s.budgetKey(org, "p"), "s")[0]
		if got == nil || *got != 111 {
			t.Errorf("%s: spent %v in Redis, want 111", org, got)
		}
	}
	if st := s.Stats(); st.SettlementsUnanswered != 0 || st.SettlementsDropped != 0 {
		t.Errorf("%+v: want nothing lost or dropped", st)
	}
	if lost, back := s.logs.FilterMessage("redis lost").Len(), s.logs.FilterMessage("redis back").Len(); lost != 1 || back != 1 {
		t.Errorf("%d `redis lost` and %d `redis back` entries, want one each", lost, back)
	}
}

// TestClusterHealthPerNode: on a cluster that serves what it can
// (cluster-require-full-coverage no), a dead master fails only the
// organizations it serves: one on a master that answers is admitted by
// Redis throughout, while the dead master's organization fails at once
// (no store_timeout to pay) once its node counts as lost, until the
// node's keyed probe sees it serve again.
func TestClusterHealthPerNode(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")
	s, cc := clusterStore(t, cluster, Options{ProbeMin: 20 * time.Millisecond, ProbeMax: 200 * time.Millisecond})
	up, dead := cluster.Nodes[0], cluster.Nodes[2]
	orgUp, orgDead := orgOn(t, s.Store, cc, up.Addr), orgOn(t, s.Store, cc, dead.Addr)
	c := admission(defReq, defTok, 1)
	mustAdmit(t, s, orgUp, c)
	mustAdmit(t, s, orgDead, c)

	dead.Stop()
	admitted := 0
	wait.Until(t, "the dead master counted lost", func() bool {
		mustAdmit(t, s, orgUp, c)
		admitted++
		_, err := s.Admit(bg, orgDead, c, 0, time.Time{})
		return errors.Is(err, errLost)
	})
	if s.Up() {
		t.Fatal("Up with a node lost")
	}
	// Exact for the org whose master answers, lost at once for the other.
	for range 20 {
		mustAdmit(t, s, orgUp, c)
		if _, err := s.Admit(bg, orgDead, c, 0, time.Time{}); !errors.Is(err, errLost) {
			t.Fatalf("the lost node's org: %v, want errLost at once", err)
		}
	}
	dead.Restart()
	wait.Until(t, "the master back", s.Up)
	mustAdmit(t, s, orgDead, c)
	if lost, back := s.logs.FilterMessage("redis lost").Len(), s.logs.FilterMessage("redis back").Len(); lost != 1 || back != 1 {
		t.Errorf("%d `redis lost` and %d `redis back` entries, want one each", lost, back)
	}
	t.Logf("%d admissions of the healthy master's org while the other was being lost", admitted)
}

// TestProbeIsKeyed: a node that answers PING but refuses keyed commands
// (a cluster node that serves no slot yet, as a restarted master does
// while the cluster rejoins it) stays lost, whatever the probe's
// attempts, until it serves the store's keys: one `redis lost`, one
// `redis back`.
func TestProbeIsKeyed(t *testing.T) {
	lone := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	s := newStore(t, lone.URL(), Options{Timeout: 300 * time.Millisecond, ProbeMin: time.Millisecond, ProbeMax: 5 * time.Millisecond})
	hook := &redistest.CountHook{}
	s.client.AddHook(hook)
	c := admission(defReq, defTok, 1)
	for range lostAfter {
		if _, err := s.Admit(bg, "acme", c, 0, time.Time{}); err == nil {
			t.Fatal("admitted by a node that serves no slot")
		}
	}
	if s.Up() {
		t.Fatal("not lost after three CLUSTERDOWN replies")
	}
	if err := s.client.Ping(bg).Err(); err != nil {
		t.Fatalf("PING: %v; the test wants a node that answers it", err)
	}
	from := hook.Scripts.Load()
	wait.Until(t, "five probes", func() bool { return hook.Scripts.Load() >= from+5 || s.Up() })
	if s.Up() {
		t.Fatal("counted back while keyed commands still get CLUSTERDOWN")
	}
	do(t, lone.Addr, "+OK", "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	wait.Until(t, "Redis back", s.Up)
	mustAdmit(t, s, "acme", c)
	if lost, back := s.logs.FilterMessage("redis lost").Len(), s.logs.FilterMessage("redis back").Len(); lost != 1 || back != 1 {
		t.Errorf("%d `redis lost` and %d `redis back` entries, want one each", lost, back)
	}
}

// IsProbe tells the probe's script from the store's own, as a counting
// hook sees them (EVALSHA first, EVAL after a NOSCRIPT).
func TestIsProbe(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	hook := &redistest.CountHook{Except: IsProbe}
	c.AddHook(hook)
	ctx := context.Background()
	for range 2 { // the first runs EVALSHA, gets NOSCRIPT, then EVAL
		if err := probeScript.Run(ctx, c, []string{"k"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := hook.Scripts.Load(); n != 0 {
		t.Fatalf("%d probe scripts counted", n)
	}
	if err := redis.NewScript(`return 1`).Run(ctx, c, []string{"k"}).Err(); err != nil {
		t.Fatal(err)
	}
	if n := hook.Scripts.Load(); n == 0 {
		t.Fatal("another script was not counted")
	}
}

// TestClusterBatchHoldsOneSlot: on a Redis Cluster, the admissions of
// many organizations that wait for one master go in one pipeline, as one
// script call per slot (a cluster refuses a script whose keys span
// slots), each answered: the slot is the one the cluster itself gives
// (CLUSTER KEYSLOT).
func TestClusterBatchHoldsOneSlot(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	pinned := time.Now() // no refill: each answer exact
	s, cc := clusterStore(t, cluster, Options{Clock: func() time.Time { return pinned }})
	node := cluster.Nodes[0]
	var orgs []string
	slots := map[uint16]bool{}
	for i := 0; len(orgs) < 40; i++ {
		org := "org" + strconv.Itoa(i)
		key := s.bucketKey(org)
		if m, err := cc.MasterForKey(bg, key); err != nil || m.Options().Addr != node.Addr {
			continue
		}
		want, err := cc.ClusterKeySlot(bg, key).Result()
		if err != nil || int64(keySlot(key)) != want {
			t.Fatalf("%s: keySlot %d, the cluster says %d (%v)", key, keySlot(key), want, err)
		}
		orgs = append(orgs, org)
		slots[keySlot(key)] = true
	}
	// Two admissions of one organization share its slot's call.
	orgs = append(orgs, orgs[0])
	c := admission(defReq, defTok, 1)
	mustAdmit(t, s, orgs[1], c) // loads the script on the node
	key1 := s.bucketKey(orgs[1])
	nodeClient, err := cc.MasterForKey(bg, key1)
	if err != nil {
		t.Fatal(err)
	}
	b := s.batcher(nodeClient)
	b.mu.Lock()
	b.inflight = maxInflight
	b.mu.Unlock()
	hook := &redistest.CountHook{}
	nodeClient.AddHook(hook)

	got, errs := admitTogether(s, b, orgs, c)
	if sent, scripts := hook.Sent.Load(), hook.Scripts.Load(); sent != 1 || scripts != int64(len(slots)) {
		t.Fatalf("%d pipelines with %d script calls for %d organizations in %d slots, want 1 with %d", sent, scripts, len(orgs), len(slots), len(slots))
	}
	wantReq := defReq.Capacity - store.Unit
	for i, o := range got {
		if errs[i] != nil || !o.Allowed {
			t.Fatalf("%s: %+v %v, want admitted", orgs[i], o, errs[i])
		}
		if i == 0 || i == len(orgs)-1 {
			continue // orgs[0]'s two admissions: one of them sees the other's debit
		}
		want := wantReq
		if i == 1 {
			want -= store.Unit // admitted once before, to load the script
		}
		if o.Req != want {
			t.Fatalf("%s: %d requests left, want %d", orgs[i], o.Req/store.Unit, want/store.Unit)
		}
	}
	if a, z := got[0].Req, got[len(got)-1].Req; min(a, z) != wantReq-store.Unit || max(a, z) != wantReq {
		t.Fatalf("one organization's two admissions left %d and %d, want %d and %d", a/store.Unit, z/store.Unit, wantReq/store.Unit-1, wantReq/store.Unit)
	}
}
