package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/sim"
)

func cmdSim(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("maitred sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "address to listen on")
	var c sim.Config
	fs.StringVar(&c.Model, "model", "demo", "served model name")
	fs.IntVar(&c.MaxModelLen, "max-model-len", 4096, "context length in tokens")
	fs.DurationVar(&c.LoadTime, "load-time", 0, "time before the port opens (vLLM binds only after loading)")
	fs.BoolVar(&c.FailHealth, "fail-health", false, "answer /health with 503 (engine dead)")
	fs.DurationVar(&c.TTFT, "ttft", 50*time.Millisecond, "time to first token")
	fs.DurationVar(&c.ITL, "itl", 10*time.Millisecond, "inter-token latency")
	fs.IntVar(&c.OutputTokens, "output-tokens", 16, "tokens generated when max_tokens is absent")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", 256, "requests running at once; more wait")
	fs.IntVar(&c.KVTokens, "kv-tokens", 65536, "KV cache capacity in tokens")
	fs.IntVar(&c.CutAfterChunks, "cut-after-chunks", 0, "cut each stream after N chunks (0: never)")
	fs.BoolVar(&c.Hang, "hang", false, "accept requests and never answer")
	fs.IntVar(&c.FailStatus, "fail-status", 0, "answer completions with this HTTP status (0: never)")
	fs.IntVar(&c.EmbeddingDim, "embedding-dim", sim.DefaultEmbeddingDim, "length of the simulated embedding vectors")
	fs.BoolVar(&c.Matryoshka, "matryoshka", false, "accept the embeddings \"dimensions\" field (a matryoshka model)")
	apiKeyEnv := fs.String("api-key-env", "", "environment variable holding the API key clients must send")
	tokDir := fs.String("tokenizer", "", "count prompts with this tokenizer folder (or builtin:demo), as vLLM does; default: an approximate counter")
	chatTemplate := fs.String("chat-template", "", "chat template file overriding the tokenizer folder's")
	fs.Func("lora-modules", "LoRA adapters loaded at start, as vLLM's --lora-modules: name=path, repeatable or comma-separated", func(v string) error {
		for _, kv := range strings.Split(v, ",") {
			name, path, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || name == "" || path == "" {
				return fmt.Errorf("want name=path, got %q", kv)
			}
			c.LoRAModules = append(c.LoRAModules, sim.LoRAModule{Name: name, Path: path})
		}
		return nil
	})
	fs.BoolVar(&c.RuntimeLoRA, "runtime-lora", false, "serve /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)")
	fs.IntVar(&c.BlockSize, "block-size", sim.BlockSize, "KV block size in tokens")
	fs.BoolVar(&c.PrefixCaching, "enable-prefix-caching", false, "model vLLM's prefix cache (LRU of full blocks, capacity kv-tokens/block-size)")
	fs.DurationVar(&c.PrefillPerToken, "prefill-per-token", 0, "prefill time per prompt token not found in the prefix cache, added to --ttft")
	fs.BoolVar(&c.PrefillContention, "prefill-contention", false, "one prefill engine per server: uncached prompt tokens are computed first come first served across requests, as vLLM's chunked prefill shares a step's token budget")
	fs.BoolVar(&c.PromptTokensDetails, "enable-prompt-tokens-details", false, "report usage.prompt_tokens_details.cached_tokens (vLLM's flag)")
	fs.StringVar(&c.HashSeed, "hash-seed", "", "seed of the block hashes (vLLM's PYTHONHASHSEED); default random")
	fs.Func("kv-events-config", `publish KV events over ZeroMQ, as vLLM's --kv-events-config: JSON {"endpoint","replay_endpoint","topic","encoding":"map|array","hash":"bytes|int","data_parallel_rank"} (needs --enable-prefix-caching)`, func(v string) error {
		var kv struct {
			sim.KVEventsConfig
			Enable    *bool  `json:"enable_kv_cache_events"`
			Publisher string `json:"publisher"`
		}
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&kv); err != nil {
			return err
		}
		if kv.Publisher != "" && kv.Publisher != "zmq" {
			return fmt.Errorf("publisher %q: the simulator publishes with zmq only", kv.Publisher)
		}
		c.KVEvents = nil
		if kv.Enable == nil || *kv.Enable {
			c.KVEvents = &kv.KVEventsConfig
		}
		return nil
	})
	var lf logFlags
	lf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: maitred sim [flags]\n\nRuns a simulated vLLM OpenAI server. Knobs can be changed at runtime with POST /sim/config.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *apiKeyEnv != "" {
		key, err := lookupEnv(*apiKeyEnv)
		if err != nil {
			return err
		}
		c.APIKey = key
	}
	if *tokDir != "" {
		m, err := loadTokenizer(*tokDir, *chatTemplate)
		if err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
		c.Tokenizer = sim.ModelTokenizer(m)
		if !strings.HasPrefix(*tokDir, "builtin:") {
			// /detokenize decodes with the folder's vocabulary.
			if c.Detokenizer, err = sim.LoadVocabDecoder(filepath.Join(*tokDir, "tokenizer.json")); err != nil {
				return fmt.Errorf("--tokenizer: %w", err)
			}
		}
	}
	log, err := lf.build()
	if err != nil {
		return err
	}
	defer log.Sync()
	s := sim.New(c, log)
	return s.Run(ctx, *listen, nil) // Run logs the address it listens on
}
