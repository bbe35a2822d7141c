package gateway

// Local work (issue 26, item 5): the tokenizer endpoints, render and
// count_tokens are bounded per request, per key and at once.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestTokenizeOverContextBoundedLikeTheDoor: a 7 MB whitespace-free
// prompt (one pre-token) to /tokenize is refused as vLLM's renderer
// refuses a prompt over max_model_len (400 context_length_exceeded, the
// count a lower bound), found by the door's byte bound rather than by
// merging the pre-token, so the bytes the process allocates for it stay
// a small multiple of the body; the backend sees nothing. The same
// prompt in a chat is refused alike.
func TestTokenizeOverContextBoundedLikeTheDoor(t *testing.T) {
	e := startTokenizing(t, "qwen3", 32768)
	const size = 7 << 20
	for _, body := range []string{
		`{"model":"m","prompt":"` + strings.Repeat("a", size) + `"}`,
		`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", size) + `"}]}`,
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		res := e.gw.post(t, "/tokenize", body)
		raw := readBodyT(t, res)
		runtime.ReadMemStats(&after)
		var env errorEnvelope
		if res.StatusCode != 400 || json.Unmarshal([]byte(raw), &env) != nil || env.Error.Code != "context_length_exceeded" ||
			env.Error.MaxModelLen != 32768 || env.Error.PromptTokens <= 32768 || env.Error.PromptTokensExact == nil || *env.Error.PromptTokensExact {
			t.Errorf("%.40s…: %d %.300s, want 400 context_length_exceeded with a lower bound over 32768", body, res.StatusCode, raw)
		}
		// The client's body, the server's read buffer and the parsed
		// prompt are each about one body; merging the pre-token whole
		// would be some fifty.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*size {
			t.Errorf("%.40s…: %d MiB allocated for a %d MiB body, want at most 8x", body, alloc>>20, size>>20)
		}
	}
	if n := len(clientRequests(e.sim, func(p string) bool { return p == "/tokenize" })); n != 0 {
		t.Errorf("the backend received %d /tokenize requests", n)
	}
}

