package sim

import (
	"net/http"
	"strings"
	"testing"
)

func TestParseTraceContext(t *testing.T) {
	const tid, pid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tests := []struct {
		name, header string
		valid        bool
		sampled      bool
	}{
		{"sampled", "00-" + tid + "-" + pid + "-01", true, true},
		{"not sampled", "00-" + tid + "-" + pid + "-00", true, false},
		{"future version with more fields", "cc-" + tid + "-" + pid + "-01-extra", true, true},
		{"version 00 with more fields", "00-" + tid + "-" + pid + "-01-extra", false, false},
		{"version ff", "ff-" + tid + "-" + pid + "-01", false, false},
		{"uppercase", "00-" + strings.ToUpper(tid) + "-" + pid + "-01", false, false},
		{"zero trace id", "00-" + strings.Repeat("0", 32) + "-" + pid + "-01", false, false},
		{"zero parent id", "00-" + tid + "-" + strings.Repeat("0", 16) + "-01", false, false},
		{"short", "00-" + tid[:31] + "-" + pid + "-01", false, false},
		{"empty", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := ParseTraceContext(tt.header, "vendor=x")
			if tc.Valid != tt.valid || tc.Sampled != tt.sampled {
				t.Fatalf("ParseTraceContext(%q) = %+v, want valid %v sampled %v", tt.header, tc, tt.valid, tt.sampled)
			}
			if tc.Valid && (tc.TraceID != tid || tc.ParentID != pid || tc.State != "vendor=x") {
				t.Errorf("fields = %+v", tc)
			}
			if !tc.Valid && (tc != TraceContext{}) {
				t.Errorf("invalid context kept fields: %+v", tc)
			}
		})
	}
}

// TestRecordsTraceparent: a request's traceparent and tracestate, sent
// over HTTP, are recorded parsed with the request, as vLLM reads them.
func TestRecordsTraceparent(t *testing.T) {
	e := newEnv(t, Config{Model: "m", OutputTokens: 2})
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		if path == "/v1/embeddings" {
			body = `{"model":"m","input":"hi"}`
		}
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", tp)
		req.Header.Set("tracestate", "congo=t61rcWkgMzE")
		res, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, res.StatusCode)
		}
	}
	got := e.sim.Received()
	if len(got) != 2 {
		t.Fatalf("received %d requests, want 2", len(got))
	}
	for _, r := range got {
		want := TraceContext{Valid: true, TraceID: "0af7651916cd43dd8448eb211c80319c", ParentID: "b7ad6b7169203331", Sampled: true, State: "congo=t61rcWkgMzE"}
		if r.Trace != want {
			t.Errorf("%s: Trace = %+v, want %+v", r.Path, r.Trace, want)
		}
	}
}
