package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// cmdTokenize prints the prompt token count of a request read from stdin,
// as the gateway's door (and vLLM) counts it: a chat request (messages) is
// rendered with the model's chat template, a completions request (prompt)
// is tokenized with special tokens.
func cmdTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("maitred tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("model-dir", "", "tokenizer folder (tokenizer.json, tokenizer_config.json), or builtin:demo (required)")
	chatTemplate := fs.String("chat-template", "", "chat template file overriding the folder's")
	asJSON := fs.Bool("json", false, "print {count, tokens} as JSON instead of the count")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: maitred tokenize --model-dir DIR < request.json\n\nPrints the prompt token count of a chat or completions request.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "maitred tokenize: --model-dir is required")
		return errUsage
	}
	m, err := loadTokenizer(*dir, *chatTemplate)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(stdin, 256<<20))
	if err != nil {
		return err
	}
	req, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if req.Kind != ojson.Object {
		return errors.New("request: want a JSON object with messages or prompt")
	}
	var ids []int
	if req.Has("messages") {
		ids, err = m.TokenizeChat(req)
	} else {
		ids, err = m.TokenizeCompletion(req)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		if ids == nil {
			ids = []int{}
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"count": len(ids), "tokens": ids})
	}
	fmt.Fprintln(stdout, len(ids))
	return nil
}
