package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The fairness scenario's clients: two tenants (flows A and B, each its
// own API key) sending streamed chats through one or more gateways, open
// or closed loop, each request recorded as a fairReq.

// fairLoad is one flow's traffic in a run.
type fairLoad struct {
	flow int
	// conc > 0: that many closed-loop workers, each sending its next
	// request when its last ends; otherwise one request every every.
	conc  int
	every time.Duration
	long  bool
	// from and until bound the flow's sending, as offsets from the run's
	// start (until 0: the run's end).
	from, until time.Duration
}

// fairShape is the requests' shape: A's long ones and B's short ones.
type fairShape struct {
	longOut, shortOut   int // tokens generated (ignore_eos: exactly)
	longBody, shortBody []byte
}

func newFairShape(longOut, shortOut int) fairShape {
	body := func(words, out int) []byte {
		content := strings.TrimSpace(strings.Repeat("please summarise this ledger line ", words/5))
		return fmt.Appendf(nil, `{"model":"demo","messages":[{"role":"user","content":%q}],"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, content, out)
	}
	return fairShape{longOut: longOut, shortOut: shortOut, longBody: body(150, longOut), shortBody: body(10, shortOut)}
}

// fairClient sends the flows' requests with their keys.
type fairClient struct {
	http  *http.Client
	keys  [2]string
	shape fairShape
}

// fairRun is one run's record.
type fairRun struct {
	d    time.Duration
	reqs []fairReq
}

// runFairLoad sends loads through urls (worker i of a closed loop, and the
// k-th request of an open one, to urls[i % len(urls)]) for d, then cancels
// what is still open and returns every request's record.
func (c *fairClient) runFairLoad(urls []string, loads []fairLoad, d time.Duration) fairRun {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	t0 := time.Now()
	var mu sync.Mutex
	var reqs []fairReq
	send := func(l fairLoad, replica int) {
		r := c.do(ctx, t0, urls[replica], l.flow, l.long)
		r.replica = replica
		mu.Lock()
		reqs = append(reqs, r)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, l := range loads {
		until := l.until
		if until == 0 {
			until = d
		}
		live := func() bool { return ctx.Err() == nil && time.Since(t0) < until }
		wait := func(at time.Duration) bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(time.Until(t0.Add(at))):
				return live()
			}
		}
		if l.conc > 0 {
			for i := range l.conc {
				wg.Go(func() {
					if !wait(l.from) {
						return
					}
					for live() {
						send(l, i%len(urls))
					}
				})
			}
			continue
		}
		wg.Go(func() {
			for k := 0; wait(l.from + time.Duration(k)*l.every); k++ {
				wg.Go(func() { send(l, k%len(urls)) })
			}
		})
	}
	wg.Wait()
	return fairRun{d: d, reqs: reqs}
}

// do sends one streamed chat of flow and reads it to its end, recording
// when its headers and each content event came and the usage it reported.
func (c *fairClient) do(ctx context.Context, t0 time.Time, url string, flow int, long bool) (r fairReq) {
	body := c.shape.shortBody
	if long {
		body = c.shape.longBody
	}
	r = fairReq{flow: flow, long: long, sent: time.Since(t0), dispatched: -1}
	defer func() { r.end = time.Since(t0) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.keys[flow])
	res, err := c.http.Do(req)
	if err != nil {
		return r
	}
	defer res.Body.Close()
	r.status = res.StatusCode
	if res.StatusCode != http.StatusOK {
		return r
	}
	timing := res.Header.Get("Server-Timing")
	r.queueMs = queueWait(timing)
	r.dispatched = time.Since(t0) - time.Duration(timingPhase(timing, "backend")*float64(time.Millisecond))
	r.ok = readFairStream(&r, bufio.NewReaderSize(res.Body, 16<<10), t0)
	return r
}

// readFairStream reads an SSE chat stream: the time of each event that
// carries content, and the usage chunk. It reports whether the stream
// ended with [DONE].
func readFairStream(r *fairReq, br *bufio.Reader, t0 time.Time) bool {
	var ev struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false
		}
		data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			return true
		}
		at := time.Since(t0)
		ev.Choices, ev.Usage = ev.Choices[:0], nil
		if json.Unmarshal(data, &ev) != nil {
			continue
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Delta.Content != "" {
			r.events = append(r.events, at)
		}
		if ev.Usage != nil {
			r.prompt, r.completion, r.usage = ev.Usage.Prompt, ev.Usage.Completion, true
		}
	}
}

// timingPhase reads "name;dur=N" (milliseconds) from a Server-Timing
// header; 0 when absent.
func timingPhase(h, name string) float64 {
	for part := range strings.SplitSeq(h, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), name+";dur="); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
