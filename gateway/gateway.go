package gateway

import (
	"context"
	"errors"
	"github.com/maitred-dev/maitred/internal/upstream"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/telemetry"
	"github.com/maitred-dev/maitred/quota"
	"github.com/maitred-dev/maitred/tokenize"
	"github.com/maitred-dev/maitred/triage"
)

// Options are the gateway's dependencies, injected so that tests and
// embedders can run several gateways in one process.
type Options struct {
	Config   config.Config
	Fleet    *fleet.Fleet
	Logger   *zap.Logger
	Registry *prometheus.Registry
	// Transport carries requests to backends; nil builds one from Config.
	Transport http.RoundTripper
	// Tokenizers holds each model's tokenizer and chat template, by model
	// name. A model without one is forwarded uncounted.
	Tokenizers map[string]*tokenize.Model
	// Triage classifies symptoms; nil builds one with the config's window.
	Triage *triage.Engine
	// Quota keeps the API keys' limits; nil: an in-process store
	// (quota.Local) on QuotaClock.
	Quota quota.Store
	// QuotaClock is the limits' clock; nil: time.Now. Tests run the
	// windows faster with it.
	QuotaClock func() time.Time
	// QueueClock is the admission queues' clock (their drain rate and the
	// waits they advise); nil: time.Now. Tests skip an idle spell with it.
	QueueClock func() time.Time
	// Shared is the store the fleet's replicas share (package store); nil:
	// this process accounts alone.
	Shared SharedStore
	// ResponseOwners keeps the owners of stored Responses API responses
	// for every replica (package store); nil: each replica keeps its own
	// (responses.go).
	ResponseOwners admission.ResponseOwners
	// FlowSync shares the flows' service of the models under fairness
	// tokens with the other replicas (package store; RunFlowSync); nil:
	// each replica counts its own.
	FlowSync admission.FlowSync
	// Tracing, when set, traces every request (tracing.go); nil: tracing
	// is off. The gateway uses no OpenTelemetry global.
	Tracing *telemetry.Provider
}

// SharedStore is the store replicas share, as the gateway uses it: the
// pools confirm their picks there, and it tells of freed room.
type SharedStore interface {
	admission.Shared
	// Watch registers f to hear a backend's name (its URL's host:port)
	// when room was freed on it elsewhere, "" when every backend should
	// be looked at again.
	Watch(f func(backend string))
}

// Gateway is the HTTP edge. It is safe for concurrent use; its mutable
// state is its lifecycle phase, its pools, its body budget, its metrics,
// and the config in force (reload.go), swapped whole by Reload.
type Gateway struct {
	// countCache counts chats of the models it accepts (nil: off;
	// countcache.go). Sized once: count_cache_bytes needs a restart.
	countCache *tokenize.CountCache
	// cfg is the config the gateway started with: the listener's and
	// server's settings (Server, Listener) are read from it alone.
	cfg     config.Config
	fleet   *fleet.Fleet
	log     *zap.Logger
	reg     *prometheus.Registry
	metrics *metrics
	// upstream carries every request to the backends (relay, proxy_relay.go).
	upstream http.RoundTripper
	// handler serves the API listener, adminHandler the admin one
	// (routes).
	handler      http.Handler
	adminHandler http.Handler
	phase        atomic.Int32
	// bodies is the budget of request body bytes held at once.
	bodies  bodyBudget
	checker *tokenizeChecker
	// stopCtx is cancelled at the drain deadline: every upstream request
	// still running is then cancelled and its client told why.
	stopCtx  context.Context
	hardStop context.CancelFunc
	// state is the config in force and what is built from it: the
	// models' runtimes, the catalog and the door (reload.go). A request
	// reads it once where it needs it; Reload swaps it whole.
	state atomic.Pointer[liveState]
	// reloadMu serializes reloads.
	reloadMu sync.Mutex
	// noModel holds the metric children of requests that name no
	// configured model.
	noModel modelMetrics
	triage  *triage.Engine
	// responses remembers who made a Responses API id and which backend
	// holds it; sharedResponses is the replicas' record (nil: none).
	responses       responseOwners
	sharedResponses admission.ResponseOwners
	// keys are the API keys in force (keys.go); nil: no auth section, the
	// gateway is open. keysFile is the keys_file watcher's state (its
	// goroutine's alone).
	keys     atomic.Pointer[keyTable]
	keysMu   sync.Mutex // keysFile: the watcher's and Reload's
	keysFile fileState
	noKey    keyMetrics
	// quota keeps the keys' limits (limits.go).
	quota quota.Store
	// shared is the replicas' shared store; nil when alone.
	shared SharedStore
	// flowSync shares the flows' service (Options.FlowSync); nil: none.
	flowSync admission.FlowSync
	// queueClock is the admission pools' clock (Options.QueueClock).
	queueClock func() time.Time
	// queued is the requests parked in a pool waiting for a grant (every
	// pool's PoolConfig.Parked): while any are, the steps before the
	// queue run off their handlers' stacks (admitAside).
	queued atomic.Int64
	// tr traces requests; nil when tracing is off.
	tr *tracer
	// local bounds the local work running at once (localwork.go).
	local *localGate
}

