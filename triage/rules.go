package triage

// Verdicts, in precedence order (the first that matches is the verdict).
const (
	VerdictCompat      = "compatibility"
	VerdictUnavailable = "backend_unavailable"
	VerdictKV          = "kv_pressure"
	VerdictDecode      = "decode_pressure"
	VerdictPrefill     = "admission_or_prefill_pressure"
	VerdictBoundary    = "boundary"
	VerdictClient      = "client_side"
	VerdictHealthy     = "healthy"
)

// rule is one symptom class: what it names, where it looks, when it
// matches and what to inspect next.
type rule struct {
	verdict string
	// layers are the failure layers whose counts the rule reads (none:
	// it reads the backends' state, latency and gauges).
	layers []Layer
	// backend, for the classes a single backend shows, says whether it
	// shows it (BackendReport.Matches).
	backend func(b *backendWindow, th *Thresholds) bool
	// fires applies the rule to a scope (the fleet or a model): its
	// evidence when it matches.
	fires func(s *snapshot) (evidence, bool)
	next  []string
}

// rules are every symptom class, from most to least dominant. A cause
// earlier in the list explains symptoms later in it: a backend held back
// because it serves other ingredients (tokenizer, template, context length)
// is unavailable for a reason no restart fixes; a dead backend fills
// queues and makes clients give up; a full KV cache preempts, which slows
// decode and grows the waiting queue; slow decode lowers throughput, which
// grows queues. Door rejections and client behaviour say nothing about the
// fleet, so they come last among the failure classes. The list is read
// only.
var rules = []rule{
	{
		verdict: VerdictCompat,
		backend: func(b *backendWindow, _ *Thresholds) bool { return b.incompatible() },
		fires:   compatFires,
		next: []string{
			"the tokenizer folder and chat template this gateway loads (models[].tokenizer, chat_template) against the backend's (vLLM --tokenizer, --chat-template, --revision of the model)",
			"the two counts of the probe conversation (gateway vs backend) in incompatible_backends; POST /tokenize on both with the same body shows where they part",
			"max_model_len in the config against the backend's --max-model-len (GET /v1/models)",
			"a difference that is known and harmless can be accepted with tokenizer_check: warn on the model",
		},
	},
	{
		verdict: VerdictUnavailable,
		layers:  []Layer{LayerUnready, LayerConnect},
		backend: (*backendWindow).unavailable,
		fires:   unavailableFires,
		next: []string{
			"backend logs around the listed 'since' times",
			"GET /health on each listed backend",
			"restarts, OOM kills and scheduling of the backend processes",
		},
	},
	{
		verdict: VerdictKV,
		backend: (*backendWindow).kvPressure,
		fires:   kvFires,
		next: []string{
			"free GPU memory on the affected backends (nvidia-smi)",
			"configured gpu_memory_utilization (and max_model_len, which sizes the worst case)",
			"active sequences (vllm:num_requests_running) against max_num_seqs",
			"context lengths of the running requests (prompt + max_tokens)",
			"allocator and preemption messages in the vLLM logs",
		},
	},
	{
		verdict: VerdictDecode,
		backend: (*backendWindow).decodePressure,
		fires:   decodeFires,
		next: []string{
			"batch size (vllm:num_requests_running) against max_num_seqs",
			"GPU memory bandwidth utilisation",
			"cross-GPU collectives (tensor-parallel interconnect, NCCL)",
			"a noisy neighbour on the same GPU or host",
		},
	},
	{
		verdict: VerdictPrefill,
		layers:  []Layer{LayerQueue, LayerPrefill},
		backend: (*backendWindow).prefillPressure,
		fires:   prefillFires,
		next: []string{
			"gateway queue depth and vLLM waiting queue (vllm:num_requests_waiting)",
			"prompt lengths of recent requests",
			"chunked prefill settings (enable_chunked_prefill, max_num_batched_tokens)",
			"add capacity (replicas) or shed load at the gateway",
		},
	},
	{
		verdict: VerdictBoundary,
		layers:  []Layer{LayerDoor, LayerBackend},
		fires:   boundaryFires,
		next: []string{
			"client payloads, by rejection reason",
			"requests the backend refused itself (backend_rejections, failures_by_reason backend_rejected): the backend's log says why",
			"max_tokens requested against the model's max_model_len",
			"whether a client stopped truncating its history",
		},
	},
	{
		verdict: VerdictClient,
		layers:  []Layer{LayerClient},
		fires:   clientFires,
		next: []string{
			"client network path (latency, bandwidth, proxies in between)",
			"client read loops: is the stream consumed as it arrives?",
			"client timeouts shorter than TTFT plus generation time",
		},
	},
}

// healthyNext is what to do when no rule matches.
var healthyNext = []string{
	"nothing stands out in the window; if users report slowness, compare their timings with the figures here",
}

// Precedence lists the symptom classes from most to least dominant (the
// order of the rules).
func Precedence() []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.verdict
	}
	return out
}

// Next returns what to inspect next for a verdict, per the triage manual.
func Next(verdict string) []string {
	if verdict == VerdictHealthy {
		return append([]string(nil), healthyNext...)
	}
	for _, r := range rules {
		if r.verdict == verdict {
			return append([]string(nil), r.next...)
		}
	}
	return nil
}

// The per-backend predicates.

// incompatible: held back for its ingredients (compatibility, not
// availability): its latest sample says not ready, for a difference not
// accepted.
func (b *backendWindow) incompatible() bool {
	return b.notReadyNow && !b.ready && b.compat != nil && !b.compat.Accepted
}

