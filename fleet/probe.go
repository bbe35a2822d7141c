package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
)

// probe advances b's state machine by one step:
//
//	loading   --/health 200-->            warming
//	warming   --listed, warm-up, probe--> ready
//	ready     --N failures-->             unhealthy
//	unhealthy --/health 200-->            warming
func (f *Fleet) probe(ctx context.Context, m *Model, b *Backend) {
	if ctx.Err() != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, f.health.Timeout.D())
	ok, reason := f.checkHealth(pctx, b)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: keep the last verdict
	}
	b.mu.Lock()
	from := b.state
	var changed bool
	switch {
	case !ok:
		b.fails++
		switch b.state {
		case Loading:
			changed = b.setLocked(f.now(), Loading, reason)
		case Warming:
			// Lost /health while warming: back to where it came from.
			next := Loading
			if b.warmedBefore() {
				next = Unhealthy
			}
			changed = b.setLocked(f.now(), next, reason)
		case Ready:
			if b.fails >= f.health.UnhealthyThreshold {
				changed = b.setLocked(f.now(), Unhealthy, reason)
			}
		case Unhealthy:
			changed = b.setLocked(f.now(), Unhealthy, reason)
		}
		b.mu.Unlock()
		if changed {
			f.transitioned(m, b, from)
		}
		return
	case b.state == Ready:
		b.fails = 0
		b.mu.Unlock()
		// Adapters are loaded and unloaded at runtime: follow them, at
		// every probe up to the listings' budget (ListEvery).
		if now := f.now(); f.listingDue(b, now) {
			f.refreshAdapters(ctx, m, b, now)
		}
		return
	}
	b.fails = 0
	if b.state != Warming {
		// Loading or unhealthy until now: the backend (re)started, and
		// whatever failed its last warm-up may have been fixed.
		b.warmFails, b.nextWarmup = 0, time.Time{}
		changed = b.setLocked(f.now(), Warming, "warming up")
	}
	// A failed warm-up is retried with backoff: each one is a generation
	// on the backend, and a mismatch does not go away by asking again.
	// Half an interval of slack keeps a due retry from missing its tick.
	wait := !b.nextWarmup.IsZero() && f.now().Add(f.health.Interval.D()/2).Before(b.nextWarmup)
	b.mu.Unlock()
	if changed {
		f.transitioned(m, b, from)
		from = Warming
	}
	if wait {
		return
	}
	state, reason := f.warmUp(ctx, m, b)
	if ctx.Err() != nil {
		return
	}
	now := f.now()
	b.mu.Lock()
	if state == Ready {
		b.warmFails, b.nextWarmup = 0, time.Time{}
	} else {
		b.warmFails++
		b.nextWarmup = now.Add(f.warmupBackoff(b.warmFails))
	}
	changed = b.setLocked(now, state, reason)
	b.mu.Unlock()
	if changed {
		f.transitioned(m, b, from)
	}
}

