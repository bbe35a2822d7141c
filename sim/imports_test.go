package sim

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSimulatorImportsNoGatewayLogic: the simulator stands in for vLLM, so
// it must not be built from the code it tests. Its production code imports
// neither the gateway nor admission (whose parsing and rendering it would
// otherwise copy or share, passing a shared bug); the differential tests
// that compare the two live in package gateway's tests.
func TestSimulatorImportsNoGatewayLogic(t *testing.T) {
	const mod = "github.com/maitred-dev/maitred/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list listed %d packages: %v", len(deps), deps)
	}
	for _, d := range deps {
		for _, f := range []string{mod + "gateway", mod + "admission"} {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("sim depends on %s", d)
			}
		}
	}
}
