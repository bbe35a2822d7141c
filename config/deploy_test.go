package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
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

// TestKubernetesManifest checks that each manifest's config is a valid
// maitred config and that the pod's grace period covers the drain:
// drain_delay + drain_timeout must end before the kubelet's SIGKILL, and the
// readiness probe must notice the drain within drain_delay.
func TestKubernetesManifest(t *testing.T) {
	for _, file := range []string{"../deploy/kubernetes.yaml", "../deploy/kubernetes-replicas.yaml"} {
		t.Run(path.Base(file), func(t *testing.T) { checkManifest(t, readManifest(t, file)) })
	}
}

// manifest is a multi-document Kubernetes file, decoded loosely.
type manifest struct {
	docs []map[string]any
	cfg  *Config // the ConfigMap maitred's maitred.yaml
}

func readManifest(t *testing.T, file string) manifest {
	t.Helper()
	t.Setenv("VLLM_KEY", "x")
	t.Setenv("MAITRED_STORE_PASSWORD", "x")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		m.docs = append(m.docs, doc)
		if doc["kind"] == "ConfigMap" && name(doc) == "maitred" {
			text := doc["data"].(map[string]any)["maitred.yaml"].(string)
			c, err := Parse([]byte(text))
			if err != nil {
				t.Fatalf("ConfigMap maitred.yaml: %v", err)
			}
			m.cfg = &c
		}
	}
	if m.cfg == nil {
		t.Fatal("manifest lacks the maitred ConfigMap")
	}
	return m
}

func name(doc map[string]any) string { return doc["metadata"].(map[string]any)["name"].(string) }

// find returns the document of kind and name, or nil.
func (m manifest) find(kind, n string) map[string]any {
	for _, d := range m.docs {
		if d["kind"] == kind && name(d) == n {
			return d
		}
	}
	return nil
}