// Phase is the gateway's lifecycle: starting until the first probe round is
// done, ready, then draining from the first moment of shutdown.
type Phase int32

const (
	Starting Phase = iota
	Serving
	Draining
	Stopped
)

func (p Phase) String() string {
	return [...]string{"starting", "ready", "draining", "stopped"}[p]
}

// New builds a gateway. It starts no goroutines; Serve and the fleet's Run do.
func New(o Options) (*Gateway, error) {
	if o.Fleet == nil {
		return nil, errors.New("gateway: Options.Fleet is required")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Transport == nil {
		o.Transport = NewTransport(o.Config)
	}
	g := &Gateway{
		cfg:     o.Config,
		fleet:   o.Fleet,
		log:     o.Logger,
		reg:     o.Registry,
		metrics: newMetrics(o.Registry),
	}
	g.bodies.limit = o.Config.MaxBodyBytesInFlight
	g.local = newLocalGate(runtime.GOMAXPROCS(0))
	g.tr = newTracer(o.Tracing)
	g.stopCtx, g.hardStop = context.WithCancel(context.Background())
	o.Registry.MustRegister(fleetCollector{o.Fleet}, modelsCollector{g})
	g.queueClock = o.QueueClock
	if o.Shared != nil {
		g.shared = o.Shared
	}
	g.sharedResponses = o.ResponseOwners
	g.flowSync = o.FlowSync
	cfg := o.Config
	g.useCountCache(o.Registry)
	g.setState(&cfg, g.newRuntimes(&cfg, o.Tokenizers, nil))
	g.noModel = g.metrics.forModel("")
	if o.Triage == nil {
		o.Triage = triage.New(triageConfig(o.Config), time.Now)
	}
	g.triage = o.Triage
	// A backend turning ready (or not) changes what the queue can place
	// and what triage knows; one joining or leaving changes the pool's
	// slots, and one draining is forgotten only once its leases are back.
	o.Fleet.OnTransition(g.onTransition)
	o.Fleet.OnMembers(g.onMembers)
	o.Fleet.HoldDrain(g.leased)
	o.Registry.MustRegister(poolCollector{g}, flowCollector{g}, kvIndexCollector{g})
	if g.shared != nil {
		g.watchShared(o.Registry)
	}
	g.quota = o.Quota
	if g.quota == nil {
		clock := o.QuotaClock
		if clock == nil {
			clock = time.Now
		}
		g.quota = quota.NewLocal(clock)
	}
	if err := g.initKeys(); err != nil {
		return nil, err
	}
	g.checker = newTokenizeChecker(&http.Client{Transport: o.Transport}, g.log)
	g.upstream = o.Transport
	g.handler = g.routes(apiListener)
	g.adminHandler = g.routes(adminListener)
	if o.Config.Auth != nil && o.Config.AdminListen == "" {
		g.log.Warn("auth is configured without admin_listen: /metrics, /debug/* and the status page are not served (they name every tenant); set admin_listen to serve them on a port of their own")
	}
	return g, nil
}

// NewTransport returns the backend transport: maitred's own HTTP/1.1
// client for http:// backends (internal/upstream: no goroutine per
// connection, a 1 KiB reader, the write buffer pooled), net/http's made
// from the same settings for https ones (NetHTTP); keep-alive pools sized
// for many concurrent streams, a write buffer that holds a typical request
// whole, and no transparent compression (bodies pass through byte for
// byte). The first-byte
// timeout is per model and per request, so it is not set here.
func NewTransport(cfg config.Config) *upstream.Transport {
	return &upstream.Transport{
		DialContext: (&net.Dialer{
			Timeout:   cfg.BackendDialTimeout.D(),
			KeepAlive: 30 * time.Second,
		}).DialContext,
		// A request whose headers and body fit goes out in one write (the
		// body is in memory; 4 KiB would split a 1,000-token chat, about
		// 5 KiB with its headers, in two). Pooled: no connection holds it
		// between writes.
		WriteBufferSize:     8 << 10,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
}

// SetPhase moves the lifecycle; /readyz follows it.
func (g *Gateway) SetPhase(p Phase) { g.phase.Store(int32(p)) }

// Phase returns the lifecycle phase.
func (g *Gateway) Phase() Phase { return Phase(g.phase.Load()) }

// Handler returns the gateway's HTTP handler: the API listener's.
func (g *Gateway) Handler() http.Handler { return g.handler }

// AdminHandler returns the admin listener's handler: /metrics, /debug/*,
// the status page and the probes.
func (g *Gateway) AdminHandler() http.Handler { return g.adminHandler }

// listenerKind names the listener a handler serves: the API's (Listen)
// or the admin one (AdminListen).
type listenerKind int

const (
	apiListener listenerKind = iota
	adminListener
)

// adminOnAPI reports whether the API listener serves the admin pages
// (/metrics, /debug/*, the status page): only for an open gateway (no auth
// section) without an admin listener, as before admin_listen existed. With
// auth they name every tenant's key, usage and the backends' URLs, so a key
// holder must not read them: they are on the admin listener or nowhere.
// Both settings need a restart, so the start config decides.
func (g *Gateway) adminOnAPI() bool { return g.cfg.AdminListen == "" && g.cfg.Auth == nil }

// routes builds the handler of one listener: its router, behind the
// check of each request's framing (listenerHandler, routes.go).
func (g *Gateway) routes(l listenerKind) http.Handler {
	// A request framed two ways is refused before any route sees it.
	ambiguous := g.serve("unmatched", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeAmbiguousFraming, CloseConn: true, Layer: triage.LayerDoor,
			Message: "The request carries both Transfer-Encoding and Content-Length; send one framing."}
	})
	return newListenerHandler(g.router(l), ambiguous)
}