// warmupBackoff is the wait after the n-th failed warm-up in a row: one
// probe interval, doubling, up to health.warmup_backoff_max.
func (f *Fleet) warmupBackoff(n int) time.Duration {
	d, limit := f.health.Interval.D(), f.health.WarmupBackoffMax.D()
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func (f *Fleet) checkHealth(ctx context.Context, b *Backend) (bool, string) {
	res, err := f.do(ctx, b, http.MethodGet, "/health", nil)
	if err != nil {
		return false, describeDialError(err)
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("/health answered %d", res.StatusCode)
	}
	return true, ""
}

// warmUp runs the checks between warming and ready: the model is listed
// (with a max_model_len agreeing with the config), a short streamed
// generation succeeds (and measures TTFT and TPOT), and the backend's
// /tokenize counts a probe conversation as this gateway does. Each step
// has its own deadline: the listing, /version and the tokenizer probe
// health.timeout each, the generation warmup_timeout per token (see
// warmupGeneration), so a slow generation leaves the probe after it its
// whole time. It returns Ready, or Warming with the reason.
func (f *Fleet) warmUp(ctx context.Context, m *Model, b *Backend) (State, string) {
	b.setMismatch(nil) // found again below if it still holds
	step := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, f.health.Timeout.D())
	}
	lctx, cancel := step()
	listed := f.now()
	served, err := f.listModels(lctx, b)
	cancel()
	if err != nil {
		return Warming, "/v1/models: " + err.Error()
	}
	f.setAdapters(m, b, adaptersOf(served), listed)
	card, ok := served[b.Served]
	if !ok {
		ids := make([]string, 0, len(served))
		for id := range served {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return Warming, fmt.Sprintf("%s: %q not in /v1/models (serves %s)", ReasonModelNotServed, b.Served, strings.Join(ids, ", "))
	}
	b.mu.Lock()
	b.maxModelLen, b.created = card.MaxModelLen, card.Created
	b.mu.Unlock()
	if l := m.ConfigMaxModelLen(); l > 0 && card.MaxModelLen > 0 && card.MaxModelLen != l {
		b.setMismatch(&Mismatch{Check: CheckMaxModelLen, Gateway: l, Backend: card.MaxModelLen})
		return Warming, fmt.Sprintf("%s: backend serves max_model_len %d, config says %d", ReasonMaxModelLen, card.MaxModelLen, l)
	}
	vctx, cancel := step()
	v, err := f.version(vctx, b)
	cancel()
	if err == nil {
		b.mu.Lock()
		b.version = v
		b.mu.Unlock()
	}
	// The warm-up generation: the first real request pays for lazy
	// compilation and allocation; this one does instead. It streams a few
	// tokens so that it also measures the backend's TTFT and TPOT idle,
	// the floor triage judges latency against from the first minute. A
	// backend busy serving others is warm without it (warmup.busy).
	w, err := f.warmupGeneration(ctx, b)
	if err != nil {
		return Warming, ReasonWarmupFailed + ": " + err.Error()
	}
	if w.busy {
		f.log.Info("backend busy serving other requests: taken as warm without a finished warm-up generation (no TTFT/TPOT floor measured)",
			zap.String("model", m.Name), zap.String("backend", b.URL.String()))
	}
	b.mu.Lock()
	b.warmupTime, b.warmupTTFT, b.warmupTPOT, b.warmupBusy = w.total, w.ttft, w.tpot, w.busy
	b.mu.Unlock()
	var mm *Mismatch
	if set := m.settings.Load(); set.counter != nil && set.tokenizerCheck != config.TokenizerOff {
		tctx, cancel := step()
		reason, found := f.tokenizerProbe(tctx, set.counter, b)
		cancel()
		switch {
		case found != nil && set.tokenizerCheck == config.TokenizerWarn:
			found.Accepted = true
			mm = found
			f.log.Warn("tokenizer mismatch accepted (tokenizer_check: warn): prompt counts, context checks and budgets at the door may be off for this backend",
				zap.String("model", m.Name), zap.String("backend", b.URL.String()),
				zap.Int("gateway_tokens", found.Gateway), zap.Int("backend_tokens", found.Backend))
		case found != nil:
			b.setMismatch(found)
			return Warming, reason
		case reason != "":
			return Warming, reason
		}
	}
	b.setMismatch(mm)
	return Ready, ""
}

// tokenizerProbe compares the local count of a probe request with the
// backend's POST /tokenize. A backend without /tokenize (404) passes: there
// is nothing to compare. It returns why the probe did not pass, and the
// mismatch when the counts differ.
func (f *Fleet) tokenizerProbe(ctx context.Context, counter PromptCounter, b *Backend) (string, *Mismatch) {
	chat := map[string]any{"model": b.Served, "messages": []map[string]string{
		{"role": "system", "content": "You are a helpful assistant."},
		{"role": "user", "content": f.health.WarmupPrompt},
	}}
	body, _ := json.Marshal(chat)
	n, exact := counter.CountBody(true, body)
	req := chat
	if !exact {
		// No chat template here: compare the plain tokenizer instead.
		req = map[string]any{"model": b.Served, "prompt": f.health.WarmupPrompt}
		body, _ = json.Marshal(req)
		if n, exact = counter.CountBody(false, body); !exact {
			return "", nil
		}
	}
	status, ans, err := f.postJSON(ctx, b, "/tokenize", req)
	if err != nil {
		return "/tokenize: " + describeDialError(err), nil
	}
	if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
		return "", nil
	}
	if status != http.StatusOK {
		return fmt.Sprintf("/tokenize answered %d: %s", status, snippet(ans)), nil
	}
	var tr struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(ans, &tr); err != nil {
		return "/tokenize: unreadable answer", nil
	}
	if tr.Count != n {
		return fmt.Sprintf("%s: the backend counts the probe conversation as %d tokens, this gateway as %d", ReasonTokenizer, tr.Count, n),
			&Mismatch{Check: CheckTokenizer, Gateway: n, Backend: tr.Count}
	}
	return "", nil
}

// describeDialError turns a transport error into a short reason.
func describeDialError(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
