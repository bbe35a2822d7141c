// Command maitred is the admission gateway for vLLM fleets, its vLLM
// simulator and a one-command demo. This package holds flags and wiring
// only; the behaviour lives in gateway, fleet, tokenize, admission and sim.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

const usage = `maitred: an OpenAI-compatible admission gateway for vLLM fleets.

Usage:
  maitred serve --config FILE [--listen ADDR]   run the gateway
  maitred sim [flags]                           run a simulated vLLM server
  maitred demo [--listen ADDR]                  run the gateway with a simulated backend
  maitred tokenize --model-dir DIR < req.json   print a request's prompt token count
  maitred triage [--url URL]                    name the layer where requests are stuck
  maitred version                               print the version

Run "maitred <command> --help" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	return runIn(ctx, args, os.Stdin, stdout, stderr)
}

// runIn runs one command until it ends or ctx is done, and returns its
// exit code.
func runIn(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = cmdServe(ctx, args[1:], stderr)
	case "sim":
		err = cmdSim(ctx, args[1:], stderr)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr)
	case "tokenize":
		err = cmdTokenize(args[1:], stdin, stdout, stderr)
	case "triage":
		err = cmdTriage(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "maitred", versionString())
		return 0
	case "help", "--help", "-help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "maitred: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintln(stderr, "maitred:", err)
		return 1
	}
}

// errUsage reports a flag error the flag package already printed.
var errUsage = errors.New("usage")

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %q\n", fs.Args())
		return errUsage
	}
	return nil
}

// signalContext is cancelled by the first SIGINT or SIGTERM; a second one
// exits at once, for operators who do not want to wait for the drain.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
			cancel()
		case <-done:
			return
		}
		select {
		case <-ch:
			fmt.Fprintln(os.Stderr, "maitred: second signal, exiting now")
			os.Exit(1)
		case <-done:
		}
	}()
	return ctx, func() { signal.Stop(ch); close(done); cancel() }
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
