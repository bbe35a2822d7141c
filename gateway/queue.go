package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
)

// PriorityHeader names the request's priority class.
const PriorityHeader = "X-Maitred-Priority"

// poolEvent logs a pool's ejection events and tells triage at once, so
// that an ejection is never silent.
func (g *Gateway) poolEvent(rt *modelRuntime, e admission.Event) {
	fields := []zap.Field{zap.String("model", rt.name), zap.String("backend", e.Slot),
		zap.Int("ejected_backends", e.Ejected), zap.Int("ready_backends", e.Ready)}
	switch e.Kind {
	case admission.Ejected:
		g.log.Warn("backend ejected after consecutive failures", append(fields,
			zap.Int("failures", e.Failures), zap.Duration("eject_for", g.conf().EjectFor.D()), zap.Time("until", e.Until))...)
	case admission.EjectionEnded:
		g.log.Info("backend ejection ended", append(fields, zap.String("reason", e.Reason))...)
	case admission.EjectionHeld:
		g.log.Warn("backend not ejected: max_ejection_percent reached or no other ready backend left in rotation",
			append(fields, zap.Int("failures", e.Failures), zap.Int("max_ejection_percent", g.conf().MaxEjectionPercent))...)
	case admission.GaugesChanged:
		lvl := zap.InfoLevel
		if e.Gauges == admission.GaugesUnavailable {
			lvl = zap.WarnLevel
		}
		if ce := g.log.Check(lvl, "backend gauges "+e.Gauges.String()); ce != nil {
			ce.Write(append(fields, zap.String("reason", e.Reason))...)
		}
	}
	if b := rt.backend(e.Slot); b != nil {
		g.sampleBackend(rt, b, nil)
	}
}

// onMembers gives a model's pool the fleet's backends now: one joined,
// was forgotten, or its limits changed. The fleet calls it under its lock.
func (g *Gateway) onMembers(m *fleet.Model) {
	if rt, ok := g.live().byName[m.Name]; ok {
		rt.syncSlots()
	}
}

// leased reports whether the pool has leases out on draining backend b:
// requests granted to it before it drained, still running.
func (g *Gateway) leased(m *fleet.Model, b *fleet.Backend) bool {
	rt, ok := g.live().byName[m.Name]
	return ok && !rt.pool.Idle(b.URL.Host)
}

// ObserveScrape feeds a backend's scraped gauges, or the scrape's failure,
// to its model's pool, and its state to triage.
func (g *Gateway) ObserveScrape(m *fleet.Model, b *fleet.Backend, gs fleet.Gauges, err error) {
	rt, ok := g.live().byName[m.Name]
	if !ok {
		return
	}
	if errors.Is(err, fleet.ErrNotReady) {
		g.sampleBackend(rt, b, nil)
		return
	}
	i := b.URL.Host
	if err != nil {
		// The last gauges age and turn stale; failures that persist
		// turn them unavailable (see admission.Pool.ScrapeFailed).
		var se *fleet.ScrapeError
		rt.pool.ScrapeFailed(i, errors.As(err, &se) && se.Answered, err.Error())
		g.sampleBackend(rt, b, nil)
		return
	}
	rt.pool.SetGauges(i, admission.Gauges{Waiting: gs.Waiting, Running: gs.Running, KVUsage: gs.KVUsage, KVCapacity: gs.KVCapacity, At: gs.At, Every: gs.Every})
	g.sampleBackend(rt, b, &gs)
}

// class maps the priority header to a class index. A keyed request's
// class is its key's; the header may lower it (a later class), never
// raise it.
func (g *Gateway) class(r *http.Request, k *apiKey) (int, string) {
	v := strings.TrimSpace(r.Header.Get(PriorityHeader))
	for i, c := range g.conf().PriorityClasses {
		if c == v && (k == nil || i >= k.class) {
			return i, c
		}
	}
	if k != nil {
		return k.class, k.className
	}
	for i, c := range g.conf().PriorityClasses {
		if c == g.conf().DefaultPriority {
			return i, c
		}
	}
	return 0, g.conf().PriorityClasses[0]
}

// ticket sizes a request's claim on a backend's token budget: its prompt
// plus n times its output budget, for each prompt of a batch (vLLM runs a
// list prompt as that many requests; PromptTokens is already their sum).
// A pooling request generates nothing: its claim is its inputs alone.
// An uncounted prompt is estimated at four bytes a token, for the budget
// only; it is never refused on that guess. The claim saturates at
// maxTicket, beyond any budget, so the arithmetic cannot overflow.
func ticket(rt *modelRuntime, ep admission.Endpoint, dec admission.Decision, bodyLen int, class int) admission.Ticket {
	out := dec.MaxTokens
	if out == 0 && ep.Generates() {
		out = rt.expectedOutput // a pooling request generates nothing
	}
	// Only: a LoRA adapter's request may go only to the backends that have it loaded.
	t := admission.Ticket{Class: class, Exact: dec.Uncounted == admission.Counted, Only: dec.Only}
	prompt := dec.PromptTokens
	if !t.Exact {
		prompt = bodyLen / 4
		if dec.PromptEstimate > 0 {
			prompt = dec.PromptEstimate // an input that is not text (audio)
		}
	}
	t.Tokens = min(prompt+satMul(satMul(max(dec.Prompts, 1), max(dec.N, 1)), out), maxTicket)
	t.Prompt = min(prompt, maxTicket) // charged to its flow under fairness tokens
	return t
}

// maxTicket caps a reservation: more tokens than any KV cache holds, small
// enough that adding up reservations cannot overflow.
const maxTicket = 1 << 40

