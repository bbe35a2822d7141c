package prefixindex

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/sim"
)

// simServer is a simulator with a prefix cache (block size 16, its own
// seeded hashes) publishing vLLM's KV events on pubEP and replayEP
// ("tcp://*:0" for free ports).
type simServer struct {
	s        *sim.Server
	srv      *httptest.Server
	sdk      openai.Client
	pub, rep string
}

func startSim(t *testing.T, enc, hash, pubEP, replayEP string) *simServer {
	t.Helper()
	s := sim.New(sim.Config{Model: "m", OutputTokens: 1, MaxModelLen: 4096, KVTokens: 1 << 14, PrefixCaching: true,
		KVEvents: &sim.KVEventsConfig{Endpoint: pubEP, ReplayEndpoint: replayEP, Topic: "kv", Encoding: enc, Hash: hash}}, zap.NewNop())
	if err := s.StartKVEvents(); err != nil {
		t.Fatal(err)
	}
	ss := &simServer{s: s, srv: httptest.NewServer(s.Handler())}
	ss.pub, ss.rep = s.KVEventsEndpoints()
	ss.sdk = openai.NewClient(option.WithBaseURL(ss.srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	return ss
}

func (ss *simServer) close() { ss.s.Close(); ss.srv.Close() }

// complete sends a completions request whose prompt is ids.
func (ss *simServer) complete(t *testing.T, ids []int) {
	t.Helper()
	p := make([]int64, len(ids))
	for i, id := range ids {
		p[i] = int64(id)
	}
	_, err := ss.sdk.Completions.New(context.Background(), openai.CompletionNewParams{Model: "m",
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: p}, MaxTokens: openai.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
}

// rebind is ep ("tcp://127.0.0.1:PORT") as a wildcard to bind again.
func rebind(t *testing.T, ep string) string {
	u, err := url.Parse(ep)
	if err != nil {
		t.Fatal(err)
	}
	return "tcp://*:" + u.Port()
}

func simPrompt(k int) []int { return toks(1000+100*k, 64) } // 4 full blocks

// awaitBlocks awaits the index holding want leading blocks of ids on "a".
func (w *watch) awaitBlocks(t *testing.T, x *Index, ids []int, want int) {
	t.Helper()
	keys := AppendKeys(nil, "", ids, 16)
	out := make([]int, 1)
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for !x.Match(keys, []string{"a"}, out) || out[0] != want {
		select {
		case <-w.ch:
		case <-deadline.C:
			st, _ := x.Status("a")
			t.Fatalf("cached blocks = %d, want %d (%+v)", out[0], want, st)
		}
	}
}

// TestSubscriberWithSimulator follows the simulator's publisher (both
// encodings, both hash forms): batches published before the subscriber
// joined are replayed, /reset_prefix_cache's AllBlocksCleared empties the
// index, and a simulator restarted on the same ports is detected as a
// publisher restart.
func TestSubscriberWithSimulator(t *testing.T) {
	for _, form := range [][2]string{{"map", "bytes"}, {"array", "int"}} {
		t.Run(form[0]+"/"+form[1], func(t *testing.T) {
			ss := startSim(t, form[0], form[1], "tcp://*:0", "tcp://*:0")
			defer func() { ss.close() }()
			// Published before anyone listens: kept in the replay buffer.
			for k := range 20 {
				ss.complete(t, simPrompt(k))
			}
			x := New(16, 0, nil)
			x.Add("a", 0, 1)
			w, stop := runSub(t, x, "a", ss.pub, ss.rep)
			defer stop()
			for k := 20; ; k++ { // until a batch reaches the subscriber
				ss.complete(t, simPrompt(k))
				if s := w.awaitAny(t); strings.HasPrefix(s, "replayed") {
					break
				}
			}
			w.awaitBlocks(t, x, simPrompt(0), 4) // stored before it joined
			res, err := http.Post(ss.srv.URL+"/reset_prefix_cache", "", nil)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("reset: %v %v", err, res)
			}
			res.Body.Close()
			w.awaitBlocks(t, x, simPrompt(0), 0) // AllBlocksCleared
			ss.complete(t, simPrompt(0))
			w.awaitBlocks(t, x, simPrompt(0), 4)

			// The simulator restarts on the same ports: its seq starts at 0.
			// A restart shows as the seq going back, so the old process's
			// seq is taken well past what the new one publishes while the
			// subscriber reconnects (one batch per await below): were the
			// new one's seq to pass it first, the jump would read as a gap.
			for k := 2000; k < 2300; k++ {
				ss.complete(t, simPrompt(k))
			}
			w.awaitBlocks(t, x, simPrompt(2299), 4) // the subscriber caught up
			for drained := false; !drained; {
				select {
				case <-w.ch:
				default:
					drained = true
				}
			}
			pub, rep := rebind(t, ss.pub), rebind(t, ss.rep)
			ss.close()
			ss = startSim(t, form[0], form[1], pub, rep)
			deadline := time.Now().Add(time.Minute)
			for k := 100; ; k++ {
				ss.complete(t, simPrompt(k))
				if s := w.awaitFor(t, 200*time.Millisecond); strings.HasPrefix(s, "clear: publisher restarted") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no restart seen")
				}
			}
			w.awaitBlocks(t, x, simPrompt(0), 0) // the old process's blocks are gone
			st, _ := x.Status("a")
			if st.Replays < 1 || st.Clears < 2 {
				t.Fatalf("status = %+v", st)
			}
		})
	}
}

// awaitAny returns the subscriber's next call, or "" after a short while
// (the caller then publishes again: a PUB drops what it sends before the
// subscription reaches it).
func (w *watch) awaitAny(t *testing.T) string { return w.awaitFor(t, 20*time.Millisecond) }

// awaitFor is the next event within d, or "".
func (w *watch) awaitFor(t *testing.T, d time.Duration) string {
	select {
	case s := <-w.ch:
		return s
	case <-time.After(d):
		return ""
	}
}
