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