// satMul is a*b for non-negative operands, saturating at maxTicket.
func satMul(a, b int) int {
	if a != 0 && b > maxTicket/a {
		return maxTicket
	}
	return a * b
}

// A request that waits for a backend parks its handler goroutine in the
// pool's Acquire, with every frame above it on the goroutine's stack:
// net/http's (1.2 KiB), the edge's and the pipeline's. The first wait is
// the pipeline's own (waitTurn), just under the handler's frames, rather
// than under queueAndForward and granted (0.6 KiB more), so that with
// the runtime's own calls under it (the queue's timer, an allocation's
// slow path, the select it parks in) the stack of a waiting request stays
// within the 4 KiB a goroutine starts with, with a traced wait's frame
// too (acquireTraced; TestWaitingHandlerParksOnSmallStack,
// TestTracedWaitingHandlerParksOnSmallStack).
// A try after a failed attempt waits again under granted (acquire).

// waitTurn waits in the model's queue for the request's first grant
// (x.q.lease, taken by the first attempt) or returns the request's answer
// when it is refused.
//
//go:noinline
func (g *Gateway) waitTurn(r *http.Request, x *exchange) error {
	lease, o := g.acquire(r, x)
	if o != admission.Admitted {
		return g.turnRefused(x, o)
	}
	x.q.lease = lease
	return nil
}

// turnRefused is queueRefused for waitTurn, a call of its own: the
// ticket it copies is not on the stack the request waits on.
//
//go:noinline
func (g *Gateway) turnRefused(x *exchange, o admission.Outcome) error {
	return g.queueRefused(x.rt, o, x.q.t)
}

// acquire is a wait in the model's queue for a backend with room for x's
// ticket, or the first wait's grant when waitTurn has one that no
// attempt took yet.
func (g *Gateway) acquire(r *http.Request, x *exchange) (*admission.Lease, admission.Outcome) {
	if l := x.q.lease; l != nil {
		x.q.lease = nil
		return l, admission.Admitted
	}
	if x.tr.on() {
		return g.acquireTraced(r, x)
	}
	return x.rt.pool.AcquireTicket(r.Context(), &x.q.t)
}

// acquireTraced is acquire's wait, traced as the queue's span: a call of
// its own, whose frame an untraced wait does not carry.
//
//go:noinline
func (g *Gateway) acquireTraced(r *http.Request, x *exchange) (*admission.Lease, admission.Outcome) {
	queuedAt := time.Now()
	lease, o := x.rt.pool.AcquireTicket(r.Context(), &x.q.t)
	g.tr.queued(x, queuedAt, o, lease)
	return lease, o
}

// queueRefused counts a pool outcome that is not Admitted in
// maitred_admission_total, under its failure's code, and returns the
// request's answer (queueError).
func (g *Gateway) queueRefused(rt *modelRuntime, o admission.Outcome, t admission.Ticket) error {
	rt.metrics.admissions.WithLabelValues(queueLabel(o)).Inc()
	return g.queueError(rt, o, t)
}

// queueError renders a pool outcome that is not Admitted: its row of the
// failure table (queueFailure), with the queue's numbers in its message.
func (g *Gateway) queueError(rt *modelRuntime, o admission.Outcome, t admission.Ticket) error {
	p := rt.pool
	w := p.Advice()
	var e *Error
	switch f := queueFailure(o); f {
	case failQueueFull:
		e = f.err(fmt.Sprintf("Model %q is at capacity and its queue is full (%d waiting); expected wait %s. Retry after %d s.",
			rt.name, w.Depth, w.Expected.Round(time.Millisecond), retrySeconds(w.Expected)), nil)
		e.RetryAfter = w.Expected
	case failQueueTimeout:
		e = f.err(fmt.Sprintf("The request waited %s for a backend of model %q without one freeing up, %s (%d still waiting; expected wait %s).",
			rt.queueTimeout, rt.name, p.Blocked(t), w.Depth, w.Expected.Round(time.Millisecond)), nil)
		e.RetryAfter = w.Expected
	case failExceedsKV:
		e = f.err(fmt.Sprintf("The request needs %d tokens of KV cache (prompt plus output budget), more than any backend of model %q holds; it can never run. Lower max_tokens or n.", t.Tokens, rt.name), nil)
		e.Param = "max_tokens"
	case failNotReady:
		return g.notReady(rt)
	case failModelRemoved:
		// A reload removed the model while the request waited: the answer
		// a request naming it gets from now on.
		e = rejection(admission.UnknownModelRejection(rt.name, nil))
		e.Outcome, e.Layer = f.code, f.layer
		e.Message = fmt.Sprintf("The model %q was removed from the gateway's configuration while the request waited for a backend.", rt.name)
	case failShuttingDown:
		e = f.err("The gateway is shutting down; retry on another instance.", nil)
		e.RetryAfter = time.Second
	case failClientGone:
		return errClientGoneQueued
	case failStoreDown:
		e = f.err("The shared store of this gateway's replicas cannot be reached, and on_store_error is reject: no backend can be confirmed for the request. Retry later.", nil)
		e.RetryAfter = g.cfg.Store.Heartbeat.D()
	default:
		return fmt.Errorf("unexpected queue outcome %s", o)
	}
	return e
}

func (g *Gateway) notReady(rt *modelRuntime) *Error {
	var states []string
	for _, b := range rt.fm.Backends() {
		s := b.Status()
		st := b.URL.Host + " " + s.State.String()
		if s.Reason != "" {
			st += " (" + s.Reason + ")"
		}
		states = append(states, st)
	}
	e := failNotReady.err(fmt.Sprintf("Model %q has no ready backend: %s.", rt.name, strings.Join(states, "; ")), nil)
	e.RetryAfter = g.conf().Health.Interval.D()
	return e
}