// router routes one listener's endpoints, every one from its spec
// (endpoints.list, endpoints.go). The API listener serves the model APIs
// and the probes, and the admin pages when adminOnAPI; the admin listener
// serves the admin pages and the probes.
func (g *Gateway) router(l listenerKind) *chi.Mux {
	pages := l == adminListener || g.adminOnAPI()
	r := chi.NewRouter()
	allow := map[string]string{}
	for _, e := range endpoints.list {
		if (e.on == onAPI && l != apiListener) || (e.on == onAdmin && !pages) {
			continue
		}
		for _, p := range e.paths {
			h := g.endpointHandler(e, p, pages)
			for _, m := range e.methods {
				r.Method(m, p, h)
			}
			allow[p] = strings.Join(e.methods, ", ")
		}
	}
	r.NotFound(g.serve("unmatched", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		return &Error{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: codeUnknownURL, Layer: triage.LayerDoor,
			Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")"}
	}))
	r.MethodNotAllowed(g.serve("unmatched", func(w http.ResponseWriter, req *http.Request, _ *exchange) error {
		methods, ok := allow[req.URL.Path]
		if !ok { // a path with a parameter (/v1/responses/{id}): ask the router
			var ms []string
			for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
				if r.Match(chi.NewRouteContext(), m, req.URL.Path) {
					ms = append(ms, m)
				}
			}
			methods = strings.Join(ms, ", ")
		}
		w.Header().Set("Allow", methods) // RFC 9110: a 405 names the methods that are
		return &Error{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: codeMethodNotAllowed, Layer: triage.LayerDoor,
			Message: "Method " + req.Method + " is not allowed for " + req.URL.Path + "; use " + methods + "."}
	}))
	return r
}

