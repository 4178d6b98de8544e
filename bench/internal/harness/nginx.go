package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// NginxPath returns the path of the nginx binary on PATH (Debian's
// nginx-light is enough), or "" when there is none: the benchmarks then
// skip Nginx and NginxLimits.
func NginxPath() string {
	path, err := exec.LookPath("nginx")
	if err != nil {
		// Debian installs it under /usr/sbin, which a user's PATH may lack.
		if _, statErr := os.Stat("/usr/sbin/nginx"); statErr == nil {
			return "/usr/sbin/nginx"
		}
		return ""
	}
	return path
}

// nginxConf is nginx's configuration for Nginx and NginxLimits: one
// process in the foreground (no master, no workers: its CPU time is read
// by PID, as the other proxies'), everything it writes under prefix.
//
// Both servers forward to the same upstream as the Caddy proxies over
// kept-alive HTTP/1.1 connections, as reverse_proxy does, and hold request
// bodies in memory up to 1 MiB (the largest payload is 270 KiB), where
// nginx's default would spill them to a temporary file. Neither closes a
// client's or upstream's connection after a number of requests (nginx's
// default is 1,000; Caddy has no such limit).
//
// Nginx writes no access log, as P writes nothing per request. NginxLimits
// writes one JSON line per request through a 256 KiB buffer flushed every
// second, as the gateway writes its request log through the buffered
// writer; and its limit_req (keyed on the Authorization header, as the
// gateway's buckets are per key) allows a million requests a second per
// key with a burst of 100,000 served at once, far above the load, so that
// every request is counted and none refused.
func nginxConf(prefix, upstream string, ports map[string]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log stderr warn;

events {
	worker_connections 4096;
}

http {
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path       %[1]s/proxy;
	fastcgi_temp_path     %[1]s/fastcgi;
	uwsgi_temp_path       %[1]s/uwsgi;
	scgi_temp_path        %[1]s/scgi;
	client_body_buffer_size 1m;
	client_max_body_size    8m;
	keepalive_requests      1000000000;
	access_log off;

	log_format request escape=json '{"ts":"$time_iso8601","request_id":"$request_id","method":"$request_method",'
		'"uri":"$request_uri","status":$status,"bytes":$body_bytes_sent,"duration_s":$request_time,'
		'"upstream_s":"$upstream_response_time"}';
	limit_req_zone $http_authorization zone=per_key:10m rate=1000000r/s;

	upstream bench_upstream {
		server %[2]s;
		keepalive 64;
		keepalive_requests 1000000000;
	}
`, prefix, upstream)
	for _, c := range []string{Nginx, NginxLimits} {
		port, ok := ports[c]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n\t# %s\n\tserver {\n\t\tlisten 127.0.0.1:%d;\n", c, port)
		if c == NginxLimits {
			fmt.Fprintf(&b, "\t\taccess_log %s/access.log request buffer=256k flush=1s;\n", prefix)
		}
		b.WriteString("\t\tlocation / {\n")
		if c == NginxLimits {
			b.WriteString("\t\t\tlimit_req zone=per_key burst=100000 nodelay;\n")
		}
		b.WriteString("\t\t\tproxy_pass http://bench_upstream;\n\t\t\tproxy_http_version 1.1;\n\t\t\tproxy_set_header Connection \"\";\n\t\t}\n\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// startNginx starts nginx for the configurations of Options.Configs it
// serves, in front of the upstream in use, if there are any.
func (s *Stack) startNginx() error {
	ports := make(map[string]int)
	var addrs []string
	for _, c := range s.configsOf(proxyNginx) {
		ports[c] = s.sites[c]
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(s.sites[c]))
	}
	if len(ports) == 0 {
		return nil
	}
	bin := NginxPath()
	if bin == "" {
		return fmt.Errorf("nginx not found (install Debian's nginx-light), or leave %s and %s out", Nginx, NginxLimits)
	}
	prefix := filepath.Join(s.Dir, "nginx")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return err
	}
	up := strings.TrimPrefix(s.SimulatorURL, "http://")
	if s.Upstream == UpstreamStub {
		up = strings.TrimPrefix(s.StubURL, "http://")
	}
	s.NginxConf = nginxConf(prefix, up, ports)
	conf, err := writeFile(prefix, "nginx.conf", s.NginxConf)
	if err != nil {
		return err
	}
	p, err := StartProcess("nginx", s.Dir, bin, "-p", prefix+"/", "-c", conf, "-e", "stderr")
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		if err := p.WaitListening(addr, 30*time.Second); err != nil {
			p.Stop()
			return err
		}
	}
	s.Nginx = p
	return nil
}
