package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Gauges are a backend's vLLM gauges, read from its /metrics.
type Gauges struct {
	Running, Waiting, KVUsage float64
	Preemptions               float64 // vllm:num_preemptions_total, a counter
	// KVCapacity is num_gpu_blocks x block_size from vllm:cache_config_info
	// (0 when not exported).
	KVCapacity int
	// Info holds the labels of vllm:cache_config_info (block_size,
	// num_gpu_blocks, cache_dtype, ...).
	Info map[string]string
	At   time.Time
}

// Scrape reads b's /metrics once, keeping the series of b's served model.
func (f *Fleet) Scrape(ctx context.Context, b *Backend) (Gauges, error) {
	res, err := f.do(ctx, b, http.MethodGet, "/metrics", nil)
	if err != nil {
		return Gauges{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
		return Gauges{}, fmt.Errorf("/metrics answered %d", res.StatusCode)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return Gauges{}, fmt.Errorf("/metrics: %w", err)
	}
	g := Gauges{At: f.now()}
	sum := func(name string) float64 {
		var v float64
		if fam := fams[name]; fam != nil {
			for _, m := range fam.Metric {
				if !servedBy(m, b.Served) {
					continue
				}
				switch {
				case m.Gauge != nil:
					v += m.Gauge.GetValue()
				case m.Counter != nil:
					v += m.Counter.GetValue()
				case m.Untyped != nil:
					v += m.Untyped.GetValue()
				}
			}
		}
		return v
	}
	g.Running = sum("vllm:num_requests_running")
	g.Waiting = sum("vllm:num_requests_waiting")
	g.KVUsage = sum("vllm:kv_cache_usage_perc")
	g.Preemptions = sum("vllm:num_preemptions_total")
	if fam := fams["vllm:cache_config_info"]; fam != nil && len(fam.Metric) > 0 {
		g.Info = map[string]string{}
		for _, lp := range fam.Metric[0].Label {
			g.Info[lp.GetName()] = lp.GetValue()
		}
		blocks, _ := strconv.Atoi(g.Info["num_gpu_blocks"])
		size, _ := strconv.Atoi(g.Info["block_size"])
		g.KVCapacity = blocks * size
	}
	return g, nil
}

// servedBy keeps series without a model_name label and those of model.
func servedBy(m *dto.Metric, served string) bool {
	for _, lp := range m.Label {
		if lp.GetName() == "model_name" {
			return lp.GetValue() == served
		}
	}
	return true
}

// RunScraper scrapes every ready backend every interval until ctx is done,
// passing each result (or the failure) to fn. Gauges go stale on their own
// when scrapes fail; fn decides what stale means.
func (f *Fleet) RunScraper(ctx context.Context, interval time.Duration, fn func(m *Model, b *Backend, g Gauges, err error)) {
	var wg sync.WaitGroup
	for _, m := range f.models {
		for _, b := range m.Backends {
			wg.Go(func() {
				t := time.NewTicker(interval)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
					if !b.Ready() {
						continue
					}
					sctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
					g, err := f.Scrape(sctx, b)
					cancel()
					if ctx.Err() != nil {
						return
					}
					if err == nil {
						b.mu.Lock()
						b.gauges = g
						b.mu.Unlock()
					}
					fn(m, b, g, err)
				}
			})
		}
	}
	wg.Wait()
}

// LastGauges returns the last successful scrape.
func (b *Backend) LastGauges() Gauges {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gauges
}
