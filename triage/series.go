package triage

import (
	"sort"
	"time"
)

// Series is the window bucket by bucket, oldest first: what the status
// page draws. A value that was not observed in a bucket is absent (its Has
// flag false), never zero.
type Series struct {
	// Start is the start of the oldest bucket; each is Width wide and there
	// are Buckets of them (the last one is the current, partial bucket).
	Start   time.Time     `json:"start"`
	Width   time.Duration `json:"width"`
	Buckets int           `json:"buckets"`
	// Layers are the failure layers in the order of Point.Failures.
	Layers []string      `json:"layers"`
	Models []ModelSeries `json:"models"`
}

// ModelSeries is one model's buckets: its gateway queue depth (the
// highest sampled in each bucket) and its backends.
type ModelSeries struct {
	Model    string          `json:"model"`
	Queue    []Value         `json:"queue"`
	Backends []BackendSeries `json:"backends"`
}

// BackendSeries is one backend's buckets. Backend "" holds the model's
// requests that never reached a backend (refused at the door, failed in
// the queue).
type BackendSeries struct {
	Backend string  `json:"backend"`
	Points  []Point `json:"points"`
}

// Value is a figure of one bucket; Has is false when nothing was observed.
type Value struct {
	V   float64 `json:"v"`
	Has bool    `json:"has"`
}

// Point is one bucket of a backend: request and failure counts (failures
// by layer, in Series.Layers order), latency quantiles in milliseconds, and
// the vLLM gauges (the last sampled value in the bucket).
type Point struct {
	Requests int   `json:"requests"`
	Failures []int `json:"failures"`

	TTFTP50, TTFTP99 Value
	TPOTP50, TPOTP99 Value

	Waiting, Running, KV Value
}

// Series returns the window bucket by bucket. It only reads: buckets that
// have left the window are skipped, not folded (Report does that).
func (e *Engine) Series() Series {
	e.mu.Lock()
	defer e.mu.Unlock()
	nowIdx := e.bucketIdx(e.now())
	lo := nowIdx - numBuckets + 1
	out := Series{Start: time.Unix(0, lo*int64(e.width)), Width: e.width, Buckets: numBuckets, Layers: layerNames[:]}
	models := append([]*model(nil), e.order...)
	sort.Slice(models, func(i, j int) bool { return models[i].name < models[j].name })
	for _, m := range models {
		mser := ModelSeries{Model: m.name, Queue: make([]Value, numBuckets)}
		for i := range m.buckets {
			b := &m.buckets[i]
			if b.used && b.idx >= lo && b.idx <= nowIdx && b.queue.n > 0 {
				mser.Queue[b.idx-lo] = Value{b.queue.max, true}
			}
		}
		sers := append([]*series(nil), m.order...)
		sort.Slice(sers, func(i, j int) bool { return sers[i].name < sers[j].name })
		for _, s := range sers {
			bs := BackendSeries{Backend: s.name, Points: make([]Point, numBuckets)}
			for i := range bs.Points {
				bs.Points[i].Failures = make([]int, numLayers)
			}
			for i := range s.buckets {
				b := &s.buckets[i]
				if !b.used || b.idx < lo || b.idx > nowIdx {
					continue
				}
				p := &bs.Points[b.idx-lo]
				p.Requests = int(b.requests)
				for k := range b.layers {
					p.Failures[k] = int(b.layers[k])
				}
				if b.ttft.n > 0 {
					p.TTFTP50 = Value{ms(b.ttft.quantile(0.5)), true}
					p.TTFTP99 = Value{ms(b.ttft.quantile(0.99)), true}
				}
				if b.tpot.n > 0 {
					p.TPOTP50 = Value{ms(b.tpot.quantile(0.5)), true}
					p.TPOTP99 = Value{ms(b.tpot.quantile(0.99)), true}
				}
				for _, g := range []struct {
					v *Value
					g *gauge
				}{{&p.Waiting, &b.waiting}, {&p.Running, &b.running}, {&p.KV, &b.kv}} {
					if g.g.n > 0 {
						*g.v = Value{g.g.last, true}
					}
				}
			}
			mser.Backends = append(mser.Backends, bs)
		}
		out.Models = append(out.Models, mser)
	}
	return out
}