// Server returns an http.Server for the gateway with the timeouts and limits
// from the config. There is no WriteTimeout: streams may run for minutes.
// With h2c it also serves HTTP/2 cleartext with prior knowledge (net/http's
// own: a connection opening with HTTP/2's preface; it never honours
// Upgrade: h2c), beside HTTP/1.1.
func (g *Gateway) Server() *http.Server {
	srv := &http.Server{
		Addr:              g.conf().Listen,
		Handler:           g.handler,
		ReadHeaderTimeout: g.conf().ReadHeaderTimeout.D(),
		IdleTimeout:       g.conf().IdleTimeout.D(),
		MaxHeaderBytes:    g.conf().MaxHeaderBytes,
		ConnContext:       connContext,
		ErrorLog:          zap.NewStdLog(g.log.Named("http")),
	}
	if g.conf().H2C {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		// net/http's HTTP/2 server picks each frame to write by walking
		// its connection's open streams in turn, idle ones included: at
		// its default of 250 streams a connection, a slow stream's event
		// paid that walk (a quarter of maitred's CPU at 10,000 open
		// streams). 128, as nginx: clients open a connection more per
		// 128 streams, and each event's walk is half as long.
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: h2Streams}
	}
	return srv
}

// h2Streams is the streams an HTTP/2 client may have open on one
// connection (see Server).
const h2Streams = 128

// Listener wraps the client listener: it caps the connections open at
// once (max_connections) and watches each one's request framing. Serve
// wraps its listener with it; an embedder serving Server() itself must too.
func (g *Gateway) Listener(ln net.Listener) net.Listener {
	return newListener(ln, g.conf().MaxConnections, g.metrics.connections.Add)
}

// ServeAdmin serves the admin listener on ln (AdminHandler: /metrics,
// /debug/*, the status page and the probes) until ctx is done, then shuts
// it down within 5 s: its requests are short. Run it beside Serve with a
// ctx that ends once Serve has returned, so that the drain stays
// observable to the scraper.
func (g *Gateway) ServeAdmin(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g.adminHandler,
		ReadHeaderTimeout: g.conf().ReadHeaderTimeout.D(),
		IdleTimeout:       g.conf().IdleTimeout.D(),
		MaxHeaderBytes:    g.conf().MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(g.log.Named("admin")),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
	}
	<-errc
	return err
}

// Close waits for background work (sampled tokenizer checks) to end.
func (g *Gateway) Close() { g.checker.wait() }

// Serve runs the gateway on ln until ctx is done, then drains:
//
//  1. /readyz answers 503 at once (phase draining);
//  2. new requests are still served for drain_delay, the time load
//     balancers need to notice;
//  3. the listener closes and in-flight requests and streams get up to
//     drain_timeout to finish;
//  4. at that deadline every upstream request still running is cancelled:
//     streams end with a server_shutting_down event and an aborted
//     response (no [DONE]),
//     non-streaming requests waiting for a backend get 503.
//
// It returns nil after a clean drain.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := g.Server()
	errc := make(chan error, 1)
	ln = g.Listener(ln)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.SetPhase(Draining)
	for _, rt := range g.live().models {
		rt.pool.Flush() // requests queued now get 503 at once
	}
	g.log.Info("draining", zap.Duration("drain_delay", g.conf().DrainDelay.D()), zap.Duration("drain_timeout", g.conf().DrainTimeout.D()))
	if d := g.conf().DrainDelay.D(); d > 0 {
		t := time.NewTimer(d)
		<-t.C
	}
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	deadline := time.NewTimer(g.conf().DrainTimeout.D())
	defer deadline.Stop()
	var err error
	select {
	case err = <-done:
	case <-deadline.C:
		g.log.Warn("drain deadline reached: ending the requests still in flight")
		for _, rt := range g.live().models {
			rt.pool.Drain()
		}
		g.hardStop()
		grace := time.NewTimer(5 * time.Second)
		select {
		case err = <-done:
		case <-grace.C:
			err = srv.Close()
		}
		grace.Stop()
	}
	g.hardStop()
	<-errc
	g.Close()
	g.SetPhase(Stopped)
	return err
}