// TestDetokenizeHoldsIDsToTheContext: /detokenize takes at most
// max_model_len ids (no sequence of the model is longer): more is a 400
// that never reaches the backend, and millions of them are refused
// without parsing them all (a few times the body's bytes); max_model_len
// ids are answered.
func TestDetokenizeHoldsIDsToTheContext(t *testing.T) {
	e := startTokenizing(t, "qwen3", 64)
	ids := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("9707,", n), ",") + "]" }
	res := e.gw.post(t, "/detokenize", `{"model":"m","tokens":`+ids(65)+`}`)
	raw := readBodyT(t, res)
	var env errorEnvelope
	if res.StatusCode != 400 || json.Unmarshal([]byte(raw), &env) != nil || env.Error.Code != "context_length_exceeded" || env.Error.Param != "tokens" {
		t.Errorf("65 ids to a 64-token model: %d %s", res.StatusCode, raw)
	}
	// 3.9 million ids (7.8 MB): refused before they are all parsed, for
	// a few times the body's bytes.
	big := `{"model":"m","tokens":[` + strings.TrimSuffix(strings.Repeat("1,", 3_900_000), ",") + `]}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res = e.gw.post(t, "/detokenize", big)
	raw = readBodyT(t, res)
	runtime.ReadMemStats(&after)
	if res.StatusCode != 400 || json.Unmarshal([]byte(raw), &env) != nil || env.Error.Code != "context_length_exceeded" {
		t.Errorf("3.9M ids: %d %.300s", res.StatusCode, raw)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(big)) {
		t.Errorf("3.9M ids: %d MiB allocated for a %d MiB body, want at most 8x", alloc>>20, len(big)>>20)
	}
	if res := e.gw.post(t, "/detokenize", `{"model":"m","tokens":`+ids(64)+`}`); res.StatusCode != 200 {
		t.Errorf("64 ids: %d %s", res.StatusCode, readBodyT(t, res))
	} else {
		res.Body.Close()
	}
	if n := len(clientRequests(e.sim, func(p string) bool { return p == "/detokenize" })); n != 0 {
		t.Errorf("the backend received %d /detokenize requests", n)
	}
}

// TestLocalEndpointsTakeKeyRequestLimits: every keyed local endpoint
// counts against its key's requests_per_minute (the token limits do not
// apply: nothing is generated): with a limit of 2, the third request is
// a 429 rate_limit_exceeded in the endpoint's envelope, and the answers
// carry the key's x-ratelimit-* headers.
func TestLocalEndpointsTakeKeyRequestLimits(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now } // the minute never passes
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	endpoints := []struct{ path, body string }{
		{"/tokenize", `{"model":"m","prompt":"hi"}`},
		{"/detokenize", `{"model":"m","tokens":[9707]}`},
		{"/v1/chat/completions/render", chat},
		{"/v1/completions/render", `{"model":"m","prompt":"hi"}`},
		{"/v1/messages/count_tokens", chat},
		{"/v1/models", ""},
	}
	var keys []config.KeyConfig
	for i := range endpoints {
		keys = append(keys, config.KeyConfig{Name: fmt.Sprintf("k%d", i), SHA256: digestOf(fmt.Sprintf("sk-%d", i)), Models: []string{"*"},
			Limits: config.KeyLimits{RequestsPerMinute: 2, TokensPerMinute: 1}})
	}
	tg, s := startKeyedCounted(t, sim.Config{}, clock, keys...)
	for i, ep := range endpoints {
		auth := "Bearer sk-" + strconv.Itoa(i)
		for n := 1; n <= 3; n++ {
			var res *http.Response
			if ep.body == "" {
				req, _ := http.NewRequest(http.MethodGet, tg.URL+ep.path, nil)
				req.Header.Set("Authorization", auth)
				var err error
				if res, err = tg.client.Do(req); err != nil {
					t.Fatal(err)
				}
			} else {
				res = tg.post(t, ep.path, ep.body, "Authorization", auth)
			}
			raw := readBodyT(t, res)
			if got, tok := res.Header.Get("X-Ratelimit-Limit-Requests"), res.Header.Get("X-Ratelimit-Limit-Tokens"); got != "2" || tok != "1" {
				t.Errorf("%s #%d: x-ratelimit-limit-requests %q, -tokens %q, want 2 and 1", ep.path, n, got, tok)
			}
			if n < 3 {
				if res.StatusCode != 200 {
					t.Errorf("%s #%d: %d %.200s, want 200 (a tokens_per_minute of 1 does not apply)", ep.path, n, res.StatusCode, raw)
				}
				continue
			}
			ok := false
			if strings.HasPrefix(ep.path, "/v1/messages") {
				var env anthropicEnv
				ok = json.Unmarshal([]byte(raw), &env) == nil && env.Error.Type == "rate_limit_error"
			} else {
				var env errorEnvelope
				ok = json.Unmarshal([]byte(raw), &env) == nil && env.Error.Code == "rate_limit_exceeded"
			}
			if res.StatusCode != 429 || !ok || !strings.Contains(raw, "requests per minute") {
				t.Errorf("%s #3: %d %.200s, want 429 for requests per minute in the endpoint's envelope", ep.path, res.StatusCode, raw)
			}
		}
	}
	if got := clientRequests(s, func(string) bool { return true }); len(got) != 0 {
		t.Errorf("the backend received %d requests; every one was answered here", len(got))
	}
}

// TestLocalWorkGate: local work runs at most one request per slot; a few
// more wait for a slot with their body read, and past them the answer is
// 429 queue_full with Retry-After. The waiting requests are answered once
// a slot frees. (The gate is the gateway's, sized to GOMAXPROCS; the test
// holds every slot itself.)
func TestLocalWorkGate(t *testing.T) {
	e := startTokenizing(t, "qwen3", 4096)
	lg := e.gw.local
	slots := cap(lg.slots)
	for range slots {
		lg.slots <- struct{}{}
	}
	bodies := []struct{ path, body string }{
		{"/tokenize", `{"model":"m","prompt":"hi"}`},
		{"/detokenize", `{"model":"m","tokens":[9707]}`},
		{"/v1/completions/render", `{"model":"m","prompt":"hi"}`},
		{"/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	}
	var wg sync.WaitGroup
	statuses := make(chan string, lg.maxWait)
	for i := range int(lg.maxWait) {
		b := bodies[i%len(bodies)]
		wg.Go(func() {
			res := e.gw.post(t, b.path, b.body)
			readBodyT(t, res)
			statuses <- fmt.Sprintf("%s %d", b.path, res.StatusCode)
		})
	}
	eventually(t, "every waiting room place taken", func() bool { return lg.waiting.Load() == lg.maxWait })
	for _, b := range bodies {
		res := e.gw.post(t, b.path, b.body)
		raw := readBodyT(t, res)
		if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || !strings.Contains(raw, "local work") {
			t.Errorf("%s with every slot and place taken: %d %.200s, want 429 with Retry-After", b.path, res.StatusCode, raw)
		}
	}
	for range slots {
		<-lg.slots
	}
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if !strings.HasSuffix(st, " 200") {
			t.Errorf("a request that waited for a slot: %s, want 200", st)
		}
	}
	if n := len(lg.slots); n != 0 {
		t.Errorf("%d slots still held after every request ended", n)
	}
}

// TestTokenizeIDPromptParsedWithinTheContext: a /tokenize prompt of
// millions of token ids (7 MB) is refused as over the context before the
// ids are all parsed, for a few times the body's bytes; a chat with more
// JSON values than the context holds is still parsed and counted (its
// count is not known from its values).
func TestTokenizeIDPromptParsedWithinTheContext(t *testing.T) {
	e := startTokenizing(t, "qwen3", 64)
	big := `{"model":"m","prompt":[` + strings.TrimSuffix(strings.Repeat("1,", 3_500_000), ",") + `]}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := e.gw.post(t, "/tokenize", big)
	raw := readBodyT(t, res)
	runtime.ReadMemStats(&after)
	var env errorEnvelope
	if res.StatusCode != 400 || json.Unmarshal([]byte(raw), &env) != nil || env.Error.Code != "context_length_exceeded" || env.Error.Param != "prompt" {
		t.Errorf("3.5M ids: %d %.300s", res.StatusCode, raw)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(big)) {
		t.Errorf("3.5M ids: %d MiB allocated for a %d MiB body, want at most 8x", alloc>>20, len(big)>>20)
	}
	// 200 values the template ignores (an extra field), a short chat.
	chat := `{"model":"m","messages":[{"role":"user","content":"hi","extra":[` + strings.TrimSuffix(strings.Repeat("0,", 200), ",") + `]}]}`
	res = e.gw.post(t, "/tokenize", chat)
	raw = readBodyT(t, res)
	var ta tokenizeAnswer
	if res.StatusCode != 200 || json.Unmarshal([]byte(raw), &ta) != nil || ta.Count == 0 || ta.Count > 64 {
		t.Errorf("a short chat of many values: %d %.300s", res.StatusCode, raw)
	}
	if n := len(clientRequests(e.sim, func(p string) bool { return p == "/tokenize" })); n != 0 {
		t.Errorf("the backend received %d /tokenize requests", n)
	}
}
