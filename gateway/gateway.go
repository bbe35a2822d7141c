package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/tokenize"
)

// Options are the gateway's dependencies, injected so that tests and
// embedders can run several gateways in one process.
type Options struct {
	Config   fleet.Config
	Fleet    *fleet.Fleet
	Logger   *zap.Logger
	Registry *prometheus.Registry
	// Transport carries requests to backends; nil builds one from Config.
	Transport http.RoundTripper
	// Tokenizers holds each model's tokenizer and chat template, by model
	// name. A model without one is forwarded uncounted.
	Tokenizers map[string]*tokenize.Model
}

// Gateway is the HTTP edge. It is safe for concurrent use; its only mutable
// state is its lifecycle phase and its metrics.
type Gateway struct {
	cfg     fleet.Config
	fleet   *fleet.Fleet
	log     *zap.Logger
	reg     *prometheus.Registry
	metrics *metrics
	proxy   *httputil.ReverseProxy
	handler http.Handler
	phase   atomic.Int32
	door    *admission.Door
	catalog *catalog
	checker *tokenizeChecker
}

// Phase is the gateway's lifecycle: starting until the first probe round is
// done, ready, then draining from the first moment of shutdown.
type Phase int32

const (
	Starting Phase = iota
	Serving
	Draining
)

func (p Phase) String() string {
	return [...]string{"starting", "ready", "draining"}[p]
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
	g.catalog = newCatalog(o.Config, o.Fleet, o.Tokenizers)
	g.door = admission.NewDoor(g.catalog)
	g.checker = newTokenizeChecker(o.Config, &http.Client{Transport: o.Transport}, g.metrics, g.log)
	g.proxy = g.newProxy(o.Transport)
	g.handler = g.routes()
	return g, nil
}

// NewTransport returns the backend transport: HTTP/1.1 keep-alive pools
// sized for many concurrent streams, no transparent compression (bodies
// pass through byte for byte), and the header timeout that yields 504.
func NewTransport(cfg fleet.Config) *http.Transport {
	return &http.Transport{
		Proxy: nil, // backends are addressed directly, never via HTTP_PROXY
		DialContext: (&net.Dialer{
			Timeout:   cfg.BackendDialTimeout.D(),
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.BackendHeaderTimeout.D(),
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// SetPhase moves the lifecycle; /readyz follows it.
func (g *Gateway) SetPhase(p Phase) { g.phase.Store(int32(p)) }

// Phase returns the lifecycle phase.
func (g *Gateway) Phase() Phase { return Phase(g.phase.Load()) }

// Handler returns the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler { return g.handler }

func (g *Gateway) routes() http.Handler {
	r := chi.NewRouter()
	r.Post("/v1/chat/completions", g.serve("/v1/chat/completions", g.completions(admission.Chat)))
	r.Post("/v1/completions", g.serve("/v1/completions", g.completions(admission.Completions)))
	r.Post("/tokenize", g.serve("/tokenize", g.tokenize))
	r.Get("/v1/models", g.serve("/v1/models", g.listModels))
	r.Get("/livez", g.serve("/livez", g.livez))
	r.Get("/readyz", g.serve("/readyz", g.readyz))
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}))
	r.NotFound(g.serve("unmatched", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		return &Error{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: codeUnknownURL,
			Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")"}
	}))
	r.MethodNotAllowed(g.serve("unmatched", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		return &Error{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: codeMethodNotAllowed,
			Message: "Method " + r.Method + " is not allowed for " + r.URL.Path}
	}))
	return r
}

// Server returns an http.Server for the gateway with the timeouts and limits
// from the config. There is no WriteTimeout: streams may run for minutes.
func (g *Gateway) Server() *http.Server {
	return &http.Server{
		Addr:              g.cfg.Listen,
		Handler:           g.handler,
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout.D(),
		IdleTimeout:       g.cfg.IdleTimeout.D(),
		MaxHeaderBytes:    g.cfg.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(g.log.Named("http")),
	}
}

// Close waits for background work (sampled tokenizer checks) to end.
func (g *Gateway) Close() { g.checker.wait() }

// Serve runs the gateway on ln until ctx is done, then drains: /readyz
// fails at once, the listener closes, and in-flight requests get up to
// drainTimeout to finish.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener, drainTimeout time.Duration) error {
	srv := g.Server()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.SetPhase(Draining)
	sctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
	}
	<-errc
	g.Close()
	return err
}
