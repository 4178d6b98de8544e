// Package redistest starts real redis-server processes for tests: each on a
// free loopback port of its own, in a temporary directory, stopped when the
// test ends. It never touches the shared default port 6379.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	t    testing.TB
	Addr string // host:port on loopback
	Port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// URL returns the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Start starts a redis-server on a free loopback port and stops it when the
// test ends. extra are additional `--name value` arguments. A machine without
// redis-server fails the test: Redis tests must run, never skip, in CI.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH (install the Debian package redis-server): %v", err)
	}
	port := FreePort(t)
	s := &Server{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir()}
	s.args = append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
	}, extra...)
	s.start(bin)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(bin string) {
	s.t.Helper()
	cmd := exec.Command(bin, s.args...)
	cmd.Dir = s.dir
	logFile, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", time.Now().UnixNano())))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.cmd = cmd
	go func() { _ = cmd.Wait(); _ = logFile.Close() }()
	if err := waitReady(s.Addr, 10*time.Second); err != nil {
		s.Stop()
		log, _ := os.ReadFile(logFile.Name())
		s.t.Fatalf("redis-server on %s did not come up: %v\n%s", s.Addr, err, log)
	}
}

// Stop stops the server; it can be started again with Restart.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	// Wait until the port no longer accepts, so a restart can bind it again.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond)
		if err != nil {
			break
		}
		_ = c.Close()
		time.Sleep(5 * time.Millisecond)
	}
	s.cmd = nil
}

// Restart starts the server again on the same port (with empty data).
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	bin, _ := exec.LookPath("redis-server")
	s.start(bin)
}

// Do sends one command over a fresh connection and returns the raw first
// reply line (enough for PING, SCRIPT FLUSH, FLUSHALL, CONFIG SET).
func (s *Server) Do(args ...string) (string, error) {
	return Do(s.Addr, args...)
}

// Do sends one command to addr and returns the first line of the reply.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func waitReady(addr string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		reply, err := Do(addr, "PING")
		if err == nil && reply == "+PONG" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v (last: %q, %v)", ctx.Err(), reply, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Cluster is a Redis Cluster of n masters on loopback, no replicas.
type Cluster struct {
	Nodes []*Server
}

// URLs returns the redis:// URLs of every node.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return urls
}

// StartCluster starts n cluster-enabled redis-servers and joins them with
// `redis-cli --cluster create`. The node timeout is 2s; extra are more
// `--name value` arguments for every node, which override the defaults
// (e.g. "--cluster-node-timeout", "1000").
func StartCluster(t testing.TB, n int, extra ...string) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found on PATH: %v", err)
	}
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for i := 0; i < n; i++ {
		s := Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}, extra...)...)
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Every node must see the whole cluster before tests use it: right
	// after the create, a node may still answer CLUSTERDOWN.
	deadline := time.Now().Add(10 * time.Second)
	for _, node := range c.Nodes {
		for {
			reply, _ := exec.Command(cli, "-h", "127.0.0.1", "-p", strconv.Itoa(node.Port), "cluster", "info").Output()
			if strings.Contains(string(reply), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s did not reach cluster state ok:\n%s", node.Addr, reply)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}
