package fleet

import (
	"bytes"
	"errors"
	"io"
	"os"
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
	var grace, period, failures int
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
		case "Deployment":
			spec := doc["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			grace = spec["terminationGracePeriodSeconds"].(int)
			ctr := spec["containers"].([]any)[0].(map[string]any)
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