// unavailable: not ready or ejected now (other than for compatibility), or
// significant failures for want of it.
func (b *backendWindow) unavailable(th *Thresholds) bool {
	connect := b.a.layers[layerConnect] + b.a.layers[layerUnready]
	return (b.notReadyNow && !b.incompatible()) ||
		(connect >= th.MinFailures && float64(connect) >= th.MinFailureShare*float64(b.a.requests))
}

// kvPressure: the KV cache reached full, with preemptions, or with vLLM's
// waiting queue growing while running is not.
func (b *backendWindow) kvPressure(th *Thresholds) bool {
	return b.kv.N > 0 && b.kv.Max >= th.KVFull &&
		((b.preKnown && b.prePerMin > th.PreemptionsPerMin) ||
			(b.waiting.N > 1 && b.waiting.SlopePerMin >= th.GrowthPerMin && b.running.SlopePerMin < th.GrowthPerMin))
}

// decodePressure: TPOT rising.
func (b *backendWindow) decodePressure(*Thresholds) bool { return b.tpot.rising }

// prefillPressure: a queue (the model's gateway queue or vLLM's waiting)
// growing, TTFT rising, TPOT stable.
func (b *backendWindow) prefillPressure(th *Thresholds) bool {
	return (b.model.queueGrowing || b.waitingGrowing(th)) && b.ttft.rising && b.tpotStable
}

// The rules over a scope.

func compatFires(s *snapshot) (evidence, bool) {
	ev := &compatEvidence{Backends: s.nBackends, BackendsReady: s.nReady}
	for _, b := range s.backends {
		if b.name != "" && b.incompatible() {
			ev.Incompatible = append(ev.Incompatible, incompatibleBackend{
				Backend: b.qualified(), Check: b.compat.Check, Gateway: b.compat.Gateway, BackendValue: b.compat.Backend,
				State: b.state, StateReason: b.stateReason, Since: rfc3339(b.stateSince),
			})
		}
	}
	return ev, len(ev.Incompatible) > 0
}

func unavailableFires(s *snapshot) (evidence, bool) {
	unready, connect := s.layers[layerUnready], s.layers[layerConnect]
	ev := &unavailableEvidence{
		Failures: unready + connect, NoReadyBackend: unready, Connect: connect,
		Share: r3(share(unready+connect, s.requests)), Backends: s.nBackends, BackendsReady: s.nReady,
		requests: s.requests,
	}
	downNow := false
	for _, b := range s.backends {
		conn := b.a.layers[layerConnect]
		if b.name == "" || b.incompatible() || !b.unavailable(&s.th) && b.a.notReady == 0 && conn == 0 {
			continue
		}
		downNow = downNow || b.notReadyNow
		ev.Down = append(ev.Down, s.downBackend(b))
	}
	return ev, s.significant(unready+connect) || downNow
}

func kvFires(s *snapshot) (evidence, bool) {
	aff, ok := s.affected((*backendWindow).kvPressure)
	if !ok {
		return nil, false
	}
	return &kvEvidence{figuresOf(aff.backends, nil), aff}, true
}

func decodeFires(s *snapshot) (evidence, bool) {
	aff, ok := s.affected((*backendWindow).decodePressure)
	if !ok {
		return nil, false
	}
	return &decodeEvidence{figuresOf(aff.backends, nil), aff}, true
}

// prefillFires also matches on significant gateway_queue failures (queue
// full or timed out: requests that never reached a backend) or prefill
// failures (timed out before the first token, so no TTFT was measured).
func prefillFires(s *snapshot) (evidence, bool) {
	aff, ok := s.affected((*backendWindow).prefillPressure)
	gq, np := s.layers[layerQueue], s.layers[layerPrefill]
	if !ok && !s.significant(gq) && !s.significant(np) {
		return nil, false
	}
	// The gateway queue figures are those of the affected backends'
	// models, or of the whole scope when no backend is affected enough.
	models := s.models
	if ok {
		models = modelsOf(aff.backends, s.models)
	}
	ev := &prefillEvidence{figures: figuresOf(aff.backends, models), QueueFailures: gq, PrefillFailures: np,
		aff: aff.backends, queues: modelsOf(aff.backends, s.models)}
	if ok {
		ev.AffectedBackends, ev.AffectedShare = aff.AffectedBackends, &aff.AffectedShare
	}
	return ev, true
}

// boundaryFires: requests refused at the door, or by the backend itself
// (its own 4xx: a shape the door does not check).
func boundaryFires(s *snapshot) (evidence, bool) {
	door, backend := s.layers[layerDoor], s.layers[layerBackend]
	failures := s.requests - s.ok
	if !s.significant(door+backend) || share(door+backend, failures) < s.th.DoorShare {
		return nil, false
	}
	return &boundaryEvidence{
		Door: door, Backend: backend, DoorShare: r3(share(door+backend, failures)),
		RejectionRate: r3(share(door+backend, s.requests)), ByReason: s.rejections,
		failures: failures, requests: s.requests,
	}, true
}

// clientFires: clients that left or read too slowly, or requests stalled
// writing to them.
func clientFires(s *snapshot) (evidence, bool) {
	closed := s.layers[layerClient]
	failures := s.requests - s.ok
	left := s.significant(closed) && share(closed, failures) >= s.th.ClientShare
	stalled := s.stalled >= s.th.MinFailures && s.stalledShare() >= s.th.StalledRequestShare
	if !left && !stalled {
		return nil, false
	}
	return &clientEvidence{
		Closed: closed, FailureShare: r3(share(closed, failures)), StallShare: r3(s.stallShare()),
		Stalled: s.stalled, StalledShare: r3(s.stalledShare()),
		left: left, stalledDominate: stalled, failures: failures, requests: s.requests,
	}, true
}
