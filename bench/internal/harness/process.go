// Package harness runs what the benchmarks measure, as separate processes
// on loopback: a redis-server, the simulated upstream and the proxies (plain
// reverse_proxy and the gateway in its configurations), built from this
// repository. It also drives HTTP load against them and reads their CPU time,
// memory and goroutines from outside.
//
// It is for programs (bench/load, bench/soak), not tests: errors are
// returned, and everything started is stopped by Stack.Stop.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child process the harness started.
type Process struct {
	Name string
	Log  string // its stdout and stderr
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess starts bin with args in dir; its output goes to
// dir/<name>.log.
func StartProcess(name, dir, bin string, args ...string) (*Process, error) {
	return startProcessEnv(name, dir, nil, bin, args...)
}

// startProcessEnv is StartProcess with env added to the environment.
func startProcessEnv(name, dir string, env []string, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C to the benchmark reaches the
	// benchmark, which then stops its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %v", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process: SIGTERM, then SIGKILL after a grace period.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Tail returns the last lines of the process's log, for error messages.
func (p *Process) Tail(lines int) string {
	data, _ := os.ReadFile(p.Log)
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// WaitListening waits until addr accepts connections, the process exits,
// or within passes.
func (p *Process) WaitListening(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited before listening on %s:\n%s", p.Name, addr, p.Tail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not listening on %s after %v:\n%s", p.Name, addr, within, p.Tail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago, and
// that it has not returned before in this process.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	// The kernel may hand a port just closed out again: two calls in a row
	// (a server's port, then its admin port) could name the same one, and
	// the wait for the server would then be met by its admin endpoint.
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no loopback port free that was not handed out before")
}

// handedOut are the ports FreePort returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// BuildGateway builds cmd/systemone-gateway of the module in the working
// directory (or above it) into dir and returns the binary's path.
func BuildGateway(ctx context.Context, dir string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(gomod)) == 0 || string(bytes.TrimSpace(gomod)) == os.DevNull {
		return "", fmt.Errorf("run from inside the repository: go env GOMOD: %v", err)
	}
	root := filepath.Dir(string(bytes.TrimSpace(gomod)))
	bin := filepath.Join(dir, "systemone-gateway")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/systemone-gateway")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/systemone-gateway: %v\n%s", err, out)
	}
	return bin, nil
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports.
const clockTick = 100

// CPUTime returns the user plus system CPU time process pid has used
// (0 for this process), with all its threads.
func CPUTime(pid int) (time.Duration, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields
	// start after the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("unreadable " + path)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 13 {
		return 0, errors.New("unreadable " + path)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unreadable %s: %v", path, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// RSS returns the resident set size of process pid in bytes.
func RSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

// SystemCPU returns the CPU time every process on the machine has used, all
// CPUs together (from /proc/stat): what the benchmark's own processes did
// not use of it is other load, which skews a run.
func SystemCPU() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, errors.New("unreadable /proc/stat")
	}
	var ticks int64
	for i, f := range fields[1:8] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unreadable /proc/stat: %v", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}
