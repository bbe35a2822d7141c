package gateway

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestRetryAfterAfterIdleSpell: after two minutes without traffic (the
// queues' clock skipped ahead), a burst that fills the queue used to be told
// Retry-After (depth+1) x the idle time, six minutes, over openai-go's
// two-minute cap, so the SDK gave up at once. The advice now comes from
// capacity: at most queue_timeout, within twice the time the queue really
// took to drain, and openai-go's own retry (default settings) succeeds.
func TestRetryAfterAfterIdleSpell(t *testing.T) {
	tok := loadTok(t, "demo")
	// 50 tokens at 20 ms: about a second a request.
	_, urls := startSims(t, 1, tok, func(_ int, c *sim.Config) {
		c.ITL = 20 * time.Millisecond
		c.OutputTokens = 50
	})
	var skipped atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skipped.Load())) }
	tg := startGatewayFull(t, tok, extras{queueClock: clock}, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueSize = 2
		c.Models[0].QueueTimeout = config.Duration(20 * time.Second)
	}, urls...)
	const body = `{"model":"m","prompt":"hi","max_tokens":50}`
	for range 3 { // traffic before the idle spell: a drain rate, a hold time
		if res := tg.post(t, "/v1/completions", body); res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, readBodyT(t, res))
		} else {
			readBodyT(t, res)
		}
	}
	skipped.Add(int64(120 * time.Second))

	pool := tg.live().byName["m"].pool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var finished []time.Time
	send := func() {
		wg.Go(func() {
			res := tg.post(t, "/v1/completions", body)
			code := res.StatusCode
			readBodyT(t, res)
			if code != 200 {
				t.Errorf("burst request: %d", code)
			}
			mu.Lock()
			finished = append(finished, time.Now())
			mu.Unlock()
		})
	}
	send()
	for pool.Stats().Slots[0].InFlight < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	for want := 1; want <= 2; want++ {
		send()
		for pool.Advice().Depth < want {
			time.Sleep(5 * time.Millisecond)
		}
	}

	// The queue is full: openai-go, as shipped (two retries, Retry-After
	// honoured up to two minutes), gets queue_full and retries.
	var statuses []int
	var retryAfter []string
	var rejectedAt time.Time
	sdk := openai.NewClient(option.WithBaseURL(tg.URL+"/v1/"), option.WithAPIKey("k"), option.WithHTTPClient(tg.client),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(req)
			if err == nil {
				statuses = append(statuses, res.StatusCode)
				retryAfter = append(retryAfter, res.Header.Get("Retry-After"))
				if res.StatusCode == http.StatusTooManyRequests && rejectedAt.IsZero() {
					rejectedAt = time.Now()
				}
			}
			return res, err
		}))
	comp, err := sdk.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:     "m",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")},
		MaxTokens: openai.Int(50),
	})
	wg.Wait()
	if len(statuses) == 0 || statuses[0] != http.StatusTooManyRequests {
		t.Fatalf("statuses %v: the first attempt should meet a full queue", statuses)
	}
	ra, perr := strconv.Atoi(retryAfter[0])
	if perr != nil {
		t.Fatalf("Retry-After %q", retryAfter[0])
	}
	if err != nil {
		t.Fatalf("openai-go did not get through on its own retries (statuses %v, Retry-After %v): %v", statuses, retryAfter, err)
	}
	if len(comp.Choices) == 0 || comp.Choices[0].Text == "" {
		t.Errorf("completion %+v", comp)
	}
	// The queue drained when the requests waiting at the rejection were
	// done.
	var last time.Time
	for _, f := range finished {
		if f.After(last) {
			last = f
		}
	}
	took := last.Sub(rejectedAt)
	t.Logf("statuses %v, Retry-After %v; the queue drained in %s", statuses, retryAfter, took)
	if ra > 20 {
		t.Errorf("Retry-After %d s over queue_timeout 20 s", ra)
	}
	if time.Duration(ra)*time.Second > 2*took+time.Second {
		t.Errorf("Retry-After %d s, the queue drained in %s: want within 2x (plus the header's rounding up)", ra, took)
	}
}
