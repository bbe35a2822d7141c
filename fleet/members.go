package fleet

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
)

// Membership: which backends a model has.
//
// Each entry of a model's backends list is a source: a url (one backend,
// SourceStatic), or a dns or srv entry (discovery.go), whose addresses are
// its backends. A source sets its members whole (setMembersLocked): an
// address new to the model joins (loading: it takes traffic only once
// warmed up), one the model has keeps its Backend (state, adapters,
// connections), and one no longer listed drains: it takes nothing new, its
// requests finish, and its prober forgets it once it is idle (forget), or
// drain_timeout after it started draining. A backend is the model's only
// once: its host:port names it (the pool's slot, the metrics' backend
// label), so an address listed by two entries is the first's.

// SourceStatic is the Source of a backend given by its url.
const SourceStatic = "static"

const (
	kindStatic = "static"
	kindDNS    = "dns"
	kindSRV    = "srv"
)

// source is one entry of a model's backends list.
type source struct {
	kind string // kindStatic, kindDNS or kindSRV
	// name is the url, the dns name:port or the srv name.
	name string
	cfg  config.BackendConfig
	// key is the backend API key read from api_key_env.
	key string
	// Discovery's state (dns, srv), under Fleet.mu.
	removed  bool // no longer in the config: its resolver stops
	failing  bool // the last lookup failed (logged once per run)
	errors   int64
	lastErr  string
	resolved bool // a lookup succeeded at least once
}

// label is the source as BackendStatus.Source shows it.
func (s *source) label() string {
	if s.kind == kindStatic {
		return SourceStatic
	}
	return s.kind + ":" + s.name
}

func newSource(bc config.BackendConfig) *source {
	s := &source{kind: kindStatic, name: strings.TrimSuffix(bc.URL, "/"), cfg: bc}
	switch {
	case bc.DNS != "":
		s.kind, s.name = kindDNS, bc.DNS
	case bc.SRV != "":
		s.kind, s.name = kindSRV, bc.SRV
	}
	if bc.APIKeyEnv != "" {
		s.key = os.Getenv(bc.APIKeyEnv)
	}
	return s
}

