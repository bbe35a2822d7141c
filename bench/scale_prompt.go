package main

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/tokenize"
)

// promptText is prose of about tokens qwen3 tokens: the support
// conversation's turns, numbered salt.i, over and over (no two
// paragraphs the same, and no two texts of different salts sharing a
// prefix, so that no cache answers one from another), with perTurn
// tokens per turn measured by the caller.
func promptText(tokens int, perTurn float64, salt int64) string {
	var b strings.Builder
	for i := 0; float64(i)*perTurn < float64(tokens); i++ {
		b.WriteString("(")
		b.WriteString(strconv.FormatInt(salt, 10))
		b.WriteString(".")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(") ")
		b.WriteString(longTurns[i%len(longTurns)].Content)
		b.WriteString("\n")
	}
	return b.String()
}

// promptBody is a chat of one user message holding text, after a system
// message naming ticket n (so that the count cache has not seen it).
func promptBody(text string, n int64) []byte {
	return marshalChat(chatRequest{Model: "qwen3", MaxTokens: 1, Messages: []chatMessage{
		{"system", "Ticket " + strconv.FormatInt(n, 10) + "."},
		{"user", text},
	}})
}

// scalePromptRun is the prompt-size dimension: for each size, a chat of
// about that many tokens through the built maitred counting with the
// qwen3 fixture (max_model_len above the largest, max_body_bytes 64 MiB),
// in front of `maitred sim`. Figures: the door's time from the answer's
// Server-Timing, the prompt text's bytes over it (MB/s), and maitred's
// peak RSS above idle while the request ran (VmRSS every 2 ms), against
// the body's size. Each size is sent once to warm up and once measured.
func scalePromptRun(e *scaleEnv, sizes []int) (*curve, error) {
	c := &curve{dim: "prompt size (built maitred counting with qwen3; one request at a time)",
		note:  "target: door time linear in tokens from 10k to 1M (>= 50 MB/s of prompt text), peak memory <= 2x the body",
		xName: "tokens", cols: []string{"body MB", "door ms", "door us/1k tok", "MB/s", "peak +MiB", "peak/body"},
		charts: []chartSpec{
			{file: "prompt-door.svg", title: "door time per 1k tokens by prompt size", yLabel: "us per 1k tokens", cols: []string{"door us/1k tok"}},
			{file: "prompt-memory.svg", title: "maitred's peak memory above idle / body size", yLabel: "ratio", cols: []string{"peak/body"}},
		}}
	tokDir := filepath.Join(fixtures.Root(), ".fixtures", "models", "qwen3")
	tok, err := tokenize.LoadDir(tokDir, tokenize.LoadOptions{})
	if err != nil {
		return nil, fmt.Errorf("the qwen3 fixture (make fixtures): %w", err)
	}
	sample, err := promptTokens(tok, promptBody(promptText(100, 1, 0), 0)) // 100 turns
	if err != nil {
		return nil, err
	}
	perTurn := float64(sample) / 100
	maxLen := 2 * slicesMax(sizes)
	simAddr := freeAddr()
	simArgv := simArgs(simAddr, "qwen3", "", maxLen, 1)
	sp, err := startSim(e.bin, simAddr, simArgv)
	if err != nil {
		return nil, err
	}
	defer sp.stop()
	dir, err := e.pointDir("prompt")
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf("max_body_bytes: 67108864\nmodels:\n  - name: qwen3\n    tokenizer: %s\n    max_model_len: %d\n    tokenizer_check: off\n    backends:\n      - url: %s\n", tokDir, maxLen, sp.url)
	gw, err := e.startIn(dir, cfg)
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	client := &http.Client{Transport: poolTransport(), Timeout: 5 * time.Minute}
	defer client.CloseIdleConnections()
	for range 50 { // warm: the door's code, the allocator, the connections
		if _, _, err := doorAndPeak(client, gw, promptBody(promptText(1000, perTurn, nextID()), nextID())); err != nil {
			return nil, err
		}
	}
	for _, size := range sizes {
		var door time.Duration
		var peak int64
		var body []byte
		var text string
		for try := range 2 {
			text = promptText(size, perTurn, nextID())
			body = promptBody(text, nextID())
			if door, peak, err = doorAndPeak(client, gw, body); err != nil {
				return nil, fmt.Errorf("%d tokens (try %d): %w", size, try, err)
			}
		}
		n, err := promptTokens(tok, body)
		if err != nil {
			return nil, err
		}
		ms := float64(door.Microseconds()) / 1e3
		mbs := math.NaN()
		if door > 0 {
			mbs = float64(len(text)) / 1e6 / door.Seconds()
		}
		c.add(n, float64(len(body))/1e6, ms, 1e6*ms/float64(n), mbs, float64(peak)/(1<<20), float64(peak)/float64(len(body)))
		fmt.Fprintf(os.Stderr, "  %d tokens (%.1f MB): door %.2f ms, peak +%.1f MiB\n", n, float64(len(body))/1e6, ms, float64(peak)/(1<<20))
	}
	return c, nil
}

func slicesMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// doorAndPeak sends body to maitred and returns the door's time from the
// answer's Server-Timing and maitred's peak RSS above its level before,
// sampled every 2 ms while the request ran.
func doorAndPeak(c *http.Client, gw *proc, body []byte) (time.Duration, int64, error) {
	idle := procRSS(gw.pid)
	peak := idle
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, procRSS(gw.pid))
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	_, timing, err := doPostTimed(c, gw.url, body)
	close(stop)
	<-sampled
	if err != nil {
		return 0, 0, err
	}
	st := serverTimings{}
	st.add(timing)
	if len(st["door"]) == 0 {
		return 0, 0, fmt.Errorf("no door in Server-Timing %q", timing)
	}
	return st["door"][0], peak - idle, nil
}
