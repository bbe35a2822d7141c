package config

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestKubernetesManifest checks that deploy/kubernetes.yaml's config is a
// valid maitred config and that the pod's grace period covers the drain:
// drain_delay + drain_timeout must end before the kubelet's SIGKILL, and the
// readiness probe must notice the drain within drain_delay.
func TestKubernetesManifest(t *testing.T) {
	t.Setenv("VLLM_KEY", "x")
	data, err := os.ReadFile("../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg *Config
	var grace, period, failures, containerPort int
	var configArg string
	var mounts []string
	headless := map[string]int{} // headless Services: name -> port
	probes := map[string]string{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch doc["kind"] {
		case "ConfigMap":
			text := doc["data"].(map[string]any)["maitred.yaml"].(string)
			c, err := Parse([]byte(text))
			if err != nil {
				t.Fatalf("ConfigMap maitred.yaml: %v", err)
			}
			cfg = &c
		case "Service":
			spec := doc["spec"].(map[string]any)
			if spec["clusterIP"] == "None" {
				headless[doc["metadata"].(map[string]any)["name"].(string)] = spec["ports"].([]any)[0].(map[string]any)["port"].(int)
			}
		case "Deployment":
			spec := doc["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			grace = spec["terminationGracePeriodSeconds"].(int)
			ctr := spec["containers"].([]any)[0].(map[string]any)
			containerPort = ctr["ports"].([]any)[0].(map[string]any)["containerPort"].(int)
			args := ctr["args"].([]any)
			for i, a := range args {
				if a == "--config" && i+1 < len(args) {
					configArg = args[i+1].(string)
				}
			}
			for _, m := range ctr["volumeMounts"].([]any) {
				mounts = append(mounts, m.(map[string]any)["mountPath"].(string))
			}
			for _, p := range []string{"readinessProbe", "livenessProbe"} {
				probe := ctr[p].(map[string]any)
				probes[p] = probe["httpGet"].(map[string]any)["path"].(string)
				if p == "readinessProbe" {
					period, failures = probe["periodSeconds"].(int), probe["failureThreshold"].(int)
				}
			}
		}
	}
	if cfg == nil || grace == 0 {
		t.Fatal("manifest lacks the ConfigMap or the Deployment")
	}
	// The pod must be reachable on the port it declares.
	if host, port, _ := net.SplitHostPort(cfg.Listen); (host != "0.0.0.0" && host != "" && host != "::") || port != strconv.Itoa(containerPort) {
		t.Errorf("listen %q is not reachable as containerPort %d", cfg.Listen, containerPort)
	}
	if mountDir := path.Dir(configArg); !slices.Contains(mounts, mountDir) {
		t.Errorf("--config %s is not under a mounted volume %v", configArg, mounts)
	}
	// vLLM is reached through a headless Service, by DNS: every backend
	// entry names one of the manifest's headless Services at its port.
	for i, m := range cfg.Models {
		for j, b := range m.Backends {
			host, port, err := net.SplitHostPort(b.DNS)
			if b.DNS == "" || err != nil || strconv.Itoa(headless[host]) != port {
				t.Errorf("models[%d].backends[%d] is not dns: SERVICE:PORT of a headless Service in the manifest (%+v, services %v)", i, j, b, headless)
			}
		}
	}
	if probes["readinessProbe"] != "/readyz" || probes["livenessProbe"] != "/livez" {
		t.Errorf("probes = %v", probes)
	}
	drain := cfg.DrainDelay.D() + cfg.DrainTimeout.D()
	if time.Duration(grace)*time.Second <= drain {
		t.Errorf("terminationGracePeriodSeconds %d does not cover drain_delay + drain_timeout = %s", grace, drain)
	}
	if noticed := time.Duration(period*failures) * time.Second; noticed > cfg.DrainDelay.D() {
		t.Errorf("the readiness probe notices the drain after %s, later than drain_delay %s", noticed, cfg.DrainDelay.D())
	}
}

// TestDockerfile checks what can be checked of the image without a
// container engine: the builder's Go is the module's, the build is static
// and of cmd/maitred, and the default command reads its config where the
// Kubernetes manifest mounts it, on the port it exposes.
func TestDockerfile(t *testing.T) {
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if goVersion == nil || !strings.Contains(string(df), "FROM golang:"+string(goVersion[1])+" ") {
		t.Errorf("the builder image is not golang:%s (go.mod)", goVersion[1])
	}
	for _, want := range []string{"CGO_ENABLED=0 go build", "./cmd/maitred", "USER 65532:65532", "EXPOSE 8080",
		`CMD ["serve", "--config", "/etc/maitred/maitred.yaml"]`} {
		if !strings.Contains(string(df), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	k8s, err := os.ReadFile("../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`args: ["serve", "--config", "/etc/maitred/maitred.yaml"]`, "containerPort: 8080", "mountPath: /etc/maitred,"} {
		if !strings.Contains(string(k8s), want) {
			t.Errorf("deploy/kubernetes.yaml lacks %q, which the image expects", want)
		}
	}
}
