package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("maitred demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "gateway address")
	var lf logFlags
	lf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: maitred demo [--listen ADDR]\n\nRuns the gateway in front of a simulated vLLM backend serving the built-in model \"demo\".\nNo config, network or GPU needed.\n\n")
		fs.PrintDefaults()
	}
	lf.format = "console"
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := lf.build()
	if err != nil {
		return err
	}
	defer log.Sync()

	backend, err := newDemoSim(log.Named("sim"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	simAddr := make(chan net.Addr, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	var simErr error
	wg.Go(func() {
		simErr = backend.Run(ctx, "127.0.0.1:0", func(a net.Addr) { simAddr <- a })
		cancel()
	})
	var addr net.Addr
	select {
	case addr = <-simAddr:
	case <-ctx.Done():
		wg.Wait()
		return simErr
	}

	cfg := config.Default()
	cfg.Listen = *listen
	cfg.Models = []config.ModelConfig{{
		Name:              "demo",
		Tokenizer:         "builtin:demo",
		MaxModelLen:       4096,
		TokenizeCheckRate: 1, // every counted request is re-counted by the backend's /tokenize
		Backends:          []config.BackendConfig{{URL: "http://" + addr.String()}},
	}}
	if err := cfg.Validate(); err != nil {
		return err
	}
	// A person pressing Ctrl-C wants it to stop, not a load balancer's drain.
	cfg.DrainDelay, cfg.DrainTimeout = 0, config.Duration(5*time.Second)
	err = runGateway(ctx, cfg, log, runOptions{started: func(a net.Addr) {
		printDemo(stdout, a.String())
	}})
	cancel()
	return err
}

func newDemoSim(log *zap.Logger) (*sim.Server, error) {
	m, err := tokenize.Builtin("demo")
	if err != nil {
		return nil, err
	}
	tok := sim.ModelTokenizer(m)
	return sim.New(sim.Config{
		Model:        "demo",
		MaxModelLen:  4096,
		TTFT:         80 * time.Millisecond,
		ITL:          40 * time.Millisecond,
		OutputTokens: 24,
		Tokenizer:    tok,
	}, log), nil
}

func printDemo(w io.Writer, addr string) {
	fmt.Fprintf(w, `
maitred demo: the gateway is on http://%[1]s in front of a simulated vLLM serving model "demo".

  # a chat completion
  curl -s http://%[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'

  # the same, streamed (one SSE event per token)
  curl -sN http://%[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16,"stream":true}'

  # a request that cannot fit the 4096-token context: rejected at the door, with the numbers
  curl -s http://%[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}],"max_tokens":5000}'

  # count tokens as the backend would
  curl -s http://%[1]s/tokenize -H 'Content-Type: application/json' \
    -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}]}'

  # where requests are stuck, if anywhere (also: open http://%[1]s/ in a browser)
  go run ./cmd/maitred triage --url http://%[1]s

  # models, readiness, metrics
  curl -s http://%[1]s/v1/models
  curl -s http://%[1]s/readyz
  curl -s http://%[1]s/metrics | grep ^maitred_

Press Ctrl-C to stop.
`, addr)
}

func lookupEnv(name string) (string, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
	return v, nil
}
