package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// pxVocab are common words, about one o200k token each with their space.
var pxVocab = strings.Fields("the of and to in is for on that with as by at from this be are or an it not was " +
	"but all can has had have more one time will would about when which their there what some other into " +
	"than then them these only new also after first two way many well over such make like just long very " +
	"work system data user model cache block token request server route queue prompt answer")

// pxText returns about n tokens of words drawn by rng.
func pxText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pxVocab[rng.IntN(len(pxVocab))])
	}
	return b.String()
}

// pxUser is one user's conversation.
type pxUser struct {
	system int
	msgs   []chatMessage
	busy   bool
}

type pxStreamRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	MaxTokens     int           `json:"max_tokens"`
	Stream        bool          `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// runPrefix drives target with Poisson arrivals at rate (simulated
// requests/s) for -prefix-duration of simulated time, each arrival a turn
// of a user not already waiting, and reads the simulators' counters.
func runPrefix(w *prefixWorld, target string, rate float64) prefixResult {
	rng := rand.New(rand.NewPCG(29, 1)) // the same arrivals and texts for every policy
	systems := make([]string, pxSystems)
	for i := range systems {
		systems[i] = pxText(rng, 1000+i*3000/(pxSystems-1))
	}
	users := make([]*pxUser, pxUsers)
	for i := range users {
		users[i] = &pxUser{system: i % pxSystems}
	}
	var mu sync.Mutex // guards users, res and ttfts
	var res prefixResult
	var ttfts, prefills []float64
	var prompt int
	client := &http.Client{Transport: poolTransport()}
	stopSample := make(chan struct{})
	loads := sampleLoads(w, stopSample)

	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(scaled(*prefixDur))
	next := start
	for {
		next = next.Add(scaled(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))))
		if next.After(end) {
			break
		}
		time.Sleep(time.Until(next))
		turn := pxText(rng, pxUserTurn/2+rng.IntN(pxUserTurn))
		mu.Lock()
		var idle []*pxUser
		for _, u := range users {
			if !u.busy {
				idle = append(idle, u)
			}
		}
		res.sent++
		if len(idle) == 0 {
			res.skipped++
			mu.Unlock()
			continue
		}
		u := idle[rng.IntN(len(idle))]
		u.busy = true
		if len(u.msgs) == 0 {
			u.msgs = []chatMessage{{"system", systems[u.system]}}
		}
		req := pxStreamRequest{Model: "demo", Messages: append(slices.Clip(u.msgs), chatMessage{"user", turn}),
			MaxTokens: pxOutputTokens, Stream: true}
		req.StreamOptions.IncludeUsage = true
		mu.Unlock()
		wg.Go(func() {
			ttft, answer, promptTokens, cached, err := pxPost(client, target, req)
			mu.Lock()
			defer mu.Unlock()
			u.busy = false
			if err != nil {
				res.failed++
				return
			}
			res.done++
			prompt += promptTokens
			ttfts = append(ttfts, ttft.Seconds()**prefixScale)
			prefills = append(prefills, (pxTTFT + time.Duration(promptTokens-cached)*pxPrefill).Seconds())
			u.msgs = append(req.Messages, chatMessage{"assistant", answer})
			if promptTokens+2*pxUserTurn+pxOutputTokens > pxMaxHistory {
				u.msgs = nil // a new conversation
			}
		})
	}
	wg.Wait()
	close(stopSample)
	simSeconds := time.Since(start).Seconds() * *prefixScale
	var q, h int
	for _, s := range w.sims {
		st := s.Stats()
		q, h = q+st.PrefixQueries, h+st.PrefixHits
	}
	if q > 0 {
		res.hitRate = float64(h) / float64(q)
	}
	slices.Sort(ttfts)
	res.ttftP50, res.ttftP99 = quantile(ttfts, .5), quantile(ttfts, .99)
	slices.Sort(prefills)
	res.prefillP50, res.prefillP99 = quantile(prefills, .5), quantile(prefills, .99)
	res.throughput, res.tokPerSec = float64(res.done)/simSeconds, float64(prompt)/simSeconds
	res.imbalance = <-loads
	return res
}

// sampleLoads samples every simulator's tokens in flight until stop is
// closed, then sends max over mean of their time averages.
func sampleLoads(w *prefixWorld, stop chan struct{}) chan float64 {
	out := make(chan float64, 1)
	go func() {
		sums := make([]float64, len(w.sims))
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				for i, s := range w.sims {
					sums[i] += float64(s.Stats().TokensInFlight)
				}
				continue
			case <-stop:
			}
			break
		}
		var total, top float64
		for _, v := range sums {
			total += v
			top = max(top, v)
		}
		if total == 0 {
			out <- 0
			return
		}
		out <- top / (total / float64(len(sums)))
	}()
	return out
}

// pxPost posts a streaming chat and returns the time to its first content
// chunk, the answer's text and the prompt tokens and cached prompt tokens
// the usage chunk reports.
func pxPost(c *http.Client, base string, req pxStreamRequest) (time.Duration, string, int, int, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, "", 0, 0, err
	}
	start := time.Now()
	res, err := c.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", 0, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, "", 0, 0, &statusError{res.StatusCode}
	}
	var ttft time.Duration
	var answer strings.Builder
	prompt, cached := 0, 0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return 0, "", 0, 0, err
		}
		if chunk.Usage != nil {
			prompt = chunk.Usage.PromptTokens
			if chunk.Usage.Details != nil {
				cached = chunk.Usage.Details.CachedTokens
			}
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" && ttft == 0 {
				ttft = time.Since(start)
			}
			answer.WriteString(ch.Delta.Content)
		}
	}
	return ttft, answer.String(), prompt, cached, sc.Err()
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }
