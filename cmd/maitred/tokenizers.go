package main

import (
	"fmt"
	"maps"
	"strings"
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
// the reload) naming the model. log, when not nil, hears each load.
// Folders load one after another: loaded side by side, distinct
// tokenizers each hold their parse's garbage at once (10 distinct qwen3
// folders: 326 MiB against 277 MiB, for no shorter start on a busy
// 2-core machine; bench -scenario models).
func (mt *modelTokenizers) load(cfg config.Config, log *zap.Logger) (map[string]*tokenize.Model, error) {
	pass := mt.loader.Pass()
	toks := map[string]*tokenize.Model{}
	for i, mc := range cfg.Models {
		if mc.Tokenizer == "" {
			if log != nil {
				log.Warn("model has no tokenizer: its requests are forwarded uncounted", zap.String("model", mc.Name))
			}
			continue
		}
		start := time.Now()
		m, err := loadTokenizerIn(pass, mc.Tokenizer, mc.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("models[%d].tokenizer (%s): %w", i, mc.Name, err)
		}
		toks[mc.Name] = m
		if log != nil {
			log.Info("tokenizer loaded", zap.String("model", mc.Name), zap.String("from", mc.Tokenizer), zap.Duration("took", time.Since(start)))
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
