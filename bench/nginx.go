package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// nginxBin is Debian's nginx (apt-get install nginx).
const nginxBin = "/usr/sbin/nginx"

// nginxOptions are how a scenario runs nginx beyond its defaults: h2c,
// its listener speaks HTTP/2 cleartext (prior knowledge, as Go's h2c
// client speaks it; nginx's default of 128 streams a connection, as
// maitred's); conns, its worker's connections (0: 8192), clients' and
// upstream's together.
type nginxOptions struct {
	h2c   bool
	conns int
}

// nginxConf is the config the proxy scenario runs nginx with: one upstream
// (the simulator) with keep-alive connections, HTTP/1.1 to it, no response
// buffering (events pass as they come, as maitred and the bare proxy pass
// them), no access log, and every file it writes (pid, error log, temp
// paths) under dir. Request bodies stay in memory (client_body_buffer_size
// above the largest chat), as the Go proxies keep them. asRoot: the bench
// runs as root, and nginx would otherwise drop its worker to nobody; the
// workers run as the current user either way.
func nginxConf(dir, listen, upstream string, workers string, asRoot bool, o nginxOptions) string {
	var b strings.Builder
	if asRoot {
		b.WriteString("user root;\n")
	}
	conns := o.conns
	if conns == 0 {
		conns = 8192
	}
	h2 := ""
	if o.h2c {
		h2 = " http2"
	}
	fmt.Fprintf(&b, `worker_processes %s;
worker_rlimit_nofile %[5]d;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events {
	worker_connections %[5]d;
}
http {
	access_log off;
	client_body_temp_path %[2]s/client_body;
	proxy_temp_path %[2]s/proxy;
	fastcgi_temp_path %[2]s/fastcgi;
	uwsgi_temp_path %[2]s/uwsgi;
	scgi_temp_path %[2]s/scgi;
	client_body_buffer_size 1m;
	client_max_body_size 8m;
	keepalive_requests 1000000;
	keepalive_timeout 75s;
	upstream sim {
		server %[3]s;
		keepalive 512;
		keepalive_requests 1000000;
	}
	server {
		listen %[4]s%[6]s;
		location / {
			proxy_pass http://sim;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
			proxy_request_buffering off;
		}
	}
}
`, workers, dir, upstream, listen, conns, h2)
	return b.String()
}

// nginxProc is a running nginx: where it serves, its master's pid, and
// how to stop it.
type nginxProc struct {
	url  string
	pid  int
	stop func()
}

// startNginx runs nginx (bin) in front of upstream (host:port) with
// workers worker processes and options o, on a free loopback port, until
// its stop. ok is false, with no error, when bin is not installed.
func startNginx(bin, upstream, workers string, o nginxOptions) (n nginxProc, ok bool, err error) {
	if _, err := os.Stat(bin); err != nil {
		return nginxProc{}, false, nil
	}
	dir, err := os.MkdirTemp("", "bench-nginx")
	if err != nil {
		return nginxProc{}, false, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nginxProc{}, false, err
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(dir, addr, upstream, workers, os.Geteuid() == 0, o)), 0o644); err != nil {
		os.RemoveAll(dir)
		return nginxProc{}, false, err
	}
	// -e: the error log before the config is read (the compiled-in
	// /var/log/nginx/error.log is not writable when not root).
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that stop reaches the workers too.
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nginxProc{}, false, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	n.pid = cmd.Process.Pid
	n.stop = func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		os.RemoveAll(dir)
	}
	n.url = "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			os.RemoveAll(dir)
			return nginxProc{}, false, fmt.Errorf("nginx exited before it was ready (%v): %s%s", err, out.String(), log)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return n, true, nil
		}
		if time.Now().After(deadline) {
			n.stop()
			return nginxProc{}, false, fmt.Errorf("nginx not listening on %s after 10s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nginxVersion is nginx -v's answer ("nginx/1.22.1"), or "nginx".
func nginxVersion() string {
	out, err := exec.Command(nginxBin, "-v").CombinedOutput()
	if err != nil {
		return "nginx"
	}
	v := strings.TrimSpace(string(out))
	if _, after, ok := strings.Cut(v, "version: "); ok {
		return after
	}
	return v
}

// nginxWorkersWhy says why the run uses this many workers.
func nginxWorkersWhy(workers string) string {
	if workers == "1" {
		return "one worker, one event loop on one core, as each Go proxy here serves from one process; " +
			"on 2 shared cores a second worker only contends with the client and simulator in this process"
	}
	return "set by -nginx-workers"
}
