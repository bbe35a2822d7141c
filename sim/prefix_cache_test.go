package sim

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// longSystem is a system prompt of a few hundred Approx tokens.
var longSystem = strings.Repeat("You are a careful assistant; answer briefly and cite sources. ", 20)

func (b *bubbleEnv) openai() openai.Client {
	return openai.NewClient(option.WithBaseURL("http://sim:8000/v1/"), option.WithHTTPClient(b.client),
		option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func (b *bubbleEnv) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := b.client.Get("http://sim:8000/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// timedChat sends a chat completion and returns it with the (virtual) time
// it took.
func timedChat(t *testing.T, c openai.Client, msgs []openai.ChatCompletionMessageParamUnion) (*openai.ChatCompletion, time.Duration) {
	t.Helper()
	start := time.Now()
	r, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "demo", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return r, time.Since(start)
}

// TestPrefixCacheShortensTTFT: on a virtual clock, TTFT is TTFT plus
// PrefillPerToken for each uncached prompt token. A repeated prompt hits
// all its full blocks but the one holding its last token; the next turn of
// the conversation hits every full block of the previous prompt. The hits
// are reported in usage and in vLLM's prefix-cache counters.
func TestPrefixCacheShortensTTFT(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttft, perToken = 100 * time.Millisecond, time.Millisecond
		b := startBubble(t, Config{PrefixCaching: true, PromptTokensDetails: true, TTFT: ttft,
			PrefillPerToken: perToken, OutputTokens: 1, MaxModelLen: 8192})
		synctest.Wait()
		c := b.openai()
		turn1 := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(longSystem), openai.UserMessage("What is a KV cache?")}

		r1, d1 := timedChat(t, c, turn1)
		n1 := int(r1.Usage.PromptTokens)
		if n1 < 100 {
			t.Fatalf("prompt of %d tokens, want a long one", n1)
		}
		if want := ttft + time.Duration(n1)*perToken; d1 != want || r1.Usage.PromptTokensDetails.CachedTokens != 0 {
			t.Errorf("cold: %v, cached %d; want %v, 0", d1, r1.Usage.PromptTokensDetails.CachedTokens, want)
		}

		r2, d2 := timedChat(t, c, turn1)
		h2 := (n1 - 1) / 16 * 16 // the block holding the last token is computed again
		if want := ttft + time.Duration(n1-h2)*perToken; d2 != want || int(r2.Usage.PromptTokensDetails.CachedTokens) != h2 {
			t.Errorf("repeat: %v, cached %d; want %v, %d", d2, r2.Usage.PromptTokensDetails.CachedTokens, want, h2)
		}

		turn2 := append(turn1, openai.AssistantMessage(r2.Choices[0].Message.Content), openai.UserMessage("And a block?"))
		r3, d3 := timedChat(t, c, turn2)
		n3, h3 := int(r3.Usage.PromptTokens), n1/16*16
		if want := ttft + time.Duration(n3-h3)*perToken; d3 != want || int(r3.Usage.PromptTokensDetails.CachedTokens) != h3 {
			t.Errorf("next turn: %v, cached %d; want %v, %d", d3, r3.Usage.PromptTokensDetails.CachedTokens, want, h3)
		}

		// A prompt of exactly two blocks, twice: vLLM computes the last
		// token again, so only the first block is a hit.
		ids := make([]int64, 32)
		for i := range ids {
			ids[i] = int64(5000 + i)
		}
		var d5 time.Duration
		var r5 *openai.Completion
		for range 2 {
			start := time.Now()
			var err error
			r5, err = c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "demo",
				Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids}})
			if err != nil {
				t.Fatal(err)
			}
			d5 = time.Since(start)
		}
		if want := ttft + 16*perToken; d5 != want || r5.Usage.PromptTokensDetails.CachedTokens != 16 {
			t.Errorf("two-block prompt again: %v, cached %d; want %v, 16", d5, r5.Usage.PromptTokensDetails.CachedTokens, want)
		}

		fams := b.scrape(t)
		labels := map[string]string{"model_name": "demo", "engine": "0"}
		q, _ := metricValue(fams, "vllm:prefix_cache_queries_total", labels)
		h, _ := metricValue(fams, "vllm:prefix_cache_hits_total", labels)
		if q != float64(2*n1+n3+64) || h != float64(h2+h3+16) {
			t.Errorf("prefix_cache queries %v hits %v, want %d %d", q, h, 2*n1+n3+64, h2+h3+16)
		}
		if st := b.sim.Stats(); st.PrefixQueries != 2*n1+n3+64 || st.PrefixHits != h2+h3+16 {
			t.Errorf("stats %+v", st)
		}
		// The oracle's view: the next turn would find every full block of
		// turn 2's prompt (its last token's block included, as the prompt
		// grows).
		next := []byte(`{"model":"demo","messages":[{"role":"system","content":` + strconv.Quote(longSystem) +
			`},{"role":"user","content":"What is a KV cache?"},{"role":"assistant","content":` + strconv.Quote(r2.Choices[0].Message.Content) +
			`},{"role":"user","content":"And a block?"},{"role":"assistant","content":"x"},{"role":"user","content":"more"}]}`)
		if got := b.sim.CachedPrefixTokens(next); got != n3/16*16 {
			t.Errorf("CachedPrefixTokens = %d, want %d", got, n3/16*16)
		}
		b.stop(t)
	})
}

