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
}

// warmupGeneration streams a short completion, as vLLM serves it
// (/v1/completions, stream, max_tokens WarmupTokens, ignore_eos), and
// measures its TTFT and TPOT from the SSE events: a data event whose first
// choice carries text is a token event. An answer that is not an event
// stream (not vLLM, e.g. a proxy that buffers) is accepted as a success
// measured as a whole (no TPOT). Errors say why the warm-up failed: a
// transport error, a status other than 200, an in-band error event, a stream
// cut before [DONE].
func (f *Fleet) warmupGeneration(ctx context.Context, b *Backend) (warmup, error) {
	gen := map[string]any{"model": b.Served, "prompt": f.health.WarmupPrompt,
		"max_tokens": WarmupTokens, "ignore_eos": true, "stream": true}
	body, _ := json.Marshal(gen)
	start := time.Now()
	res, err := f.do(ctx, b, http.MethodPost, "/v1/completions", body)
	if err != nil {
		return warmup{}, errors.New(describeDialError(err))
	}
	defer res.Body.Close()
	rd := io.LimitReader(res.Body, maxWarmupBytes)
	if res.StatusCode != http.StatusOK {
		ans, _ := io.ReadAll(rd)
		return warmup{}, fmt.Errorf("/v1/completions answered %d: %s", res.StatusCode, snippet(ans))
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != "text/event-stream" {
		if _, err := io.Copy(io.Discard, rd); err != nil {
			return warmup{}, errors.New(describeDialError(err))
		}
		d := max(time.Since(start), time.Microsecond)
		return warmup{total: d, ttft: d}, nil
	}
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
			return warmup{}, fmt.Errorf("/v1/completions streamed an unreadable event: %s", snippet(data))
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" {
			return warmup{}, fmt.Errorf("/v1/completions streamed an error: %s", snippet(ev.Error))
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			now := time.Now()
			if tokens == 0 {
				first = now
			}
			last = now
			tokens++
		}
	}
	if err := sc.Err(); err != nil {
		return warmup{}, fmt.Errorf("/v1/completions stream: %s", describeDialError(err))
	}
	if !done {
		return warmup{}, errors.New("/v1/completions stream ended before [DONE]")
	}
	w := warmup{total: max(time.Since(start), time.Microsecond)}
	if tokens > 0 {
		w.ttft = max(first.Sub(start), time.Microsecond)
	} else {
		w.ttft = w.total
	}
	if tokens >= 2 {
		w.tpot = last.Sub(first) / time.Duration(tokens-1)
	}
	return w, nil
}
