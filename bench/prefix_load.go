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

// pxTurn is one arrival: a user turn's text, when it arrived and the
// draw that picks the idle user who sends it.
type pxTurn struct {
	at   time.Time
	text string
	pick int
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

// pxRun is one run's driver state: the users and what their turns
// measured. Its mu guards everything but the immutable fields.
type pxRun struct {
	w       *prefixWorld
	target  string
	client  *http.Client
	systems []string
	wg      sync.WaitGroup

	mu      sync.Mutex
	users   []*pxUser
	backlog []pxTurn // arrivals waiting for an idle user, oldest first
	closed  bool     // the arrival window is over: the backlog is not sent
	res     prefixResult
	ttfts   []float64 // client-measured, wall clock x scale
	waits   []float64 // arrival to send (waiting for an idle user), simulated seconds
	prompt  int
	// prefills are the model's TTFT of each turn's uncached tokens alone
	prefills []float64
}

// runPrefix drives target with open-loop Poisson arrivals at rate
// (simulated requests/s) for -prefix-duration of simulated time. Every
// arrival is a turn of a conversation: it goes to an idle user drawn at
// random, or, when all are waiting for an answer, waits (first come first
// served) for the next user whose answer comes; its TTFT counts from when
// it is sent. The arrival times, turn texts and draws are the same for
// every policy. Turns still waiting for a user when the window ends are
// not sent (unsent); those in flight are awaited.
func runPrefix(w *prefixWorld, target string, rate float64) prefixResult {
	rng := rand.New(rand.NewPCG(29, 1))   // the same arrivals and texts for every policy
	picks := rand.New(rand.NewPCG(29, 2)) // the same user draws, whatever is idle
	r := &pxRun{w: w, target: target, client: &http.Client{Transport: poolTransport()}, systems: make([]string, pxSystems)}
	for i := range r.systems {
		r.systems[i] = pxText(rng, 1000+i*3000/(pxSystems-1))
	}
	r.users = make([]*pxUser, pxUsers)
	for i := range r.users {
		r.users[i] = &pxUser{system: i % pxSystems}
	}
	stopSample := make(chan struct{})
	loads := sampleLoads(w, stopSample)
	q0, h0 := pxPrefixCounts(w)

	start := time.Now()
	end := start.Add(scaled(*prefixDur))
	next := start
	for {
		next = next.Add(scaled(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))))
		if next.After(end) {
			break
		}
		time.Sleep(time.Until(next))
		turn := pxTurn{at: next, text: pxText(rng, pxUserTurn/2+rng.IntN(pxUserTurn)), pick: picks.IntN(pxUsers)}
		r.arrive(turn)
	}
	r.mu.Lock()
	r.closed = true
	r.res.unsent = len(r.backlog)
	r.mu.Unlock()
	r.wg.Wait()
	close(stopSample)
	simSeconds := time.Since(start).Seconds() * *prefixScale
	res := r.res
	q, h := pxPrefixCounts(w)
	q, h = q-q0, h-h0
	if q > 0 {
		res.hitRate = float64(h) / float64(q)
	}
	if res.done > 0 {
		res.uncachedPerReq = float64(q-h) / float64(res.done)
	}
	res.prefillBusy = float64(q-h) * pxPrefill.Seconds() / (pxServers * simSeconds)
	res.ttftP50, res.ttftP99 = p50p99(r.ttfts)
	res.prefillP50, res.prefillP99 = p50p99(r.prefills)
	res.waitP50, res.waitP99 = p50p99(r.waits)
	res.throughput, res.tokPerSec = float64(res.done)/simSeconds, float64(r.prompt)/simSeconds
	res.imbalance = <-loads
	return res
}

// pxPrefixCounts sums the simulators' prefix-cache queries and hits.
func pxPrefixCounts(w *prefixWorld) (q, h int) {
	for _, s := range w.sims {
		st := s.Stats()
		q, h = q+st.PrefixQueries, h+st.PrefixHits
	}
	return q, h
}

func p50p99(v []float64) (float64, float64) {
	slices.Sort(v)
	return quantile(v, .5), quantile(v, .99)
}

// arrive sends turn by an idle user, or queues it for the next one.
func (r *pxRun) arrive(turn pxTurn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.sent++
	var idle []*pxUser
	for _, u := range r.users {
		if !u.busy {
			idle = append(idle, u)
		}
	}
	if len(idle) == 0 || len(r.backlog) > 0 {
		r.res.queued++
		r.backlog = append(r.backlog, turn)
		return
	}
	r.sendLocked(idle[turn.pick%len(idle)], turn)
}

// sendLocked posts u's next turn and, when its answer is in, records it
// and lets u take the oldest waiting arrival.
func (r *pxRun) sendLocked(u *pxUser, turn pxTurn) {
	u.busy = true
	r.waits = append(r.waits, time.Since(turn.at).Seconds()**prefixScale)
	if len(u.msgs) == 0 {
		u.msgs = []chatMessage{{"system", r.systems[u.system]}}
	}
	req := pxStreamRequest{Model: "demo", Messages: append(slices.Clip(u.msgs), chatMessage{"user", turn.text}),
		MaxTokens: pxOutputTokens, Stream: true}
	req.StreamOptions.IncludeUsage = true
	r.wg.Go(func() {
		ttft, answer, promptTokens, cached, err := pxPost(r.client, r.target, req)
		r.mu.Lock()
		defer r.mu.Unlock()
		u.busy = false
		if err != nil {
			r.res.failed++
		} else {
			r.res.done++
			r.prompt += promptTokens
			r.ttfts = append(r.ttfts, ttft.Seconds()**prefixScale)
			r.prefills = append(r.prefills, (pxTTFT + time.Duration(promptTokens-cached)*pxPrefill).Seconds())
			u.msgs = append(req.Messages, chatMessage{"assistant", answer})
			if promptTokens+2*pxUserTurn+pxOutputTokens > pxMaxHistory {
				u.msgs = nil // a new conversation
			}
		}
		if len(r.backlog) > 0 && !r.closed {
			next := r.backlog[0]
			r.backlog = slices.Delete(r.backlog, 0, 1)
			r.sendLocked(u, next)
		}
	})
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
