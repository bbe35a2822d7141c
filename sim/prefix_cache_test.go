package sim

import (
	"bytes"
	"context"
	"io"
	"net/http"
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

		fams := b.scrape(t)
		labels := map[string]string{"model_name": "demo", "engine": "0"}
		q, _ := metricValue(fams, "vllm:prefix_cache_queries_total", labels)
		h, _ := metricValue(fams, "vllm:prefix_cache_hits_total", labels)
		if q != float64(2*n1+n3) || h != float64(h2+h3) {
			t.Errorf("prefix_cache queries %v hits %v, want %d %d", q, h, 2*n1+n3, h2+h3)
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
