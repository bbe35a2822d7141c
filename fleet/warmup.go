package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync/atomic"
	"time"
)

// WarmupTokens is the number of tokens the warm-up generation asks for
// (with ignore_eos, so that the model cannot stop early): enough inter-token
// gaps to measure TPOT, few enough to cost nothing.
const WarmupTokens = 8

// maxWarmupBytes bounds what is read of the warm-up answer.
const maxWarmupBytes = 1 << 20

// warmup is what the warm-up generation measured.
type warmup struct {
	total time.Duration // request sent -> answer complete
	ttft  time.Duration // request sent -> first token (the whole answer when not streamed)
	tpot  time.Duration // mean gap between token events after the first; 0 with fewer than two
	// busy: the generation was still queued behind other requests while
	// the backend visibly served them (its /metrics: requests waiting,
	// generation tokens rising), so it was given up and the backend taken
	// as warm, unmeasured (ttft and tpot 0).
	busy bool
}

// errWarmupStalled and errWarmupBusy are the causes the warm-up's context
// is cancelled with: no token for warmup_timeout, and a backend found
// busy serving others (not a failure).
var (
	errWarmupStalled = errors.New("no token within warmup_timeout")
	errWarmupBusy    = errors.New("backend busy serving other requests")
)

// warmupGeneration streams a short completion, as vLLM serves it
// (/v1/completions, stream, max_tokens WarmupTokens, ignore_eos), and
// measures its TTFT and TPOT from the SSE events: a data event whose first
// choice carries text is a token event. An answer that is not an event
// stream (not vLLM, e.g. a proxy that buffers) is accepted as a success
// measured as a whole (no TPOT). Errors say why the warm-up failed: a
// transport error, a status other than 200, an in-band error event, a stream
// cut before [DONE], no token for health.warmup_timeout (the wait for the
// first token and each gap after it: a slow backend that keeps producing
// tokens is waited for).
//
// A backend that is saturated by other clients (other replicas of this
// gateway, at peak) queues the warm-up behind them, possibly for longer
// than warmup_timeout: while the generation has no token yet, watchBusy
// reads the backend's /metrics every health.interval, and a backend with
// requests waiting whose generation-token counter rises is serving: it is
// warm (it compiled and allocated for those), so the queued warm-up is
// cancelled and the backend accepted unmeasured (warmup.busy).
func (f *Fleet) warmupGeneration(ctx context.Context, b *Backend) (warmup, error) {
	gen := map[string]any{"model": b.Served, "prompt": f.health.WarmupPrompt,
		"max_tokens": WarmupTokens, "ignore_eos": true, "stream": true}
	body, _ := json.Marshal(gen)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := f.health.WarmupTimeout.D()
	timer := time.AfterFunc(stall, func() { cancel(errWarmupStalled) })
	defer timer.Stop()
	var gotToken atomic.Bool
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if f.watchBusy(ctx, b, &gotToken) {
			cancel(errWarmupBusy)
		}
	}()
	defer func() { cancel(nil); <-watched }()
	start := time.Now()
	// failed turns an error of the exchange into the warm-up's verdict:
	// the watcher's or the stall timer's cause when it cut the exchange.
	failed := func(err error) (warmup, error) {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errWarmupBusy):
			return warmup{total: max(time.Since(start), time.Microsecond), busy: true}, nil
		case errors.Is(cause, errWarmupStalled):
			return warmup{}, fmt.Errorf("/v1/completions: %v", errWarmupStalled)
		}
		return warmup{}, err
	}
	res, err := f.do(ctx, b, http.MethodPost, "/v1/completions", body)
	if err != nil {
		return failed(errors.New(describeDialError(err)))
	}
	defer res.Body.Close()
	rd := io.LimitReader(res.Body, maxWarmupBytes)
	if res.StatusCode != http.StatusOK {
		ans, _ := io.ReadAll(rd)
		return warmup{}, fmt.Errorf("/v1/completions answered %d: %s", res.StatusCode, snippet(ans))
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != "text/event-stream" {
		if _, err := io.Copy(io.Discard, rd); err != nil {
			return failed(errors.New(describeDialError(err)))
		}
		d := max(time.Since(start), time.Microsecond)
		return warmup{total: d, ttft: d}, nil
	}
	w, cut, err := readWarmupStream(rd, start, func(first bool) {
		if first {
			gotToken.Store(true)
		}
		timer.Reset(stall)
	})
	if cut != nil {
		return failed(fmt.Errorf("/v1/completions stream: %s", describeDialError(cut)))
	}
	return w, err
}

// readWarmupStream reads the warm-up's event stream from its start (the
// request sent) to [DONE], timing its token events; onToken hears each
// (first: it is the first). cut is a read error (the stream cut or
// timed out, judged by the caller); err a stream that is not a complete
// warm-up: an unreadable or error event, or no [DONE].
func readWarmupStream(rd io.Reader, start time.Time, onToken func(first bool)) (w warmup, cut, err error) {
	var first, last time.Time
	tokens := 0
	done := false
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 4096), maxWarmupBytes)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue // blank separators, comments, other fields
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var ev struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return warmup{}, nil, fmt.Errorf("/v1/completions streamed an unreadable event: %s", snippet(data))
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" {
			return warmup{}, nil, fmt.Errorf("/v1/completions streamed an error: %s", snippet(ev.Error))
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			now := time.Now()
			if tokens == 0 {
				first = now
			}
			onToken(tokens == 0)
			last = now
			tokens++
		}
	}
	if err := sc.Err(); err != nil {
		return warmup{}, err, nil
	}
	if !done {
		return warmup{}, nil, errors.New("/v1/completions stream ended before [DONE]")
	}
	w = warmup{total: max(time.Since(start), time.Microsecond)}
	if tokens > 0 {
		w.ttft = max(first.Sub(start), time.Microsecond)
	} else {
		w.ttft = w.total
	}
	if tokens >= 2 {
		w.tpot = last.Sub(first) / time.Duration(tokens-1)
	}
	return w, nil, nil
}

// watchBusy reports whether b showed itself busy serving other requests
// while the warm-up generation waited for its first token: two reads of its
// /metrics (the first now, then one every health.interval, each under its
// own health.timeout) with requests waiting at the later one and
// vllm:generation_tokens_total risen between them. It returns false when ctx
// ends or the warm-up got a token (it is then running and waited for). A
// page that cannot be read is skipped: a backend that is not vLLM, or does
// not answer /metrics, is only waited for.
func (f *Fleet) watchBusy(ctx context.Context, b *Backend, gotToken *atomic.Bool) bool {
	tick := time.NewTicker(f.health.Interval.D())
	defer tick.Stop()
	var prev *Gauges
	for {
		if gotToken.Load() {
			return false
		}
		sctx, cancel := context.WithTimeout(ctx, f.health.Timeout.D())
		g, err := f.Scrape(sctx, b)
		cancel()
		if ctx.Err() != nil || gotToken.Load() {
			return false
		}
		if err == nil {
			if prev != nil && g.Waiting > 0 && g.Generated > prev.Generated {
				return true
			}
			prev = &g
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
