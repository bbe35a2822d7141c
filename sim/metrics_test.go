package sim

import (
	"strings"
	"testing"
)

func TestMetrics(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 4, KVTokens: 32768})
	fams := e.scrape()
	base := map[string]string{"model_name": "demo", "engine": "0"}
	// Series exist (as 0) before any request, like vLLM's.
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
		"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
		"sim_aborted_requests_total"} {
		if v, ok := metricValue(fams, name, base); !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", name, v, ok)
		}
	}
	info, ok := metricValue(fams, "vllm:cache_config_info", map[string]string{
		"block_size": "16", "num_gpu_blocks": "2048", "cache_dtype": "auto", "enable_prefix_caching": "True"})
	if !ok || info != 1 {
		t.Errorf("cache_config_info = %v (present %v)", info, ok)
	}

	e.post("/v1/chat/completions", chatStreamBody)
	e.post("/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	fams = e.scrape()
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"vllm:prompt_tokens_total", base, 2 * chatHiTokens},
		{"vllm:generation_tokens_total", base, 4 + 2},
		{"vllm:request_success_total", map[string]string{"finished_reason": "stop", "model_name": "demo", "engine": "0"}, 1},
		{"vllm:request_success_total", map[string]string{"finished_reason": "length"}, 1},
		{"vllm:request_success_total", map[string]string{"finished_reason": "abort"}, 0},
		{"vllm:time_to_first_token_seconds", base, 2},     // histogram sample count
		{"vllm:inter_token_latency_seconds", base, 3 + 1}, // tokens - 1 per request
		{"vllm:e2e_request_latency_seconds", base, 2},
		{"vllm:request_prompt_tokens", base, 2},
		{"vllm:num_requests_running", base, 0},
		{"vllm:kv_cache_usage_perc", base, 0},
	} {
		if v, ok := metricValue(fams, tc.name, tc.labels); !ok || v != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, v, ok, tc.want)
		}
	}
	_, hdr, _ := e.get("/metrics")
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("metrics content-type %q", ct)
	}
}

func TestTokenBuckets(t *testing.T) {
	got := tokenBuckets(600)
	want := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500}
	if len(got) != len(want) {
		t.Fatalf("buckets = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("buckets = %v", got)
		}
	}
}
