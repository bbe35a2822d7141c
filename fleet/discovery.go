package fleet

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// Discovery: backends given by DNS.
//
// A dns entry (name:port) stands for every address of name (A and AAAA
// records: a Kubernetes headless Service lists its ready pods so), an srv
// entry for its SRV records' targets, each at its record's port. Each is
// resolved every dns_interval by its own goroutine (Run), and each answer
// is the whole set: setMembersLocked joins the addresses new to the model
// and drains those gone, so no change is lost to a missed event. A lookup
// that fails, or answers no address at all, changes nothing: the last
// known backends stay (a DNS outage must not empty the fleet), the failure
// is logged when it starts and when it ends, and counted (Discovery).

// newResolver resolves with the DNS server at addr (host:port), over UDP
// and TCP as the answer needs, or with the system's when addr is "".
func newResolver(addr string) *net.Resolver {
	if addr == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// discover resolves s every dns_interval until ctx is done.
func (f *Fleet) discover(ctx context.Context, m *Model, s *source) {
	for {
		f.resolve(ctx, m, s)
		f.mu.Lock()
		every := s.cfg.DNSIntervalOrDefault()
		f.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// resolve looks s up once and sets its members, or records the failure.
func (f *Fleet) resolve(ctx context.Context, m *Model, s *source) {
	f.mu.Lock()
	every := s.cfg.DNSIntervalOrDefault()
	f.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, max(every, 2*time.Second))
	urls, err := f.lookup(lctx, s)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err == nil && len(urls) == 0 {
		err = errNoAddresses
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.removed {
		return
	}
	if err != nil {
		s.errors++
		s.lastErr = err.Error()
		if !s.failing {
			s.failing = true
			n := 0
			for _, b := range m.Backends() {
				if b.owns(s) && !b.Draining() {
					n++
				}
			}
			f.log.Warn("discovery failed: the last known backends stay", zap.String("model", m.Name), zap.String("source", s.label()),
				zap.Int("backends", n), zap.String("error", s.lastErr))
		}
		return
	}
	if s.failing {
		s.failing = false
		f.log.Info("discovery answers again", zap.String("model", m.Name), zap.String("source", s.label()), zap.Int("addresses", len(urls)))
	}
	s.resolved = true
	f.setMembersLocked(m, s, urls)
}

// lookup returns the base URLs s names now, sorted.
func (f *Fleet) lookup(ctx context.Context, s *source) ([]string, error) {
	var out []string
	add := func(ips []net.IPAddr, port string) {
		for _, ip := range ips {
			u := "http://" + net.JoinHostPort(ip.String(), port)
			if !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	switch s.kind {
	case kindDNS:
		host, port, err := net.SplitHostPort(s.name)
		if err != nil {
			return nil, err
		}
		ips, err := f.resolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, err
		}
		add(ips, port)
	case kindSRV:
		_, srvs, err := f.resolver.LookupSRV(ctx, "", "", s.name)
		if err != nil {
			return nil, err
		}
		for _, r := range srvs {
			// Every target must resolve: a partial answer would drain
			// backends that are still there.
			ips, err := f.resolver.LookupIPAddr(ctx, r.Target)
			if err != nil {
				return nil, fmt.Errorf("SRV target %s: %w", r.Target, err)
			}
			add(ips, strconv.Itoa(int(r.Port)))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Source returns where b came from (BackendStatus.Source).
func (b *Backend) Source() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.owner.label()
}

func (b *Backend) owns(s *source) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.owner == s
}

// DiscoveryStatus is one dns or srv entry's lookups.
type DiscoveryStatus struct {
	Model string
	// Source is the entry, as BackendStatus.Source names it.
	Source string
	// Errors counts failed lookups (and answers without an address);
	// Failing: the last one failed, and LastError is why.
	Errors    int64
	Failing   bool
	LastError string
}

// Discovery returns the state of every dns and srv entry, in config order.
func (f *Fleet) Discovery() []DiscoveryStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []DiscoveryStatus
	for _, m := range f.models {
		for _, s := range m.sources {
			if s.kind != kindStatic {
				out = append(out, DiscoveryStatus{Model: m.Name, Source: s.label(), Errors: s.errors, Failing: s.failing, LastError: s.lastErr})
			}
		}
	}
	return out
}
