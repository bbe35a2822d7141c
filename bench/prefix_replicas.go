package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/store"
	"github.com/maitred-dev/maitred/tokenize"
)

// pxReplicas is the replicated precise policy's number of maitred
// replicas (issue 29: three, each subscribed to the same four simulators).
const pxReplicas = 3

// gatewayPreciseReplicas serves pxReplicas maitred replicas routing by
// the simulators' KV events, each with its own subscription to every
// simulator's sockets, sharing their backends' in-flight counts through
// one redis-server (the shared store, as replicas are deployed: the
// fleet's max_in_flight holds across them), behind a round-robin proxy.
func (w *prefixWorld) gatewayPreciseReplicas() (string, func(), error) {
	addr, stopRedis, err := startRedis()
	if err != nil {
		return "", nil, err
	}
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		stopRedis()
	}
	var targets []*url.URL
	for i := range pxReplicas {
		cfg := w.preciseConfig()
		cfg.Store.URL = "redis://" + addr + "/0"
		if err := cfg.Validate(); err != nil {
			stopAll()
			return "", nil, err
		}
		st, err := store.New(store.Options{Config: cfg.Store, Replica: fmt.Sprintf("prefix-%d", i), Logger: zap.NewNop()})
		if err != nil {
			stopAll()
			return "", nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { st.Run(ctx) })
		stops = append(stops, func() { cancel(); wg.Wait(); st.Close() })
		reg := prometheus.NewRegistry()
		u, _, stop, err := serveGatewayWith(cfg, zap.NewNop(), gatewayExtras{shared: st, tokenizers: map[string]*tokenize.Model{"demo": w.tok},
			registry: reg, kvEvents: true})
		if err != nil {
			stopAll()
			return "", nil, err
		}
		stops = append(stops, stop)
		w.regs = append(w.regs, reg)
		t, err := url.Parse(u)
		if err != nil {
			stopAll()
			return "", nil, err
		}
		targets = append(targets, t)
	}
	proxies := make([]*httputil.ReverseProxy, len(targets))
	for i, t := range targets {
		proxies[i] = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(t) }, FlushInterval: -1, Transport: poolTransport()}
	}
	var n atomic.Uint64
	u, stop, err := serve(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		proxies[n.Add(1)%uint64(len(proxies))].ServeHTTP(rw, r)
	}))
	if err != nil {
		stopAll()
		return "", nil, err
	}
	return u, func() { stop(); stopAll() }, nil
}

// preciseConfig is the precise policy's configuration: routing: precise,
// each backend subscribed to its simulator's publisher and replay
// sockets.
func (w *prefixWorld) preciseConfig() config.Config {
	cfg := config.Default()
	m := config.ModelConfig{Name: "demo", TokenizerCheck: "off", Routing: "precise",
		QueueSize: 4 * pxUsers, QueueTimeout: config.Duration(time.Hour)}
	for i, u := range w.urls {
		pub, rep := w.sims[i].KVEventsEndpoints()
		m.Backends = append(m.Backends, config.BackendConfig{URL: u, MaxInFlight: pxMaxSeqs,
			KVEvents: &config.KVEventsConfig{Endpoint: pub, ReplayEndpoint: rep, Topic: "kv"}})
	}
	m.Precise.CacheWeight, m.Precise.LoadWeight = w.weights[0], w.weights[1]
	cfg.Models = []config.ModelConfig{m}
	return cfg
}
