package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/gateway"
	"github.com/maitred-dev/maitred/internal/telemetry"
	"github.com/maitred-dev/maitred/store"
)

func cmdServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("maitred serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "path to the YAML config (required)")
	listen := fs.String("listen", "", "address to listen on, overriding the config's listen")
	var lf logFlags
	lf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: maitred serve --config FILE [--listen ADDR]\n\nRuns the gateway.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "maitred serve: --config is required")
		fs.Usage()
		return errUsage
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	log, err := lf.build()
	if err != nil {
		return err
	}
	defer log.Sync()
	return runGateway(ctx, cfg, log, runOptions{configPath: *configPath, listen: *listen})
}

// runOptions are runGateway's optional parts.
type runOptions struct {
	// configPath, when set, is the file cfg was loaded from: it is loaded
	// again on SIGHUP and when it changes (reload.go).
	configPath string
	// listen is --listen, which overrides the file's listen at each load.
	listen string
	// started, if set, is called with the bound address once the listener
	// is open and the first probe round is done.
	started func(net.Addr)
	// adminStarted, if set, is called with the admin listener's bound
	// address once it is open (admin_listen).
	adminStarted func(net.Addr)
}

// runGateway wires the fleet and the gateway, serves until ctx is done and
// drains.
func runGateway(ctx context.Context, cfg config.Config, log *zap.Logger, o runOptions) error {
	reg := prometheus.NewRegistry()
	probeClient := &http.Client{Transport: fleet.NewTransport(cfg.BackendDialTimeout.D())}
	tokenizers := newModelTokenizers()
	toks, err := tokenizers.load(cfg, log)
	if err != nil {
		return err
	}
	tokenizers.inForce(toks)
	fl, err := fleet.New(cfg.Fleet(), probeClient, log.Named("fleet"), gateway.PromptCounters(toks))
	if err != nil {
		return err
	}
	tp, err := startTracing(cfg, log)
	if err != nil {
		return err
	}
	opts := gateway.Options{Config: cfg, Fleet: fl, Logger: log, Registry: reg, Tokenizers: toks}
	if tp != nil {
		opts.Tracing = tp
		defer flushTracing(tp, log) // after the drain: the last requests' spans go too
	}
	var st *store.Store
	if cfg.Store.Shared() {
		if st, err = store.New(store.Options{Config: cfg.Store, Logger: log}); err != nil {
			return err
		}
		defer st.Close()
		opts.Shared = st
		opts.Quota = st.Quotas() // the keys' limits hold across replicas
		opts.ResponseOwners = st // a stored response's owner, for every replica
		opts.FlowSync = st       // the flows' service under fairness tokens
		log.Info("shared store", zap.String("store", cfg.Store.URL), zap.String("replica", st.Replica()),
			zap.String("on_store_error", cfg.Store.OnError), zap.Duration("lease", cfg.Store.Lease.D()))
	}
	gw, err := gateway.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	log.Info("listening", zap.String("addr", ln.Addr().String()), zap.Strings("models", fl.Names()))
	// The admin listener (admin_listen) serves /metrics, /debug/* and the
	// status page; it stays open through the drain and closes after it.
	var adminLn net.Listener
	if cfg.AdminListen != "" {
		if adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			ln.Close()
			return fmt.Errorf("admin_listen: %w", err)
		}
		log.Info("admin listening", zap.String("addr", adminLn.Addr().String()))
		if o.adminStarted != nil {
			o.adminStarted(adminLn.Addr())
		}
	}

	fctx, stopFleet := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if adminLn != nil {
		wg.Go(func() {
			if err := gw.ServeAdmin(fctx, adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin listener", zap.Error(err))
			}
		})
	}
	wg.Go(func() { fl.RunScraper(fctx, cfg.ScrapeInterval.D(), gw.ObserveScrape) })
	wg.Go(func() { fl.RunEvents(fctx) })   // KV events of the models routed by them (routing: precise)
	wg.Go(func() { gw.WatchKeys(fctx) })   // returns at once without auth.keys_file
	wg.Go(func() { gw.RunFlowSync(fctx) }) // returns at once without a store
	if o.configPath != "" {
		r := newReloader(o.configPath, o.listen, tokenizers, gw, log)
		wg.Go(func() { r.run(fctx) })
	}
	if st != nil {
		// Heartbeats run until the drain is over: requests still in
		// flight keep their holdings' lease.
		wg.Go(func() { st.Run(fctx) })
	}
	wg.Go(func() {
		fl.ProbeAll(fctx)
		gw.SetPhase(gateway.Serving)
		if o.started != nil {
			o.started(ln.Addr())
		}
		fl.Run(fctx)
	})
	err = gw.Serve(ctx, ln)
	stopFleet()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	log.Info("stopped")
	return err
}

// startTracing starts the OTLP trace pipeline when the config or the
// OTEL_* environment names an endpoint; nil when tracing is off.
func startTracing(cfg config.Config, log *zap.Logger) (*telemetry.Provider, error) {
	s, err := telemetry.Resolve(cfg.Tracing, os.Getenv)
	if err != nil {
		return nil, err
	}
	if !s.Enabled {
		log.Debug("tracing off: no OTLP endpoint configured")
		return nil, nil
	}
	tp, err := telemetry.New(context.Background(), s, telemetry.Options{Version: versionString()})
	if err != nil {
		return nil, err
	}
	endpoint := s.Endpoint
	if u, err := url.Parse(endpoint); err == nil {
		endpoint = u.Redacted()
	}
	log.Info("tracing", zap.String("endpoint", endpoint), zap.String("protocol", s.Protocol),
		zap.String("sampler", s.SamplerName), zap.String("service_name", s.ServiceName))
	return tp, nil
}

// tracingFlushTimeout bounds the export of the spans still buffered at
// shutdown: a collector that is down must not hold the process.
const tracingFlushTimeout = 5 * time.Second

func flushTracing(tp *telemetry.Provider, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: the spans still buffered at shutdown were not all exported", zap.Error(err))
	}
}
