package gateway

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/prefixindex"
)

// Precise routing at the door (docs/routing.md): the request's prompt
// token ids, cut into full blocks and keyed as the model's index keys the
// backends' blocks, are the ticket's PrefixMatcher. The ids are the
// door's exact render tokenized as vLLM will. A chat counted through the
// count cache comes with its keys (countcache.go: computed with the
// count, a later turn keying only its new tail); any other request's
// render is tokenized and keyed here. The buffers (ids and keys) are
// pooled, so a request allocates nothing that grows with its prompt.

var queryPool = sync.Pool{New: func() any { return new(prefixindex.Query) }}

// preciseTicket sets t's prefix matcher when the model routes by its
// backends' KV events and the request's prompt is known exactly (a
// counted chat, Messages or single-string completions request without a
// cache_salt); it returns the query to give back (releaseQuery) once the
// request is done with the queue, nil when none was set.
func preciseTicket(rt *modelRuntime, ep admission.Endpoint, dec admission.Decision, t *admission.Ticket) *prefixindex.Query {
	idx := rt.fm.Index()
	if idx == nil || rt.tok == nil || dec.Uncounted != admission.Counted || dec.PromptTokens <= 0 || dec.Prompts > 1 {
		return nil
	}
	enc := rt.tok.Encoder()
	req, chat := dec.Request, ep.Chat()
	if dec.Chat != nil {
		req, chat = dec.Chat, true
	}
	if req == nil || req.Has("cache_salt") {
		return nil // vLLM's blocks of a salted request are not named by their ids alone
	}
	var text string
	addSpecial := !chat // a completions prompt gets the post-processor's tokens unless told not to
	if v := req.Get("add_special_tokens"); v != nil && v.Kind == ojson.Bool {
		addSpecial = v.Bool
	}
	if chat {
		text = dec.Rendered
	} else if p := req.Get("prompt"); p != nil && p.Kind == ojson.String {
		text = p.Str
	}
	if text == "" {
		return nil
	}
	lora := ""
	if dec.Only != nil {
		lora = dec.Model // a LoRA adapter's blocks are its own chain
	}
	q := queryPool.Get().(*prefixindex.Query)
	q.Index = idx
	tokens := 0
	if pk := dec.PromptKeys; pk != nil && chat && pk.Scope == lora && pk.BlockSize == idx.BlockSize() {
		// Keyed with the count (countcache.go): the render is not
		// tokenized again.
		for _, k := range pk.Keys {
			q.Keys = append(q.Keys, prefixindex.Key(k))
		}
		tokens = pk.Tokens
		pk.Release()
	} else {
		q.IDs = enc.AppendEncode(q.IDs[:0], text, addSpecial)
		q.Keys = prefixindex.AppendKeys(q.Keys[:0], lora, q.IDs, idx.BlockSize())
		tokens = len(q.IDs)
	}
	pr := rt.fm.PreciseRouting()
	t.Prefix, t.PromptTokens = q, tokens
	t.PrefixWeights = admission.PrefixWeights{Cache: pr.CacheWeight, Load: pr.LoadWeight}
	return q
}

// releaseQuery gives q's buffers back (nil: nothing to give). A prompt
// far longer than usual does not keep its buffers.
func releaseQuery(q *prefixindex.Query) {
	if q == nil {
		return
	}
	q.Reset()
	if cap(q.IDs) > 256<<10 {
		q.IDs, q.Keys = nil, nil
	}
	queryPool.Put(q)
}

// kvIndexCollector exports each precise model's index state per backend.
type kvIndexCollector struct{ g *Gateway }

var (
	kvBlocksDesc  = prometheus.NewDesc("maitred_kv_index_blocks", "Blocks of a backend's prefix cache in the model's index (routing: precise).", []string{"model", "backend"}, nil)
	kvLiveDesc    = prometheus.NewDesc("maitred_kv_index_live", "1 while a backend's KV-event streams are in sequence and its index is used for routing.", []string{"model", "backend"}, nil)
	kvEventsDesc  = prometheus.NewDesc("maitred_kv_events_total", "KV-cache events applied to the index, per backend (their rate is events per second).", []string{"model", "backend"}, nil)
	kvGapsDesc    = prometheus.NewDesc("maitred_kv_event_gaps_total", "Gaps in a backend's KV-event sequence.", []string{"model", "backend"}, nil)
	kvReplaysDesc = prometheus.NewDesc("maitred_kv_event_replays_total", "Gaps filled from a backend's replay socket.", []string{"model", "backend"}, nil)
	kvDecodeDesc  = prometheus.NewDesc("maitred_kv_event_decode_errors_total", "KV-event messages that could not be read.", []string{"model", "backend"}, nil)
	kvClearsDesc  = prometheus.NewDesc("maitred_kv_index_clears_total", "Times a backend's index was cleared (AllBlocksCleared, a gap not replayable, a publisher restart, garbage).", []string{"model", "backend"}, nil)
)

func (c kvIndexCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{kvBlocksDesc, kvLiveDesc, kvEventsDesc, kvGapsDesc, kvReplaysDesc, kvDecodeDesc, kvClearsDesc} {
		ch <- d
	}
}

func (c kvIndexCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range c.g.live().models {
		idx := rt.fm.Index()
		if idx == nil {
			continue
		}
		for _, b := range rt.fm.Backends() {
			st, ok := idx.Status(b.URL.Host)
			if !ok {
				continue
			}
			m := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
				ch <- prometheus.MustNewConstMetric(d, t, v, rt.name, b.URL.Host)
			}
			live := 0.0
			if st.State == prefixindex.Live {
				live = 1
			}
			m(kvBlocksDesc, prometheus.GaugeValue, float64(st.Blocks))
			m(kvLiveDesc, prometheus.GaugeValue, live)
			m(kvEventsDesc, prometheus.CounterValue, float64(st.Events))
			m(kvGapsDesc, prometheus.CounterValue, float64(st.Gaps))
			m(kvReplaysDesc, prometheus.CounterValue, float64(st.Replays))
			m(kvDecodeDesc, prometheus.CounterValue, float64(st.DecodeErrors))
			m(kvClearsDesc, prometheus.CounterValue, float64(st.Clears))
		}
	}
}

// kvIndexRecord is a backend's index state in /debug/backends.
type kvIndexRecord struct {
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`
	LastClear string `json:"last_clear,omitempty"`
	Blocks    int    `json:"blocks"`
	Events    uint64 `json:"events"`
	Gaps      uint64 `json:"gaps"`
	Replays   uint64 `json:"replays"`
	Errors    uint64 `json:"decode_errors"`
	Clears    uint64 `json:"clears"`
	Skipped   uint64 `json:"skipped_blocks"`
}

// kvIndexOf is the backend's index record; nil when its model is not
// routed precisely.
func kvIndexOf(rt *modelRuntime, host string) *kvIndexRecord {
	idx := rt.fm.Index()
	if idx == nil {
		return nil
	}
	st, ok := idx.Status(host)
	if !ok {
		return &kvIndexRecord{State: "none", Reason: "the backend has no kv_events"}
	}
	return &kvIndexRecord{State: st.State.String(), Reason: st.Reason, LastClear: st.LastClear, Blocks: st.Blocks, Events: st.Events,
		Gaps: st.Gaps, Replays: st.Replays, Errors: st.DecodeErrors, Clears: st.Clears, Skipped: st.Skipped}
}
