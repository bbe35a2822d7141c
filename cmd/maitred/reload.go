package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/gateway"
)

// configPollInterval is how often the config file is read for changes.
const configPollInterval = 500 * time.Millisecond

// reloader puts the config file in force again, on SIGHUP and when the
// file changes (gateway.WatchFile: by path and content, debounced).
type reloader struct {
	path   string
	listen string // --listen, which overrides the file's listen
	gw     *gateway.Gateway
	log    *zap.Logger

	hup chan os.Signal

	mu sync.Mutex
	// tried is the content of the file last loaded (put in force or
	// refused): the watcher does not load it again.
	tried [32]byte
	// toks loads the models' tokenizers: a reload parses only the
	// tokenizer files that changed or are new.
	toks *modelTokenizers
}

func newReloader(path, listen string, toks *modelTokenizers, gw *gateway.Gateway, log *zap.Logger) *reloader {
	r := &reloader{path: path, listen: listen, gw: gw, log: log, toks: toks, hup: make(chan os.Signal, 1)}
	// Heard from now on, before the gateway reports it started.
	signal.Notify(r.hup, syscall.SIGHUP)
	return r
}

// run reloads on SIGHUP and on file changes until ctx is done.
func (r *reloader) run(ctx context.Context) {
	defer signal.Stop(r.hup)
	initial, _ := os.ReadFile(r.path)
	r.mu.Lock()
	r.tried = sha256.Sum256(initial)
	r.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() {
		gateway.WatchFile(ctx, r.path, configPollInterval, initial, func([]byte) { r.reload("config file changed") })
	})
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.hup:
			r.reload(whySIGHUP)
		}
	}
}

const whySIGHUP = "SIGHUP"

// reload loads, validates and applies the file once. A file that does not
// load (its error names the key path) or whose tokenizer does not load is
// refused; the running config keeps serving.
func (r *reloader) reload(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := os.ReadFile(r.path)
	if err == nil {
		sum := sha256.Sum256(data)
		if sum == r.tried && why != whySIGHUP {
			return // the content a SIGHUP loaded already
		}
		r.tried = sum
		r.log.Info("reloading the config", zap.String("why", why), zap.String("config", r.path),
			zap.String("sha256", fmt.Sprintf("%x", sum)[:12]))
	}
	cfg, err := config.Load(r.path)
	if err != nil {
		r.gw.ReloadFailed(err)
		return
	}
	if r.listen != "" {
		cfg.Listen = r.listen
	}
	toks, err := r.toks.load(cfg, nil)
	if err != nil {
		r.gw.ReloadFailed(err)
		return
	}
	if _, err := r.gw.Reload(cfg, toks); err == nil {
		r.toks.inForce(toks)
	}
}
