package fleet

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/kvevents"
	"github.com/maitred-dev/maitred/prefixindex"
)

// Index is the model's prefix-cache index (routing: precise), nil when
// the model routes otherwise. It is replaced (a new, empty one) when a
// reload changes its block size or cap.
func (m *Model) Index() *prefixindex.Index { return m.index.Load() }

// PreciseRouting is the model's precise_routing with its defaults (the
// zero value when routing is not precise).
func (m *Model) PreciseRouting() config.PreciseRoutingConfig {
	if p := m.precise.Load(); p != nil {
		return *p
	}
	return config.PreciseRoutingConfig{}
}

// setRoutingLocked puts mc's routing in force for m (Apply).
func (m *Model) setRoutingLocked(mc *config.ModelConfig, now func() time.Time) {
	if mc.Routing != config.RoutingPrecise {
		m.index.Store(nil)
		m.precise.Store(nil)
		return
	}
	pc := mc.PreciseOrDefault()
	old := m.precise.Load()
	if x := m.index.Load(); x == nil || old == nil || old.BlockSize != pc.BlockSize || old.MaxBlocks != pc.MaxBlocks {
		m.index.Store(prefixindex.New(pc.BlockSize, pc.MaxBlocks, now))
	}
	m.precise.Store(&pc)
}

// KVEvents is the backend's kv_events (nil: none).
func (b *Backend) KVEvents() *config.KVEventsConfig {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kvEvents
}

func sameEvents(a, b *config.KVEventsConfig) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}

// RunEvents follows the KV-cache events of every backend that publishes
// them (kv_events) of every model routed by them (routing: precise), into
// the model's index, until ctx is done: one subscriber per data-parallel
// rank, started when the backend joins, stopped when it leaves (its
// blocks dropped from the index), restarted when a reload changes its
// kv_events or the model's index.
func (f *Fleet) RunEvents(ctx context.Context) {
	f.each(ctx, f.followEvents, nil)
}

func (f *Fleet) followEvents(ctx context.Context, m *Model, b *Backend) {
	host := b.URL.Host
	for {
		f.mu.Lock()
		changed := f.changed
		f.mu.Unlock()
		idx, kc := m.Index(), b.KVEvents()
		stop := func() {}
		if idx != nil && kc.Set() {
			stop = f.subscribe(ctx, m, b, idx, kc)
		}
		for same := true; same; {
			select {
			case <-ctx.Done():
				stop()
				if idx != nil {
					idx.Remove(host)
				}
				return
			case <-changed:
			}
			f.mu.Lock()
			changed = f.changed
			f.mu.Unlock()
			same = m.Index() == idx && sameEvents(b.KVEvents(), kc)
		}
		stop()
		if idx != nil {
			idx.Remove(host)
		}
	}
}

// subscribe starts b's subscribers into idx and returns what stops them.
func (f *Fleet) subscribe(ctx context.Context, m *Model, b *Backend, idx *prefixindex.Index, kc *config.KVEventsConfig) func() {
	host := b.URL.Hostname()
	name := b.URL.Host
	if !idx.Add(name, capacityBlocks(b.LastGauges(), idx.BlockSize()), kc.Ranks()) {
		f.log.Warn("KV events not followed: the model's index tracks 64 backends at most", zap.String("model", m.Name), zap.String("backend", name))
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	sink := idx.Sink(name)
	for r := range kc.Ranks() {
		ep, replay := kc.Endpoints(host, r)
		s := &kvevents.Subscriber{Endpoint: ep, ReplayEndpoint: replay, Topic: kc.Topic, Rank: r, Sink: sink,
			MinBackoff: 100 * time.Millisecond, MaxBackoff: max(f.health.Interval.D(), 100*time.Millisecond)}
		wg.Go(func() { s.Run(ctx) })
	}
	f.log.Info("following KV events", zap.String("model", m.Name), zap.String("backend", name), zap.Int("ranks", kc.Ranks()))
	return func() { cancel(); wg.Wait() }
}

// capacityBlocks is the backend's KV capacity in blocks (0: unknown).
func capacityBlocks(g Gauges, blockSize int) int {
	if g.KVCapacity <= 0 || blockSize <= 0 {
		return 0
	}
	return g.KVCapacity / blockSize
}
