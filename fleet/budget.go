package fleet

import (
	"time"

	"github.com/maitred-dev/maitred/config"
)

// A fleet's requests to its backends are bounded a second, whatever its
// size (issue 30: 512 backends at the default intervals took 3,072
// requests and a fifth of a core a second). Past a budget, each backend
// is asked less often: its interval grows to n / budget, n the fleet's
// backends (every model's, draining ones aside).
// Below it, intervals are the configured ones.
const (
	// AutoScrapeBackends: scrape_budget auto scrapes this many backends
	// every scrape_interval (256 scrapes a second at 250ms).
	AutoScrapeBackends = 64
	// AutoHealthBackends: health.budget auto probes this many backends
	// every health.interval (128 probes a second at 1s).
	AutoHealthBackends = 128
	// ListingShare: the fleet's adapter listings a second are the health
	// budget divided by this (64 a second at the default).
	ListingShare = 2
)

// countLocked is the number of backends of every model that are not
// draining (a draining backend is neither probed nor scraped).
func (f *Fleet) countLocked() int {
	n := 0
	for _, m := range f.models {
		for _, b := range m.Backends() {
			if !b.Draining() {
				n++
			}
		}
	}
	return n
}

// ScrapeEvery is the interval each backend is scraped at when the
// configured one is interval: interval, or n / scrape_budget past it.
func (f *Fleet) ScrapeEvery(interval time.Duration) time.Duration {
	return config.Stretch(interval, int(f.size.Load()), f.scrapeBudget.PerSecond(AutoScrapeBackends, interval))
}

// ProbeEvery is the interval each backend is probed at: health.interval,
// or n / health.budget past it.
func (f *Fleet) ProbeEvery() time.Duration {
	iv := f.health.Interval.D()
	return config.Stretch(iv, int(f.size.Load()), f.health.Budget.PerSecond(AutoHealthBackends, iv))
}

// ListEvery is the interval a ready backend's adapters are listed at:
// every probe up to the listings' share of the health budget, n / (budget
// / ListingShare) past it. An adapter loaded at runtime is found within
// ListEvery plus half a probe interval (listAdapters).
func (f *Fleet) ListEvery() time.Duration {
	iv := f.health.Interval.D()
	return max(f.ProbeEvery(), config.Stretch(iv, int(f.size.Load()), f.health.Budget.PerSecond(AutoHealthBackends, iv)/ListingShare))
}

// listingDue reports whether a ready backend's probe at now lists its
// adapters: at every probe while ListEvery is the probe interval, else
// once ListEvery has passed since the last listing, less half a probe
// interval (a listing due between two probes goes with the nearer).
func (f *Fleet) listingDue(b *Backend, now time.Time) bool {
	probe, list := f.ProbeEvery(), f.ListEvery()
	if list <= probe {
		return true
	}
	b.mu.Lock()
	last := b.listedAt
	b.mu.Unlock()
	return !now.Before(last.Add(list - probe/2))
}
