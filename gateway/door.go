package gateway

import (
	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
	"github.com/maitred-dev/maitred/triage"
)

// rejection renders the door's verdict as the gateway's error.
func rejection(r *admission.Rejection) *Error {
	e := &Error{Status: r.Status, Type: typeInvalidRequest, Code: r.Code, Param: r.Param, Message: r.Message,
		Outcome: r.Reason.String(), Layer: triage.LayerDoor}
	if ci := r.Context; ci != nil {
		e.Context = &contextFields{PromptTokens: ci.PromptTokens, MaxModelLen: ci.MaxModelLen, PromptTokensExact: ci.PromptExact}
		if ci.MaxTokens > 0 {
			mt := ci.MaxTokens
			e.Context.MaxTokens = &mt
		}
	}
	return e
}

// PromptCounters adapts tokenizers to the fleet's warm-up tokenizer probe.
func PromptCounters(toks map[string]*tokenize.Model) map[string]fleet.PromptCounter {
	out := make(map[string]fleet.PromptCounter, len(toks))
	for name, m := range toks {
		if m != nil {
			out[name] = probeCounter{m}
		}
	}
	return out
}

type probeCounter struct{ m *tokenize.Model }

func (p probeCounter) CountBody(chat bool, body []byte) (int, bool) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return 0, false
	}
	var c tokenize.Count
	if chat {
		c, err = p.m.CountChat(v, 0)
	} else {
		c, err = p.m.CountCompletion(v, 0)
	}
	return c.Tokens, err == nil && c.Exact
}

// decided resolves the door's decision to its model's runtime, once, and
// records it (and the adapter, for a LoRA request) on the exchange.
func (g *Gateway) decided(x *exchange, dec admission.Decision) *modelRuntime {
	rt := runtimeOf(dec.Ref)
	x.setModel(rt, dec.Model, dec.Only)
	return rt
}

// refused records the model a refused request named, when it is a
// configured one (so the refusal is labelled by it), and returns the
// refusal as the gateway's *Error.
func (g *Gateway) refused(x *exchange, rej *admission.Rejection) *Error {
	if rej.Model != "" {
		x.rt = runtimeOf(rej.Ref)
	}
	return rejection(rej)
}

// A request that will wait in a queue parks its handler goroutine there
// with whatever stack that goroutine has grown to, and the door's render
// and count (the template evaluator, the tokenizer) are the deepest work a
// request does: on the handler's own stack they grew it to 16-32 KiB, kept
// while it waits (the runtime halves a parked stack only at a collection,
// and only while under a quarter of it is in use). So while requests are
// waiting for a backend (queued), a request's door runs on a goroutine of
// its own (checkAside), whose stack goes when it returns, and the handler
// that parks keeps the few KiB its own frames need. With nobody waiting
// the door runs inline: a request that will not wait pays nothing (a
// handoff costs a goroutine and a channel, ~1-2 µs).

// checkAside is check, run on a goroutine of its own while requests are
// queued (see above). A panic in the door is raised again on the
// handler's goroutine, where serveIn recovers it (recovered) as from an inline door.
func (g *Gateway) checkAside(ep admission.Endpoint, body []byte, x *exchange) (admission.Decision, *admission.Rejection, *keyCatalog) {
	if g.queued.Load() <= 0 {
		return g.check(ep, body, x)
	}
	return g.checkOnGoroutine(ep, body, x)
}

// checkOnGoroutine is checkAside's handoff, a function of its own: the
// results the goroutine writes live on the heap, and an inline door
// must not pay for that.
func (g *Gateway) checkOnGoroutine(ep admission.Endpoint, body []byte, x *exchange) (dec admission.Decision, rej *admission.Rejection, kc *keyCatalog) {
	var panicked any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		dec, rej, kc = g.check(ep, body, x)
	}()
	<-done
	if panicked != nil {
		panic(panicked)
	}
	return dec, rej, kc
}
