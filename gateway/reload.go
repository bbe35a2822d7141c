package gateway

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/tokenize"
)

// Config reload.
//
// The config in force and everything built from it that requests read
// (the models' runtimes, the catalog, the door) are one liveState behind an
// atomic pointer. Reload builds the next one and swaps it: a request that
// already found its model keeps that runtime (its timeouts, tokenizer and
// limits); the next one finds the new. What lives longer than a config
// stays put: a model's pool (queue, leases, ejections), its fleet model and
// backends (state, connections), its metric children.

// liveState is the config in force and what is built from it.
type liveState struct {
	cfg     *config.Config
	models  []*modelRuntime // config order
	byName  map[string]*modelRuntime
	catalog *catalog
	door    *admission.Door
}

// live returns the state in force.
func (g *Gateway) live() *liveState { return g.state.Load() }

// conf returns the config in force. Settings that need a restart keep the
// values the gateway started with (Reload copies them over).
func (g *Gateway) conf() *config.Config { return g.live().cfg }

// runtimeOf is the runtime a door's verdict names (admission.Model.Ref):
// the handle is the runtime itself, so a verdict of a door of an earlier
// state still holds the runtime it was checked against, and nothing
// keeps a runtime no verdict holds.
func runtimeOf(ref admission.Runtime) *modelRuntime {
	rt, _ := ref.(*modelRuntime)
	return rt
}

func (g *Gateway) setState(cfg *config.Config, models []*modelRuntime) {
	st := &liveState{cfg: cfg, models: models, byName: make(map[string]*modelRuntime, len(models))}
	names := make([]string, len(models))
	for i, rt := range models {
		st.byName[rt.name] = rt
		names[i] = rt.name
	}
	st.catalog = &catalog{models: models, byName: st.byName, names: names}
	st.door = admission.NewDoor(st.catalog)
	g.state.Store(st)
}

// ReloadResult says what a Reload put in force.
type ReloadResult struct {
	// NotApplied names the changed settings that need a restart (kept as
	// they were).
	NotApplied []string
	// Added and Removed name the models that joined and left.
	Added, Removed []string
}

// Reload puts cfg in force without a restart (SIGHUP, or the config file
// changed): models, backends, keys, limits, timeouts and triage
// thresholds. cfg must have passed config.Load (strict decode, validation
// with key paths); toks are its models' tokenizers, by name. Backends that
// stay keep their state and connections; new ones warm up before they take
// traffic; removed ones drain. A removed model's waiting requests are
// answered at once (404, as for a model never configured), and the
// requests running on it finish. Settings that need a restart (declared
// by a reload tag in package config: the listeners, what was sized or
// started once, the shape of the queues, whether an auth section exists;
// config.KeepRestartOnly) keep their running values and are named in the
// log and the result. On an error nothing changed.
func (g *Gateway) Reload(cfg config.Config, toks map[string]*tokenize.Model) (ReloadResult, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	start := time.Now()
	old := g.live()
	var res ReloadResult
	if cfg.Auth != nil && old.cfg.Auth != nil {
		if _, err := config.NewKeySet(cfg.Auth.Keys, nil, &cfg); err != nil {
			return res, g.reloadRefused(fmt.Errorf("auth.keys: %w", err))
		}
	}
	res.NotApplied = config.KeepRestartOnly(&cfg, old.cfg)
	if err := g.fleet.Apply(cfg.Fleet(), PromptCounters(toks)); err != nil {
		return res, g.reloadRefused(err)
	}
	models := g.newRuntimes(&cfg, toks, old.byName)
	for _, rt := range models {
		if old.byName[rt.name] == nil {
			res.Added = append(res.Added, rt.name)
		}
	}
	g.setState(&cfg, models)
	for _, rt := range old.models {
		if !slices.ContainsFunc(models, func(n *modelRuntime) bool { return n.name == rt.name }) {
			res.Removed = append(res.Removed, rt.name)
			rt.pool.Close() // its waiting requests are answered now
		}
	}
	if cfg.Auth != nil {
		if err := g.reloadAuth(); err != nil {
			// The file changed between config.Load and now: the keys in
			// force stay, and the keys_file watcher reads it again.
			g.log.Error("keys not reloaded; the keys in force keep serving", zap.String("error", err.Error()))
		}
	}
	g.triage.SetThresholds(triageConfig(cfg).Thresholds)
	g.metrics.configReloads.WithLabelValues("success").Inc()
	fields := []zap.Field{zap.Strings("models", g.fleet.Names()), zap.Strings("added", res.Added), zap.Strings("removed", res.Removed),
		zap.Duration("took", time.Since(start))}
	if len(res.NotApplied) > 0 {
		g.log.Warn("config reloaded; settings that need a restart were not applied", append(fields, zap.Strings("not_applied", res.NotApplied))...)
	} else {
		g.log.Info("config reloaded", fields...)
	}
	return res, nil
}

// ReloadFailed records a config that could not be put in force (it did
// not load or validate: err names the key path); the running config keeps
// serving.
func (g *Gateway) ReloadFailed(err error) { _ = g.reloadRefused(err) }

func (g *Gateway) reloadRefused(err error) error {
	g.metrics.configReloads.WithLabelValues("failure").Inc()
	g.log.Error("config reload refused; the running config keeps serving", zap.String("error", err.Error()))
	return err
}
