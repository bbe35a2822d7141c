package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
)

func TestNginxConf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers string
		asRoot  bool
		o       nginxOptions
		want    []string
		notWant []string
	}{
		{"one worker, not root", "1", false, nginxOptions{},
			[]string{"worker_processes 1;", "worker_connections 8192;", "daemon off;", "pid /d/nginx.pid;", "error_log /d/error.log", "access_log off;",
				"server 127.0.0.1:9;", "keepalive 512;", "listen 127.0.0.1:8;", "proxy_http_version 1.1;",
				`proxy_set_header Connection "";`, "proxy_buffering off;", "client_body_temp_path /d/client_body;"},
			[]string{"user ", "http2"}},
		{"auto, root", "auto", true, nginxOptions{},
			[]string{"user root;\n", "worker_processes auto;"}, nil},
		{"h2c, many connections", "1", false, nginxOptions{h2c: true, conns: 20500},
			[]string{"listen 127.0.0.1:8 http2;", "worker_connections 20500;", "worker_rlimit_nofile 20500;"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nginxConf("/d", "127.0.0.1:8", "127.0.0.1:9", tc.workers, tc.asRoot, tc.o)
			for _, w := range tc.want {
				if !strings.Contains(c, w) {
					t.Errorf("config lacks %q:\n%s", w, c)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(c, w) {
					t.Errorf("config has %q:\n%s", w, c)
				}
			}
		})
	}
}

// With nginx installed, the generated config runs and proxies; without
// it, the scenario skips nginx and so does this test.
func TestStartNginx(t *testing.T) {
	if _, err := os.Stat(nginxBin); err != nil {
		t.Skip("nginx not installed")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "up "+r.URL.Path)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	ng, ok, err := startNginx(nginxBin, u.Host, "1", nginxOptions{})
	if err != nil || !ok {
		t.Fatalf("startNginx: ok %v, %v", ok, err)
	}
	defer ng.stop()
	res, err := http.Get(ng.url + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "up /x" {
		t.Errorf("got %d %q, want 200 \"up /x\"", res.StatusCode, b)
	}
}

func TestStartNginxNotInstalled(t *testing.T) {
	_, ok, err := startNginx(t.TempDir()+"/nginx", "127.0.0.1:9", "1", nginxOptions{})
	if ok || err != nil {
		t.Errorf("ok %v, err %v; want false, nil (skipped)", ok, err)
	}
}
