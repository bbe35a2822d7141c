package sim

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
)

// concurrentCompletions sends one completion per prompt at the same
// (virtual) instant and returns their durations, shortest first, and the
// cached tokens each reported.
func concurrentCompletions(t *testing.T, c openai.Client, prompts ...[]int64) ([]time.Duration, []int) {
	t.Helper()
	var mu sync.Mutex
	var took []time.Duration
	var cached []int
	var wg sync.WaitGroup
	for _, ids := range prompts {
		wg.Go(func() {
			start := time.Now()
			r, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "demo",
				Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids}})
			d := time.Since(start)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			took, cached = append(took, d), append(cached, int(r.Usage.PromptTokensDetails.CachedTokens))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(took)
	return took, cached
}

// blockIDs returns n token ids starting at from.
func blockIDs(from, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(from + i)
	}
	return ids
}

// TestPrefillContention: with PrefillContention, two uncached prefills
// sent together on one server share its prefill engine first come first
// served, so the second first token comes after both prefills (one
// request alone takes TTFT + its prefill); the same two prompts once
// cached book only the block vLLM computes again, so they barely contend.
// Without the switch each prefill takes its own time.
func TestPrefillContention(t *testing.T) {
	const ttft, perToken, n = 10 * time.Millisecond, time.Millisecond, 160
	a, b := blockIDs(1000, n), blockIDs(3000, n)
	for _, contention := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			env := startBubble(t, Config{PrefixCaching: true, PromptTokensDetails: true, TTFT: ttft,
				PrefillPerToken: perToken, OutputTokens: 1, PrefillContention: contention})
			synctest.Wait()
			c := env.openai()

			alone, _ := concurrentCompletions(t, c, blockIDs(5000, n))
			if want := ttft + n*perToken; alone[0] != want {
				t.Errorf("contention %v: one uncached prefill took %v, want %v", contention, alone[0], want)
			}

			cold, _ := concurrentCompletions(t, c, a, b)
			want := []time.Duration{ttft + n*perToken, ttft + n*perToken}
			if contention {
				want[1] = ttft + 2*n*perToken
			}
			if !slices.Equal(cold, want) {
				t.Errorf("contention %v: two uncached prefills took %v, want %v", contention, cold, want)
			}

			// Each prompt is now cached but for its last block, which
			// vLLM computes again: 16 tokens of prefill each.
			warm, cached := concurrentCompletions(t, c, a, b)
			const again = 16
			want = []time.Duration{ttft + again*perToken, ttft + again*perToken}
			if contention {
				want[1] = ttft + 2*again*perToken
			}
			if !slices.Equal(warm, want) || !slices.Equal(cached, []int{n - again, n - again}) {
				t.Errorf("contention %v: two cached prefills took %v (cached %v), want %v (cached %d each)",
					contention, warm, cached, want, n-again)
			}
			env.stop(t)
		})
	}
}
