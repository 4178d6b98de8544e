// Package examples_test runs the example Caddyfiles of deploy/examples
// that stand on their own, with the real binary and real redis-servers.
package examples_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/simulator"
)

// bin is the gateway binary, built once for the package's tests.
var bin string

func TestMain(m *testing.M) {
	var dir string
	var err error
	if bin, dir, err = gatewaytest.BuildBinary("../../cmd/systemone-gateway"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// upstream is the simulated evaluation service, without limits of its own.
func upstream(t *testing.T) string {
	unlimited := int64(0)
	sim, err := simulator.New(simulator.Handler{RequestsPerMinute: &unlimited, TokensPerSecond: &unlimited})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return srv.URL
}

// run serves config with the binary, env added, until the test ends, and
// returns the gateway's base URL once it answers.
func run(t *testing.T, config string, env ...string) string {
	t.Helper()
	port, admin := redistest.FreePort(t), redistest.FreePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "--config", config, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), append(env,
		fmt.Sprintf("GATEWAY_LISTEN=:%d", port), fmt.Sprintf("GATEWAY_ADMIN=localhost:%d", admin),
		"XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)...)
	logs, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/v1/models")
		if err == nil {
			resp.Body.Close()
			return url
		}
		if time.Now().After(deadline) {
			text, _ := os.ReadFile(logs.Name())
			t.Fatalf("%s does not serve: %v\n%s", config, err, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// evaluate sends one evaluation request with key and returns its status.
func evaluate(t *testing.T, url, key string, i int) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":"service-1.0.0","state":"Order %d: the parcel arrived late.","questions":{"late":{"type":"noul","instructions":"Was it late?"}}}`, i)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/systemone", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		t.Logf("%d %v %s", resp.StatusCode, resp.Header, text)
	}
	return resp.StatusCode
}

// sharedLimit sends 90 requests of one organization, alternating between
// the gateways, and checks that the fleet admits exactly the 60 a minute
// the Caddyfile allows: one limit for all of them, not one per gateway.
func sharedLimit(t *testing.T, gateways ...string) {
	t.Helper()
	ok := map[string]int{}
	limited := map[string]int{}
	for i := range 90 {
		g := gateways[i%len(gateways)]
		switch status := evaluate(t, g, "sk-fleet", i); status {
		case http.StatusOK:
			ok[g]++
		case http.StatusTooManyRequests:
			limited[g]++
		default:
			t.Fatalf("request %d to %s: status %d", i, g, status)
		}
	}
	total := 0
	for _, g := range gateways {
		total += ok[g]
		if len(gateways) > 1 && (ok[g] == 0 || limited[g] == 0) {
			t.Errorf("%s admitted %d and refused %d: want both, the limit being the fleet's", g, ok[g], limited[g])
		}
	}
	if total != 60 {
		t.Errorf("the gateways admitted %d requests of one organization in all, want the 60 a minute of the shared limit (admitted %v, refused %v)", total, ok, limited)
	}
}

// TestFleetExample: two gateways running deploy/examples/fleet/Caddyfile on
// one real Redis share an organization's limit.
func TestFleetExample(t *testing.T) {
	rs := redistest.Start(t)
	up := upstream(t)
	env := []string{"REDIS_URL=" + rs.URL(), "UPSTREAM=" + up}
	a := run(t, "fleet/Caddyfile", env...)
	b := run(t, "fleet/Caddyfile", env...)
	sharedLimit(t, a, b)
}

// TestRedisClusterExample: deploy/examples/redis-cluster/Caddyfile on a
// real three-master Redis Cluster, two gateways sharing the limit there.
func TestRedisClusterExample(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	urls := cluster.URLs()
	env := []string{"REDIS_NODE_1=" + urls[0], "REDIS_NODE_2=" + urls[1], "REDIS_NODE_3=" + urls[2], "UPSTREAM=" + upstream(t)}
	a := run(t, "redis-cluster/Caddyfile", env...)
	b := run(t, "redis-cluster/Caddyfile", env...)
	sharedLimit(t, a, b)
}