// TestPrefixCacheOffKeepsTiming: without PrefixCaching nothing is cached:
// a repeated prompt pays its whole prefill again, usage has no details and
// no prefix-cache series is exported.
func TestPrefixCacheOffKeepsTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttft, perToken = 100 * time.Millisecond, time.Millisecond
		b := startBubble(t, Config{PromptTokensDetails: true, TTFT: ttft, PrefillPerToken: perToken, OutputTokens: 1})
		synctest.Wait()
		c := b.openai()
		msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(longSystem), openai.UserMessage("hi")}
		for i := range 2 {
			r, d := timedChat(t, c, msgs)
			if want := ttft + time.Duration(r.Usage.PromptTokens)*perToken; d != want || r.Usage.PromptTokensDetails.CachedTokens != 0 {
				t.Errorf("request %d: %v, cached %d; want %v, 0", i, d, r.Usage.PromptTokensDetails.CachedTokens, want)
			}
		}
		fams := b.scrape(t)
		if _, ok := fams["vllm:prefix_cache_queries_total"]; ok {
			t.Error("prefix_cache_queries exported without PrefixCaching")
		}
		resp, err := b.client.Post("http://sim:8000/reset_prefix_cache", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("reset_prefix_cache without a cache: %d, want 404", resp.StatusCode)
		}
		b.stop(t)
	})
}

// TestResetPrefixCacheWhileRunning: vLLM's reset fails (409) while running
// requests hold cached blocks, unless reset_running_requests; then the
// blocks leave the cache at once and stay out when the request ends.
func TestResetPrefixCacheWhileRunning(t *testing.T) {
	gate := make(chan struct{})
	e := newEnv(t, Config{PrefixCaching: true, OutputTokens: 2, TokenGate: gate})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.post("/v1/completions", `{"prompt":[`+strings.Repeat("7,", 40)+`7],"max_tokens":2}`)
	}()
	gate <- struct{}{} // the first token: the request runs, its 2 blocks cached
	if n := e.sim.PrefixCacheBlocks(); n != 2 {
		t.Fatalf("%d blocks cached while running, want 2", n)
	}
	if code, _, body := e.post("/reset_prefix_cache", ""); code != http.StatusConflict || !strings.Contains(string(body), "Prefix cache reset failed.") {
		t.Errorf("reset while running: %d %s, want 409", code, body)
	}
	if code, _, body := e.post("/reset_prefix_cache?reset_running_requests=maybe", ""); code != http.StatusBadRequest {
		t.Errorf("reset_running_requests=maybe: %d %s, want 400", code, body)
	}
	if code, _, _ := e.post("/reset_prefix_cache?reset_running_requests=true", ""); code != http.StatusOK {
		t.Errorf("reset_running_requests=true: %d", code)
	}
	gate <- struct{}{}
	<-done
	if n := e.sim.PrefixCacheBlocks(); n != 0 {
		t.Errorf("%d blocks after the reset and the request's end, want 0", n)
	}
	if code, _, _ := e.post("/reset_prefix_cache", ""); code != http.StatusOK {
		t.Errorf("reset when idle: %d", code)
	}
}

func TestKVEventsConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{KVEvents: &KVEventsConfig{}}, "needs PrefixCaching"},
		{Config{PrefixCaching: true, KVEvents: &KVEventsConfig{Encoding: "json"}}, "kv_events.encoding"},
		{Config{PrefixCaching: true, KVEvents: &KVEventsConfig{Hash: "hex"}}, "kv_events.hash"},
		{Config{PrefixCaching: true, KVEvents: &KVEventsConfig{Endpoint: "tcp://*", DataParallelRank: 1}}, "no port"},
	} {
		s := New(c.cfg, nil)
		err := s.StartKVEvents()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg.KVEvents, err, c.want)
		}
		s.Close()
	}
	for ep, want := range map[string]string{
		"tcp://*:5557": "tcp://*:5559", "tcp://*:0": "tcp://*:0", "inproc://cache": "inproc://cache_dp2",
	} {
		if got, err := offsetEndpoint(ep, 2); got != want || err != nil {
			t.Errorf("offsetEndpoint(%q, 2) = %q, %v; want %q", ep, got, err, want)
		}
	}
}