// podSpec is a Deployment's pod template spec.
func podSpec(dep map[string]any) map[string]any {
	return dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

func podLabels(dep map[string]any) map[string]any {
	return dep["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)
}

func container(dep map[string]any) map[string]any {
	return podSpec(dep)["containers"].([]any)[0].(map[string]any)
}

// selects reports whether a selector's labels all hold on labels.
func selects(sel, labels map[string]any) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// secretEnv maps a container's environment variables set from a Secret to
// "secret/key".
func secretEnv(ctr map[string]any) map[string]string {
	out := map[string]string{}
	env, _ := ctr["env"].([]any)
	for _, e := range env {
		e := e.(map[string]any)
		if vf, ok := e["valueFrom"].(map[string]any); ok {
			if ref, ok := vf["secretKeyRef"].(map[string]any); ok {
				out[e["name"].(string)] = ref["name"].(string) + "/" + ref["key"].(string)
			}
		}
	}
	return out
}

func checkManifest(t *testing.T, m manifest) {
	cfg := m.cfg
	dep := m.find("Deployment", "maitred")
	if dep == nil {
		t.Fatal("manifest lacks the maitred Deployment")
	}
	spec := podSpec(dep)
	grace := spec["terminationGracePeriodSeconds"].(int)
	ctr := container(dep)
	containerPort := ctr["ports"].([]any)[0].(map[string]any)["containerPort"].(int)
	var configArg string
	args := ctr["args"].([]any)
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			configArg = args[i+1].(string)
		}
	}
	var mounts []string
	for _, mt := range ctr["volumeMounts"].([]any) {
		mounts = append(mounts, mt.(map[string]any)["mountPath"].(string))
	}
	probes := map[string]string{}
	var period, failures int
	for _, p := range []string{"readinessProbe", "livenessProbe"} {
		probe := ctr[p].(map[string]any)
		probes[p] = probe["httpGet"].(map[string]any)["path"].(string)
		if p == "readinessProbe" {
			period, failures = probe["periodSeconds"].(int), probe["failureThreshold"].(int)
		}
	}
	// vLLM is reached through a headless Service, by DNS: every backend
	// entry names one of the manifest's headless Services at its port.
	headless := map[string]int{} // headless Services: name -> port
	for _, d := range m.docs {
		if spec, ok := d["spec"].(map[string]any); ok && d["kind"] == "Service" && spec["clusterIP"] == "None" {
			headless[name(d)] = spec["ports"].([]any)[0].(map[string]any)["port"].(int)
		}
	}
	for i, md := range cfg.Models {
		for j, b := range md.Backends {
			host, port, err := net.SplitHostPort(b.DNS)
			if b.DNS == "" || err != nil || strconv.Itoa(headless[host]) != port {
				t.Errorf("models[%d].backends[%d] is not dns: SERVICE:PORT of a headless Service in the manifest (%+v, services %v)", i, j, b, headless)
			}
		}
	}
	// The pod must be reachable on the port it declares.
	if host, port, _ := net.SplitHostPort(cfg.Listen); (host != "0.0.0.0" && host != "" && host != "::") || port != strconv.Itoa(containerPort) {
		t.Errorf("listen %q is not reachable as containerPort %d", cfg.Listen, containerPort)
	}
	// Prometheus scrapes the admin port, declared by the container, which
	// the maitred Service (the public path) does not expose.
	if _, adminPort, err := net.SplitHostPort(cfg.AdminListen); err != nil {
		t.Errorf("admin_listen %q: the manifest serves /metrics on the API port", cfg.AdminListen)
	} else {
		ann := dep["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
		if ann["prometheus.io/port"] != adminPort {
			t.Errorf("prometheus.io/port %v is not admin_listen's port %s", ann["prometheus.io/port"], adminPort)
		}
		declared := map[string]string{} // port name -> number
		for _, p := range ctr["ports"].([]any) {
			p := p.(map[string]any)
			declared[p["name"].(string)] = strconv.Itoa(p["containerPort"].(int))
		}
		if !slices.Contains(slices.Collect(maps.Values(declared)), adminPort) {
			t.Errorf("the container does not declare admin_listen's port %s: %v", adminPort, declared)
		}
		if svc := m.find("Service", "maitred"); svc != nil {
			for _, p := range svc["spec"].(map[string]any)["ports"].([]any) {
				tp := fmt.Sprint(p.(map[string]any)["targetPort"])
				if tp == adminPort || declared[tp] == adminPort {
					t.Errorf("the maitred Service exposes the admin port: %v", p)
				}
			}
		}
	}
	if mountDir := path.Dir(configArg); !slices.Contains(mounts, mountDir) {
		t.Errorf("--config %s is not under a mounted volume %v", configArg, mounts)
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
	// More than one replica needs the shared store: without it each
	// replica grants every backend its whole budget.
	if replicas := dep["spec"].(map[string]any)["replicas"].(int); replicas > 1 && !cfg.Store.Shared() {
		t.Errorf("%d replicas without a shared store (store:) oversubscribe every backend %d-fold", replicas, replicas)
	}
}

// TestKubernetesReplicasManifest checks the several-replica example: three
// replicas, a PodDisruptionBudget that keeps all but one, and a store that
// the config reaches: the store URL names a Service of the manifest, on
// its port, selecting a Deployment whose container listens there with
// probes, and the password both sides read comes from the same Secret.
func TestKubernetesReplicasManifest(t *testing.T) {
	m := readManifest(t, "../deploy/kubernetes-replicas.yaml")
	dep := m.find("Deployment", "maitred")
	replicas := dep["spec"].(map[string]any)["replicas"].(int)
	if replicas != 3 {
		t.Errorf("replicas = %d, want 3", replicas)
	}
	pdb := m.find("PodDisruptionBudget", "maitred")
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget maitred")
	}
	ps := pdb["spec"].(map[string]any)
	if !selects(ps["selector"].(map[string]any)["matchLabels"].(map[string]any), podLabels(dep)) {
		t.Error("the PodDisruptionBudget does not select maitred's pods")
	}
	if mu, ok := ps["maxUnavailable"].(int); !ok || mu < 1 || mu >= replicas {
		t.Errorf("PodDisruptionBudget maxUnavailable = %v: want at least 1 (drains can proceed) and fewer than %d", ps["maxUnavailable"], replicas)
	}

	addr, err := m.cfg.Store.Addr()
	if err != nil || !m.cfg.Store.Shared() {
		t.Fatalf("store %q: %v", m.cfg.Store.URL, err)
	}
	host, port, _ := net.SplitHostPort(addr.Addr)
	svc := m.find("Service", host)
	if svc == nil {
		t.Fatalf("store host %q is no Service of the manifest", host)
	}
	var target any
	for _, p := range svc["spec"].(map[string]any)["ports"].([]any) {
		p := p.(map[string]any)
		if strconv.Itoa(p["port"].(int)) == port {
			target = p["targetPort"]
		}
	}
	if target == nil {
		t.Fatalf("Service %s has no port %s", host, port)
	}
	var store map[string]any
	for _, d := range m.docs {
		if d["kind"] == "Deployment" && selects(svc["spec"].(map[string]any)["selector"].(map[string]any), podLabels(d)) {
			store = d
		}
	}
	if store == nil {
		t.Fatalf("Service %s selects no Deployment of the manifest", host)
	}
	sctr := container(store)
	listens := false
	for _, p := range sctr["ports"].([]any) {
		p := p.(map[string]any)
		if p["name"] == target || p["containerPort"] == target {
			listens = true
		}
	}
	if !listens {
		t.Errorf("the store's container has no port %v", target)
	}
	for _, p := range []string{"readinessProbe", "livenessProbe"} {
		if sctr[p] == nil {
			t.Errorf("the store's container has no %s", p)
		}
	}
	// The password maitred reads is the one the store requires.
	mine := secretEnv(container(dep))[m.cfg.Store.PasswordEnv]
	if mine == "" {
		t.Fatalf("store_password_env %s is not set from a Secret in maitred's container", m.cfg.Store.PasswordEnv)
	}
	sargs := strings.Join(func() []string {
		var out []string
		for _, a := range sctr["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}(), " ")
	required := false
	for env, ref := range secretEnv(sctr) {
		if ref == mine && strings.Contains(sargs, "--requirepass $("+env+")") {
			required = true
		}
	}
	if !required {
		t.Errorf("the store does not require the password maitred sends (%s): args %q", mine, sargs)
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
	// go.mod names the language version (any patch release of it builds
	// the module, none is downloaded); the builder is that minor release
	// at a patch level at least as new.
	goVersion := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)\.(\d+)$`).FindStringSubmatch(string(mod))
	builder := regexp.MustCompile(`(?m)^FROM golang:(\d+)\.(\d+)\.(\d+) `).FindStringSubmatch(string(df))
	if goVersion == nil || builder == nil {
		t.Fatalf("go.mod's go line %v or the Dockerfile's FROM golang:X.Y.Z %v not found", goVersion, builder)
	}
	patch := func(v []string) int { n, _ := strconv.Atoi(v[3]); return n }
	if builder[1] != goVersion[1] || builder[2] != goVersion[2] || patch(builder) < patch(goVersion) {
		t.Errorf("the builder image golang:%s is not go.mod's Go %s", builder[0], goVersion[0])
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
