package main

import (
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/tokenize"
)

// modelTokenizers loads the configured models' tokenizers, at start and
// at each reload, through one tokenize.Loader: models whose folders hold
// the same files share one tokenizer and template (by content hash), a
// reload that changes no file reuses what is loaded, and a changed file
// loads fresh.
type modelTokenizers struct {
	loader *tokenize.Loader
}

func newModelTokenizers() *modelTokenizers {
	return &modelTokenizers{loader: tokenize.NewLoader()}
}

// load loads each model's tokenizer folder (or builtin:NAME), so that a
// folder vLLM could not use either stops the gateway at start (or refuses
// the reload) naming the model. Folders load side by side, one per core
// (a tokenizer.json takes a core for about a second to parse). log, when
// not nil, hears each load.
func (mt *modelTokenizers) load(cfg config.Config, log *zap.Logger) (map[string]*tokenize.Model, error) {
	type loaded struct {
		m    *tokenize.Model
		err  error
		took time.Duration
	}
	pass := mt.loader.Pass()
	out := make([]loaded, len(cfg.Models))
	cores := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, mc := range cfg.Models {
		if mc.Tokenizer == "" {
			continue
		}
		wg.Go(func() {
			cores <- struct{}{}
			defer func() { <-cores }()
			start := time.Now()
			m, err := loadTokenizerIn(pass, mc.Tokenizer, mc.ChatTemplate)
			out[i] = loaded{m, err, time.Since(start)}
		})
	}
	wg.Wait()
	toks := map[string]*tokenize.Model{}
	for i, mc := range cfg.Models {
		switch {
		case mc.Tokenizer == "":
			if log != nil {
				log.Warn("model has no tokenizer: its requests are forwarded uncounted", zap.String("model", mc.Name))
			}
			continue
		case out[i].err != nil:
			return nil, fmt.Errorf("models[%d].tokenizer (%s): %w", i, mc.Name, out[i].err)
		}
		toks[mc.Name] = out[i].m
		if log != nil {
			log.Info("tokenizer loaded", zap.String("model", mc.Name), zap.String("from", mc.Tokenizer), zap.Duration("took", out[i].took))
		}
	}
	return toks, nil
}

// inForce tells the loader which models serve now: what none of them
// uses is let go.
func (mt *modelTokenizers) inForce(toks map[string]*tokenize.Model) {
	mt.loader.Keep(maps.Values(toks))
}

// loadTokenizer loads one tokenizer folder (or builtin:NAME) on its own.
func loadTokenizer(spec, chatTemplate string) (*tokenize.Model, error) {
	return loadTokenizerIn(tokenize.NewLoader().Pass(), spec, chatTemplate)
}

func loadTokenizerIn(pass *tokenize.LoadPass, spec, chatTemplate string) (*tokenize.Model, error) {
	if name, ok := strings.CutPrefix(spec, "builtin:"); ok {
		return tokenize.Builtin(name)
	}
	return pass.LoadDir(spec, tokenize.LoadOptions{ChatTemplate: chatTemplate})
}
