package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/quota"
	"github.com/maitred-dev/maitred/triage"
)

// A keyed request's limits (package quota holds the counters): after the
// door's count, the request reserves its tokens (quotaAsk: prompt plus
// requested output), one request and one concurrency slot, before it
// queues; when it ends it settles with its real usage, so what it did not
// use goes back to the key at once. A request that never reached a
// backend (refused or timed out in the queue, its client gone while it
// waited) settles with 0.

// hasLimits reports whether the key has any limit at all (else nothing is
// reserved and no header is sent).
func hasLimits(l quota.Limits) bool {
	return l.RequestsPerMinute > 0 || l.TokensPerMinute > 0 || l.TokensPerDay > 0 || l.MaxConcurrent > 0
}

// reserve takes the request's quota under its key, or returns its 429.
// On success the x-ratelimit-* headers of the answer are set from the
// reservation and x.res holds it; the caller settles it (settle) when the
// request ends.
func (g *Gateway) reserve(w http.ResponseWriter, x *exchange, ep admission.Endpoint, dec admission.Decision, bodyLen int) error {
	k := x.key
	if !hasLimits(k.limits) {
		return nil
	}
	ask := quotaAsk(x.rt, ep, dec, bodyLen)
	x.reserved = ask
	return g.take(w, x, k.limits, ask)
}

// reserveLocal takes a keyed local request's hold (tokenizer endpoints,
// render, count_tokens, /v1/models, /version, Responses by id): one
// request against requests_per_minute and one concurrency slot against
// max_concurrent, before its body is read. It asks for no tokens and is
// not held to the token limits: it generates none, and its work is
// bounded by the local-work gate (localwork.go) instead. The caller
// settles x.res when the request ends (with 0 tokens).
func (g *Gateway) reserveLocal(w http.ResponseWriter, x *exchange) error {
	lim := x.key.limits
	lim.TokensPerMinute, lim.TokensPerDay = 0, 0
	if lim.RequestsPerMinute == 0 && lim.MaxConcurrent == 0 {
		return nil
	}
	if err := g.take(w, x, lim, 0); err != nil {
		if x.key.perMinute {
			rateHeaders(w.Header(), g.quota.Status(x.key.name, x.key.limits))
		}
		return err
	}
	// The answer reports the key's token window too, as every answer to
	// the key does.
	if x.key.perMinute {
		rateHeaders(w.Header(), g.quota.Status(x.key.name, x.key.limits))
	}
	return nil
}

// take reserves ask tokens, one request and one concurrency slot under
// lim for x's key, or returns the 429 (or the store's 503).
func (g *Gateway) take(w http.ResponseWriter, x *exchange, lim quota.Limits, ask int64) error {
	k := x.key
	res, err := g.quota.Reserve(x.clientCtx, k.name, lim, ask)
	if err != nil {
		d, ok := err.(*quota.Denied)
		switch {
		case ok:
		case x.clientCtx.Err() != nil:
			return errClientGone
		case errors.Is(err, admission.ErrStoreDown):
			// The replicas' shared store is down and on_store_error is
			// reject: the key's limits cannot be checked.
			e := failStoreDown.err("The shared store of this gateway's replicas cannot be reached, and on_store_error is reject: the API key's limits cannot be checked. Retry later.", err)
			e.Layer, e.RetryAfter = triage.LayerDoor, g.cfg.Store.Heartbeat.D() // before the queue
			return e
		default:
			e := failBusy.err("The API key's limits cannot be checked right now; retry shortly.", err)
			e.RetryAfter = time.Second
			return e
		}
		rateHeaders(w.Header(), d.Status)
		x.rateSet = true
		k.metrics().rateLimited.WithLabelValues(string(d.Kind)).Inc()
		return rateLimited(w, d)
	}
	x.res = res
	rateHeaders(w.Header(), res.Status())
	x.rateSet = true
	return nil
}

// settle ends a keyed request: its reservation, with the tokens it
// really used (exchange.used: none when it never reached a backend, else
// what its answer reported or the usage meter counted), or, when that
// cannot be known (no answer came, a 5xx), keeping what was reserved; and
// its tokens in its key's metrics.
func (g *Gateway) settle(x *exchange) {
	used, known := x.used()
	if !known {
		used = -1
	}
	if x.res != nil {
		x.res.Settle(used)
	}
	if !known || used <= 0 {
		return
	}
	// The door's exact prompt count splits the usage; without one the
	// split is not known.
	tokens := x.key.metrics().tokens
	if p := int64(x.promptTokens); x.uncounted == "" && p > 0 && p <= used {
		tokens.WithLabelValues("prompt").Add(float64(p))
		tokens.WithLabelValues("completion").Add(float64(used - p))
		return
	}
	tokens.WithLabelValues("prompt_and_completion").Add(float64(used))
}

