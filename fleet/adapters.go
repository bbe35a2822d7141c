package fleet

import (
	"context"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// adaptersOf picks the LoRA adapters out of a /v1/models listing, sorted
// by name.
func adaptersOf(served map[string]modelCard) []Adapter {
	var out []Adapter
	for id, c := range served {
		if c.Parent != nil && *c.Parent != "" {
			out = append(out, Adapter{Name: id, Root: c.Root})
		}
	}
	slices.SortFunc(out, func(a, b Adapter) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// refreshAdapters lists b's models again (a listing begun at now) and
// records its adapters. A listing that fails keeps the last known
// adapters, and is tried again when the next is due: the health probe,
// not this, decides whether b is up.
func (f *Fleet) refreshAdapters(ctx context.Context, m *Model, b *Backend, now time.Time) {
	pctx, cancel := context.WithTimeout(ctx, f.health.Timeout.D())
	defer cancel()
	served, err := f.listModels(pctx, b)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Debug("listing adapters failed", zap.String("model", m.Name), zap.String("backend", b.URL.String()), zap.Error(err))
		}
		b.mu.Lock()
		b.listedAt = now
		b.mu.Unlock()
		return
	}
	f.setAdapters(m, b, adaptersOf(served), now)
}

// setAdapters records b's adapters, from a listing begun at listed, and
// tells the watchers when they changed. Only b's prober calls it, so
// changes are reported in order.
func (f *Fleet) setAdapters(m *Model, b *Backend, list []Adapter, listed time.Time) {
	b.mu.Lock()
	b.listedAt = listed
	same := slices.Equal(b.adapters, list)
	if !same {
		b.adapters = list
	}
	b.mu.Unlock()
	if same {
		return
	}
	names := make([]string, len(list))
	for i, a := range list {
		names[i] = a.Name
	}
	f.log.Info("backend adapters", zap.String("model", m.Name), zap.String("backend", b.URL.String()), zap.Strings("adapters", names))
	for _, fn := range f.adapterWatchers {
		fn(m, b, list)
	}
}