// Apply puts the models and backends of cfg, the fleet's section of a
// reloaded config, in force: a model or entry new to the fleet joins, one
// that stays takes its new settings and keeps its backends and their
// state, and one that left drains (a removed model's backends leave with
// it). Settings of the fleet itself (health, resolver) are the ones it was
// built with: they need a restart. counters are as in New. The config must
// be valid (config.Validate).
func (f *Fleet) Apply(cfg config.FleetConfig, counters map[string]PromptCounter) error {
	// Parse every url first: a config that cannot be applied whole is
	// not applied at all.
	for i, mc := range cfg.Models {
		for j, bc := range mc.Backends {
			if bc.URL == "" {
				continue
			}
			if _, err := url.Parse(strings.TrimSuffix(bc.URL, "/")); err != nil {
				return fmt.Errorf("models[%d].backends[%d].url: %w", i, j, err)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drainTimeout = cfg.DrainTimeout.D()
	now := f.now()
	models := make([]*Model, 0, len(cfg.Models))
	byName := make(map[string]*Model, len(cfg.Models))
	for _, mc := range cfg.Models {
		m := f.byName[mc.Name]
		if m == nil {
			m = &Model{Name: mc.Name, created: now.Unix()}
			m.backends.Store(&[]*Backend{})
		}
		m.settings.Store(&modelSettings{maxModelLen: mc.MaxModelLen, minReady: mc.MinReadyOrDefault(),
			tokenizerCheck: mc.TokenizerCheckOrDefault(), counter: counters[mc.Name]})
		m.setRoutingLocked(&mc, f.now)
		old := map[string]*source{}
		for _, s := range m.sources {
			old[s.label()+" "+s.name] = s
		}
		var sources []*source
		for _, bc := range mc.Backends {
			ns := newSource(bc)
			if s := old[ns.label()+" "+ns.name]; s != nil {
				delete(old, ns.label()+" "+ns.name)
				s.cfg, s.key = ns.cfg, ns.key
				ns = s
			}
			sources = append(sources, ns)
		}
		m.sources = sources
		for _, s := range old {
			s.removed = true
			f.setMembersLocked(m, s, nil)
		}
		for _, s := range sources {
			switch {
			case s.kind == kindStatic:
				f.setMembersLocked(m, s, []string{s.name})
			default:
				f.updateLimitsLocked(m, s)
			}
		}
		models = append(models, m)
		byName[m.Name] = m
	}
	for name, m := range f.byName {
		if byName[name] == nil {
			// The model left: its entries stop resolving and its backends
			// stop being probed; the requests on them finish on their own.
			for _, s := range m.sources {
				s.removed = true
			}
			for _, b := range m.Backends() {
				b.mu.Lock()
				b.draining, b.drainSince = true, now
				b.mu.Unlock()
			}
			f.log.Info("model removed", zap.String("model", name))
		}
	}
	f.models, f.byName = models, byName
	f.changedLocked()
	return nil
}

// changedLocked wakes Run and RunScraper: the models or backends changed.
func (f *Fleet) changedLocked() {
	f.size.Store(int64(f.countLocked()))
	close(f.changed)
	f.changed = make(chan struct{})
}

// setMembersLocked makes urls (base URLs) the backends of source s in m:
// see the package's membership rules above. Call with f.mu held.
func (f *Fleet) setMembersLocked(m *Model, s *source, urls []string) {
	label := s.label()
	now := f.now()
	list := m.Backends()
	next := slices.Clone(list)
	changed := false
	byHost := map[string]*Backend{}
	for _, b := range list {
		byHost[b.URL.Host] = b
	}
	want := map[string]bool{}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue // validated before; a resolver's address always parses
		}
		want[u.Host] = true
		b := byHost[u.Host]
		if b == nil {
			b = &Backend{URL: u, Served: m.Name, Key: s.key, owner: s, since: now, reason: ReasonNotProbed,
				refresh: make(chan struct{}, 1)}
			if s.cfg.ServedModel != "" {
				b.Served = s.cfg.ServedModel
			}
			b.maxInFlight, b.kvTokens, b.kvEvents = s.cfg.MaxInFlight, s.cfg.KVTokens, s.cfg.KVEvents
			next = append(next, b)
			byHost[u.Host] = b
			changed = true
			f.log.Info("backend joined", zap.String("model", m.Name), zap.String("backend", u.Host), zap.String("source", label))
			continue
		}
		b.mu.Lock()
		switch {
		case b.owner == s && !b.draining:
		case b.draining:
			// Listed again while draining: it comes back as it was.
			f.log.Info("backend back", zap.String("model", m.Name), zap.String("backend", u.Host), zap.String("source", label))
			b.draining, b.owner = false, s
			changed = true
		default:
			// Another entry of the model has this address already.
			b.mu.Unlock()
			continue
		}
		if b.maxInFlight != s.cfg.MaxInFlight || b.kvTokens != s.cfg.KVTokens {
			b.maxInFlight, b.kvTokens = s.cfg.MaxInFlight, s.cfg.KVTokens
			changed = true
		}
		b.kvEvents = s.cfg.KVEvents
		b.mu.Unlock()
	}
	for _, b := range list {
		b.mu.Lock()
		leave := b.owner == s && !b.draining && !want[b.URL.Host]
		if leave {
			b.draining, b.drainSince = true, now
		}
		inFlight := b.inFlight.Load()
		b.mu.Unlock()
		if leave {
			changed = true
			f.log.Info("backend draining: its address left its source", zap.String("model", m.Name), zap.String("backend", b.URL.Host),
				zap.String("source", label), zap.Int64("in_flight", inFlight), zap.Duration("drain_timeout", f.drainTimeout))
		}
	}
	if len(next) != len(list) {
		m.backends.Store(&next)
		f.changedLocked()
	}
	if changed {
		f.size.Store(int64(f.countLocked())) // one drained or came back
		f.membersLocked(m)
	}
}

// updateLimitsLocked gives s's backends in m the limits of its entry.
func (f *Fleet) updateLimitsLocked(m *Model, s *source) {
	for _, b := range m.Backends() {
		b.mu.Lock()
		if b.owner == s {
			b.maxInFlight, b.kvTokens, b.kvEvents = s.cfg.MaxInFlight, s.cfg.KVTokens, s.cfg.KVEvents
		}
		b.mu.Unlock()
	}
	f.membersLocked(m)
}

func (f *Fleet) membersLocked(m *Model) {
	for _, fn := range f.memberWatchers {
		fn(m)
	}
}

// forget drops draining backend b from m once nothing runs on it (its own
// in-flight count, and HoldDrain's), or drain_timeout after it began to
// drain. It reports whether b is gone (its prober then ends).
func (f *Fleet) forget(m *Model, b *Backend) bool {
	b.mu.Lock()
	since := b.drainSince
	b.mu.Unlock()
	inFlight := b.inFlight.Load()
	busy := inFlight > 0 || (f.busy != nil && f.busy(m, b))
	f.mu.Lock()
	defer f.mu.Unlock()
	expired := f.now().Sub(since) >= f.drainTimeout
	if (busy && !expired) || !b.Draining() {
		return false
	}
	list := m.Backends()
	i := slices.Index(list, b)
	if i < 0 {
		return true
	}
	next := slices.Delete(slices.Clone(list), i, i+1)
	m.backends.Store(&next)
	if busy {
		f.log.Warn("backend forgotten at drain_timeout with requests still running", zap.String("model", m.Name),
			zap.String("backend", b.URL.Host), zap.Int64("in_flight", inFlight), zap.Duration("drain_timeout", f.drainTimeout))
	} else {
		f.log.Info("backend drained and forgotten", zap.String("model", m.Name), zap.String("backend", b.URL.Host),
			zap.Duration("drained_in", f.now().Sub(since)))
	}
	f.changedLocked()
	f.membersLocked(m)
	return true
}

// errNoAddresses is a DNS answer without any address: taken as a failed
// lookup, never as "no backends".
var errNoAddresses = errors.New("the answer holds no address")
