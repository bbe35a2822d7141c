// Package dnstest is an authoritative DNS server for tests: it answers A,
// AAAA and SRV queries from records the test changes while it runs, over
// UDP and TCP on one free port of 127.0.0.1, so that a resolver pointed at
// it (config resolver: host:port) sees what a Kubernetes headless Service
// would show.
package dnstest

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// SRV is one SRV record's target and port.
type SRV struct {
	Target string
	Port   uint16
}

// Server is a running DNS server. Its zero value is not usable; see Start.
type Server struct {
	// Addr is host:port, for UDP and TCP alike.
	Addr string

	mu      sync.Mutex
	a       map[string][]net.IP
	srv     map[string][]SRV
	queries int
	servers []*dns.Server
	stopped bool
}

// Start serves on a free port until Stop or the end of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{a: map[string][]net.IP{}, srv: map[string][]SRV{}}
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ; try++ {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		if try == 20 {
			t.Fatalf("no port free for both UDP and TCP: %v", err)
		}
	}
	s.Addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	started := make(chan struct{}, 2)
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: h, NotifyStartedFunc: func() { started <- struct{}{} }},
		{Listener: ln, Handler: h, NotifyStartedFunc: func() { started <- struct{}{} }},
	} {
		s.servers = append(s.servers, srv)
		go srv.ActivateAndServe()
	}
	<-started
	<-started
	t.Cleanup(s.Stop)
	return s
}

// SetA makes ips (IPv4 or IPv6) the addresses of name: its A and AAAA
// records. No ips: the name answers with no address (NOERROR, empty).
func (s *Server) SetA(name string, ips ...string) {
	var list []net.IP
	for _, ip := range ips {
		list = append(list, net.ParseIP(ip))
	}
	s.mu.Lock()
	s.a[dns.Fqdn(strings.ToLower(name))] = list
	s.mu.Unlock()
}

// SetSRV makes recs the SRV records of name.
func (s *Server) SetSRV(name string, recs ...SRV) {
	s.mu.Lock()
	s.srv[dns.Fqdn(strings.ToLower(name))] = recs
	s.mu.Unlock()
}

// Queries counts the questions answered so far.
func (s *Server) Queries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

// Stop shuts the server down: lookups then fail (the port refuses).
func (s *Server) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	for _, srv := range s.servers {
		srv.Shutdown()
	}
}

func (s *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	s.mu.Lock()
	s.queries++
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		ips, hasA := s.a[name]
		srvs, hasSRV := s.srv[name]
		if !hasA && !hasSRV {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0}
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range ips {
				if v4 := ip.To4(); v4 != nil {
					h := hdr
					h.Rrtype = dns.TypeA
					m.Answer = append(m.Answer, &dns.A{Hdr: h, A: v4})
				}
			}
		case dns.TypeAAAA:
			for _, ip := range ips {
				if ip.To4() == nil {
					h := hdr
					h.Rrtype = dns.TypeAAAA
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: h, AAAA: ip})
				}
			}
		case dns.TypeSRV:
			for _, r := range srvs {
				h := hdr
				h.Rrtype = dns.TypeSRV
				m.Answer = append(m.Answer, &dns.SRV{Hdr: h, Priority: 0, Weight: 1, Port: r.Port, Target: dns.Fqdn(r.Target)})
			}
		}
	}
	s.mu.Unlock()
	w.WriteMsg(m)
}

// ListenOnOnePort listens on 127.0.0.2, 127.0.0.3, ... (n addresses) at one
// port, as the pods behind a headless Service do: the DNS answer carries the
// addresses, the config the port. It skips the test when 127.0.0.2 is not a
// loopback address here, and fails it when no port is free on all n.
func ListenOnOnePort(t testing.TB, n int) (port string, lns []net.Listener) {
	t.Helper()
	for range 50 {
		first, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("no 127.0.0.2 loopback address: %v", err)
		}
		_, port, _ = net.SplitHostPort(first.Addr().String())
		lns = []net.Listener{first}
		for i := 1; i < n; i++ {
			ln, err := net.Listen("tcp", "127.0.0."+strconv.Itoa(i+2)+":"+port)
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) == n {
			return port, lns
		}
		for _, ln := range lns {
			ln.Close()
		}
	}
	t.Fatal("no port free on every loopback address")
	return "", nil
}
