package gateway

// Tests that the gateway tells the truth about its fleet: ejections, broken
// /metrics pages, tokenizer mismatches and backend rejections, each through
// real HTTP with a misbehaving backend.

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/triage"
)

// TestBackendRejectionIsNotADoorRejection: vLLM's own 400, forwarded as is,
// is the backend's layer (backend, reason backend_rejected), not the door's,
// and does not count toward ejection; a door rejection carries the same name
// (its admission.Reason) in the access log, maitred_rejections_total and
// triage.
func TestBackendRejectionIsNotADoorRejection(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"object":"error","message":"vLLM refuses this","type":"BadRequestError","param":null,"code":400}`)
	})
	core, logs := observer.New(zap.InfoLevel)
	tg := startGatewayFull(t, nil, extras{log: zap.New(core)}, nil, fb.URL)
	for range 6 {
		res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
		if body := readBodyT(t, res); res.StatusCode != 400 || !strings.Contains(body, "vLLM refuses this") {
			t.Fatalf("backend 400 not forwarded: %d %s", res.StatusCode, body)
		}
	}
	res := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"bogus","content":"hi"}]}`)
	if body := readBodyT(t, res); res.StatusCode != 400 {
		t.Fatalf("door rejection: %d %s", res.StatusCode, body)
	}
	rep := report(t, tg)
	tg.quiesce()

	if st := tg.pools["m"].Stats().Slots[0]; st.Ejected || st.Ejections != 0 {
		t.Errorf("the backend's own 400s ejected it: %+v", st)
	}
	m := tg.gathered(t)
	for _, want := range []string{
		`maitred_failures_total{layer="backend",model="m"} 6`,
		`maitred_failures_total{layer="door",model="m"} 1`,
		`maitred_rejections_total{model="m",reason="invalid_messages"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	byLayer, _ := rep.Evidence["failures_by_layer"].(map[string]any)
	if byLayer["door"] != float64(1) || byLayer["backend"] != float64(6) {
		t.Errorf("triage failures_by_layer = %v, want door 1 and backend 6", byLayer)
	}
	if rbr, _ := rep.Evidence["rejections_by_reason"].(map[string]any); len(rbr) != 1 || rbr["invalid_messages"] != float64(1) {
		t.Errorf("triage rejections_by_reason = %v, want only invalid_messages 1", rbr)
	}
	if fbr, _ := rep.Evidence["failures_by_reason"].(map[string]any); fbr["backend_rejected"] != float64(6) {
		t.Errorf("triage failures_by_reason = %v, want backend_rejected 6", fbr)
	}
	if rep.Verdict != triage.VerdictBoundary {
		t.Errorf("verdict %s, want boundary (requests the backend refuses): %v", rep.Verdict, rep.Evidence)
	}
	var door, backend int
	for _, e := range logs.FilterMessage("request").All() {
		f := e.ContextMap()
		switch {
		case f["endpoint"] == "/v1/chat/completions":
			door++
			if f["outcome"] != "invalid_messages" || f["layer"] != "door" {
				t.Errorf("door rejection logged as outcome %v layer %v, want invalid_messages, door", f["outcome"], f["layer"])
			}
		case f["endpoint"] == "/v1/completions":
			backend++
			if f["layer"] != "backend" || f["outcome"] != "backend_rejected" {
				t.Errorf("backend 400 logged as outcome %v layer %v, want backend_rejected, backend", f["outcome"], f["layer"])
			}
		}
	}
	if door != 1 || backend != 6 {
		t.Errorf("access lines: %d door, %d backend", door, backend)
	}
}
