package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/prefixindex"
	"github.com/maitred-dev/maitred/tokenize"
)

// cachedCounter is a model's counter through the count cache: chat counts
// reuse what earlier turns of the conversation counted
// (tokenize.CountCache); completions count as the model does. For a
// model routed precisely (keyer set) a chat count also keys the prompt's
// blocks as the model's index does (Count.Keys, the precise ticket's:
// prefix.go), the next turn keying only its new tail.
type cachedCounter struct {
	*tokenize.Model
	cache *tokenize.CountCache
	// keyer keys blocks as the model's index (nil: not routed precisely);
	// base is the model's name: a request naming another is a LoRA
	// adapter's, keyed in its own chain.
	keyer *blockKeyer
	base  string
}

func (c *cachedCounter) CountChat(body *ojson.Value, limit int) (tokenize.Count, error) {
	if c.keyer == nil {
		return c.cache.CountChat(c.Model, body, limit)
	}
	scope := ""
	if v := body.Get("model"); v != nil && v.Kind == ojson.String && v.Str != c.base {
		scope = v.Str
	}
	pk := tokenize.NewPromptKeys()
	cnt, err := c.cache.CountChatKeys(c.Model, body, limit, c.keyer, scope, pk)
	if cnt.Keys == nil {
		pk.Release()
	}
	return cnt, err
}

// blockKeyer is prefixindex's chain of block keys for a block size
// (tokenize.BlockKeyer).
type blockKeyer struct{ size int }

func (k *blockKeyer) BlockSize() int           { return k.size }
func (k *blockKeyer) Root(scope string) uint64 { return uint64(prefixindex.Root(scope)) }
func (k *blockKeyer) Next(parent uint64, ids []int) uint64 {
	return uint64(prefixindex.Next(prefixindex.Key(parent), ids))
}

// newCachedCounter is rt's counter through cache, keying blocks when rt
// routes precisely.
func newCachedCounter(rt *modelRuntime, cache *tokenize.CountCache) *cachedCounter {
	c := &cachedCounter{Model: rt.tok, cache: cache, base: rt.name}
	if idx := rt.fm.Index(); idx != nil {
		c.keyer = &blockKeyer{size: idx.BlockSize()}
	}
	return c
}

var _ admission.Counter = (*cachedCounter)(nil)

// useCountCache builds the count cache (count_cache_bytes; none when 0)
// and exports its metrics. Runtimes get their counter from it
// (counterFor) when they are built, at start and at each reload.
func (g *Gateway) useCountCache(reg prometheus.Registerer) {
	g.countCache = tokenize.NewCountCache(g.cfg.CountCacheBytes)
	if g.countCache != nil {
		reg.MustRegister(countCacheCollector{g.countCache})
	}
}

// counterFor is rt's tokenizer through the count cache; nil when the
// cache is off, rt has no tokenizer, or the cache cannot count for it
// (logged: that model is counted in full at every turn).
func (g *Gateway) counterFor(rt *modelRuntime) admission.Counter {
	if g.countCache == nil || rt.tok == nil {
		return nil
	}
	if err := g.countCache.Register(rt.tok); err != nil {
		g.log.Warn("count cache off for a model: counted in full at every turn", zap.String("model", rt.name), zap.String("reason", err.Error()))
		return nil
	}
	return newCachedCounter(rt, g.countCache)
}

// countCacheCollector exports the count cache's counters and size at
// scrape time.
type countCacheCollector struct{ c *tokenize.CountCache }

var (
	countCacheLookupsDesc = prometheus.NewDesc("maitred_count_cache_lookups_total",
		"Chat counts through the count cache by result: hit (continued a counted text: only what follows its last special-token boundary was tokenized), fallback (diverged from every counted text before its end: tokenized from the last boundary they share), miss (no counted prefix: tokenized in full).",
		[]string{"result"}, nil)
	countCacheBytesDesc   = prometheus.NewDesc("maitred_count_cache_bytes", "Memory accounted to the count cache's boundaries (count_cache_bytes bounds it).", nil, nil)
	countCacheEntriesDesc = prometheus.NewDesc("maitred_count_cache_entries", "Boundaries held by the count cache.", nil, nil)
)

func (cc countCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- countCacheLookupsDesc
	ch <- countCacheBytesDesc
	ch <- countCacheEntriesDesc
}

func (cc countCacheCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.c.Stats()
	ch <- prometheus.MustNewConstMetric(countCacheLookupsDesc, prometheus.CounterValue, float64(st.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(countCacheLookupsDesc, prometheus.CounterValue, float64(st.Fallbacks), "fallback")
	ch <- prometheus.MustNewConstMetric(countCacheLookupsDesc, prometheus.CounterValue, float64(st.Misses), "miss")
	ch <- prometheus.MustNewConstMetric(countCacheBytesDesc, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(countCacheEntriesDesc, prometheus.GaugeValue, float64(st.Entries))
}