// rateLimited is the 429 of a denied reservation, in OpenAI's words
// (code rate_limit_exceeded, type requests or tokens; Anthropic's
// envelope makes it rate_limit_error). Its message names the limit, its
// value, what is in use and what was asked. Retry-After (whole seconds,
// rounded up) is when the ask fits if nothing else arrives; a request that
// can never fit gets none, and x-should-retry: false, which OpenAI's and
// Anthropic's SDKs obey.
func rateLimited(w http.ResponseWriter, d *quota.Denied) *Error {
	typ := "tokens"
	if d.Kind == quota.Requests || d.Kind == quota.Concurrent {
		typ = "requests"
	}
	msg := d.Error()
	msg = strings.ToUpper(msg[:1]) + msg[1:] + "."
	e := &Error{Status: http.StatusTooManyRequests, Type: typ, Code: codeRateLimited, Outcome: outcomeRateLimited,
		Layer: triage.LayerDoor, Message: msg, RetryAfter: d.RetryAfter}
	if d.Never {
		e.RetryAfter = 0
		w.Header().Set("X-Should-Retry", "false")
	}
	return e
}

// rateHeaders sets OpenAI's x-ratelimit-* headers from a key's status,
// for the per-minute limits the key has.
// The six values are written into one string and one slice (two
// allocations), as this runs for every keyed request.
func rateHeaders(h http.Header, st quota.Status) {
	var buf [128]byte
	b := buf[:0]
	var ends [6]int
	b = strconv.AppendInt(b, st.LimitRequests, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, st.RemainingRequests, 10)
	ends[1] = len(b)
	b = append(b, resetString(st.ResetRequests)...)
	ends[2] = len(b)
	b = strconv.AppendInt(b, st.LimitTokens, 10)
	ends[3] = len(b)
	b = strconv.AppendInt(b, st.RemainingTokens, 10)
	ends[4] = len(b)
	b = append(b, resetString(st.ResetTokens)...)
	ends[5] = len(b)
	s := string(b)
	var vals [6]string
	start := 0
	for i, e := range ends {
		vals[i], start = s[start:e], e
	}
	v := vals[:]
	if st.LimitRequests > 0 {
		h["X-Ratelimit-Limit-Requests"] = v[0:1:1]
		h["X-Ratelimit-Remaining-Requests"] = v[1:2:2]
		h["X-Ratelimit-Reset-Requests"] = v[2:3:3]
	}
	if st.LimitTokens > 0 {
		h["X-Ratelimit-Limit-Tokens"] = v[3:4:4]
		h["X-Ratelimit-Remaining-Tokens"] = v[4:5:5]
		h["X-Ratelimit-Reset-Tokens"] = v[5:6:6]
	}
}

// resetString writes a reset time as OpenAI does ("1s", "6m0s", "20ms"):
// Go's duration syntax, rounded up to the millisecond under a second and
// to the second above, so that a client waiting that long finds the limit
// reset.
func resetString(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) + "s"
	}
	return ((d + time.Second - 1) / time.Second * time.Second).String()
}

// quotaAsk is what a request reserves against its key's token limits:
// its prompt plus the output it may generate.
//
//   - A counted request: its exact prompt P plus n x max_tokens for each
//     prompt; without max_tokens, what vLLM would allow, max_model_len − P
//     per prompt and choice. A pooling request generates nothing: P.
//   - A request the door could not count exactly: an upper bound. vLLM runs
//     a generation only when prompt + max_tokens fits max_model_len (L),
//     so each prompt needs at most L + (n−1) x max_tokens, or n x L without
//     max_tokens. A pooling input is at most its body's bytes (no
//     tokenizer makes more tokens than bytes of text, special tokens
//     aside). An audio request's input is no text: at most L when known.
//   - Where L is unknown (no config, no backend report yet) the output
//     budget without max_tokens is the model's expected_output_tokens and
//     an uncounted prompt its body's bytes: estimates, corrected when the
//     request settles with its real usage.
//
// The ask saturates at maxTicket.
func quotaAsk(rt *modelRuntime, ep admission.Endpoint, dec admission.Decision, bodyLen int) int64 {
	L := rt.fm.MaxModelLen()
	prompts, n := max(dec.Prompts, 1), max(dec.N, 1)
	counted := dec.Uncounted == admission.Counted
	var ask int
	switch {
	case ep.Form():
		ask = dec.PromptEstimate + dec.MaxTokens
		if L > 0 {
			ask = L
		}
	case !ep.Generates():
		ask = bodyLen
		if counted {
			ask = dec.PromptTokens
		}
	case counted && dec.MaxTokens > 0:
		ask = dec.PromptTokens + satMul(satMul(prompts, n), dec.MaxTokens)
	case counted && L > 0:
		ask = dec.PromptTokens + satMul(n, max(satMul(prompts, L)-dec.PromptTokens, 0))
	case counted:
		ask = dec.PromptTokens + satMul(satMul(prompts, n), rt.expectedOutput)
	case L > 0 && dec.MaxTokens > 0:
		ask = satMul(prompts, L+satMul(n-1, dec.MaxTokens))
	case L > 0:
		ask = satMul(satMul(prompts, n), L)
	default:
		out := dec.MaxTokens
		if out == 0 {
			out = rt.expectedOutput
		}
		ask = bodyLen + satMul(satMul(prompts, n), out)
	}
	return int64(min(ask, maxTicket))
}
