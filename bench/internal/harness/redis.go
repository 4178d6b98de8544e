package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server on a free loopback port, without persistence.
type Redis struct {
	*Process
	Addr   string
	Client *redis.Client
}

// StartRedis starts redis-server in dir.
func StartRedis(dir string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (install the Debian package redis-server): %v", err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := StartProcess("redis", dir, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err != nil {
		return nil, err
	}
	if err := p.WaitListening(addr, 10*time.Second); err != nil {
		p.Stop()
		return nil, err
	}
	return &Redis{Process: p, Addr: addr, Client: redis.NewClient(&redis.Options{Addr: addr})}, nil
}

// URL is the server's redis:// URL.
func (r *Redis) URL() string { return "redis://" + r.Addr }

// Stop closes the client and stops the server.
func (r *Redis) Stop() {
	_ = r.Client.Close()
	r.Process.Stop()
}

// CommandCalls returns how many times each command has run since the
// server started (INFO commandstats), by lower-case name.
func (r *Redis) CommandCalls(ctx context.Context) (map[string]int64, error) {
	info, err := r.Client.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	calls := make(map[string]int64)
	for line := range strings.SplitSeq(info, "\n") {
		// cmdstat_evalsha:calls=12,usec=345,...
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("INFO commandstats: %q: %v", line, err)
				}
				calls[name] = n
			}
		}
	}
	return calls, nil
}

// CallsDelta returns after minus before, dropping commands that did not run
// and the INFO calls that read the counters.
func CallsDelta(before, after map[string]int64) map[string]int64 {
	d := make(map[string]int64)
	for name, n := range after {
		if n -= before[name]; n > 0 && name != "info" {
			d[name] = n
		}
	}
	return d
}

// Monitor streams every command the server runs (MONITOR) until ctx ends,
// sending each as its arguments, unquoted.
func (r *Redis) Monitor(ctx context.Context) (<-chan []string, error) {
	conn, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	rd := bufio.NewReader(conn)
	if line, err := rd.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+OK" {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	out := make(chan []string, 1024)
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	go func() {
		defer close(out)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			// +1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "ab12" "2" ...
			// Commands a script runs show as [0 lua]: not round trips.
			source, args, ok := strings.Cut(strings.TrimSpace(line), "] ")
			if !ok || strings.HasSuffix(source, " lua") {
				continue
			}
			out <- monitorArgs(args)
		}
	}()
	return out, nil
}

// monitorArgs splits MONITOR's quoted arguments; escapes inside them are
// kept as written (only the command name and counts are read).
func monitorArgs(s string) []string {
	var args []string
	for {
		start := strings.IndexByte(s, '"')
		if start < 0 {
			return args
		}
		i := start + 1
		for i < len(s) && s[i] != '"' {
			if s[i] == '\\' {
				i++
			}
			i++
		}
		args = append(args, s[start+1:min(i, len(s))])
		if i >= len(s) {
			return args
		}
		s = s[i+1:]
	}
}

// ReadsProcessed returns how many reads the server has done from its
// clients' sockets since it started (INFO stats total_reads_processed): a
// command alone or a whole pipeline that arrives at once is one read, so
// this counts round trips where INFO commandstats counts commands.
func (r *Redis) ReadsProcessed(ctx context.Context) (int64, error) {
	info, err := r.Client.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO stats has no total_reads_processed (Redis 6 or later)")
}
