package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/redistest"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/store"
)

// Three tenants: alice and bob may use model m, eve only "other" (an
// embedding model in the words), both on the same backends.
var (
	keyAlice = config.KeyConfig{Name: "alice", SHA256: digestOf("sk-alice"), Models: []string{"m"}}
	keyBob   = config.KeyConfig{Name: "bob", SHA256: digestOf("sk-bob"), Models: []string{"m"}}
	keyEve   = config.KeyConfig{Name: "eve", SHA256: digestOf("sk-eve"), Models: []string{"other"}}
)

// byID sends GET /v1/responses/{id} (or POST .../cancel) with key and
// returns the status and body.
func byID(t *testing.T, tg *testGateway, key, id string, cancel bool) (int, string) {
	t.Helper()
	method, path := http.MethodGet, "/v1/responses/"+id
	if cancel {
		method, path = http.MethodPost, path+"/cancel"
	}
	req, err := http.NewRequest(method, tg.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, readBodyT(t, res)
}

// notFoundBody is the answer to an unknown response id: vLLM's 404.
func notFoundBody(id string) string {
	return `{"error":{"message":"Response with id '` + id + `' not found.","type":"invalid_request_error","param":"response_id","code":404}}` + "\n"
}

// byIDReceived counts the requests the simulators received for response
// id by id (GET, cancel; the gateway's probes included).
func byIDReceived(sims []*sim.Server, id string) int {
	n := 0
	for _, s := range sims {
		for _, r := range s.Received() {
			if strings.HasPrefix(r.Path, "/v1/responses/"+id) {
				n++
			}
		}
	}
	return n
}

// TestResponsesByIDOwnedByKey: a stored response belongs to the key that
// created it. Alice's responses (a JSON answer, a stream) are read by
// alice; bob (same model) and eve (another model only) get, for reads and
// cancels, byte for byte the 404 an unknown id gets, and no backend is
// asked; an unknown id reaches no backend either (no fan-out). A
// continuation of alice's response by bob is refused the same way before
// it queues, and a key may not choose the response's id.
func TestResponsesByIDOwnedByKey(t *testing.T) {
	tok := qwen3(t)
	var sims []*sim.Server
	var urls []string
	for range 2 {
		s := sim.New(sim.Config{Model: "m", Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 4096, OutputTokens: 3},
			zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		sims, urls = append(sims, s), append(urls, httptestServer(t, s))
	}
	tg := startGatewayToks(t, tok, both(withOther, withKeys(keyAlice, keyBob, keyEve)), urls...)
	ctx := t.Context()
	alice := keyedSDK(tg, "sk-alice")
	made, err := alice.Responses.New(ctx, responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Remember 7.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	stream := alice.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi.")},
	})
	var streamed string
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.created" {
			streamed = ev.Response.ID
		}
	}
	if err := stream.Err(); err != nil || streamed == "" {
		t.Fatalf("stream: %v (id %q)", err, streamed)
	}
	for _, id := range []string{made.ID, streamed} {
		got, err := alice.Responses.Get(ctx, id, responses.ResponseGetParams{})
		if err != nil || got.ID != id || got.OutputText() == "" {
			t.Fatalf("alice reads her response %s: %v", id, err)
		}
		before := byIDReceived(sims, id)
		for _, c := range []struct {
			key    string
			cancel bool
		}{{"sk-bob", false}, {"sk-bob", true}, {"sk-eve", false}, {"sk-eve", true}} {
			status, body := byID(t, tg, c.key, id, c.cancel)
			if status != http.StatusNotFound || body != notFoundBody(id) {
				t.Errorf("%s (cancel %v) on alice's %s: %d %s", c.key, c.cancel, id, status, body)
			}
		}
		if after := byIDReceived(sims, id); after != before {
			t.Errorf("another key's requests for %s reached a backend (%d requests)", id, after-before)
		}
	}
	// An unknown id: the same answer, and no backend asked.
	for _, key := range []string{"sk-alice", "sk-bob", "sk-eve"} {
		status, body := byID(t, tg, key, "resp_nowhere", false)
		if status != http.StatusNotFound || body != notFoundBody("resp_nowhere") {
			t.Errorf("%s, unknown id: %d %s", key, status, body)
		}
	}
	if n := byIDReceived(sims, "resp_nowhere"); n != 0 {
		t.Errorf("an unknown id was asked of the backends %d times", n)
	}
	// Through the SDK, bob's read is a typed 404.
	bob := keyedSDK(tg, "sk-bob")
	_, err = bob.Responses.Get(ctx, made.ID, responses.ResponseGetParams{})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Type != "invalid_request_error" {
		t.Fatalf("bob's SDK read of alice's response: %v", err)
	}

	creates := func() int {
		n := 0
		for _, s := range sims {
			n += len(clientRequests(s, func(p string) bool { return p == "/v1/responses" }))
		}
		return n
	}
	before := creates()
	// Bob continues alice's conversation: the same 404, nothing queued.
	res := tg.post(t, "/v1/responses", `{"model":"m","input":"Which number?","previous_response_id":"`+made.ID+`"}`,
		"Authorization", "Bearer sk-bob")
	if body := readBodyT(t, res); res.StatusCode != http.StatusNotFound || body != notFoundBody(made.ID) {
		t.Errorf("bob continues alice's response: %d %s", res.StatusCode, body)
	}
	// A key may not name the response's id.
	res = tg.post(t, "/v1/responses", `{"model":"m","input":"hi","request_id":"`+made.ID+`"}`, "Authorization", "Bearer sk-bob")
	if body := readBodyT(t, res); res.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"code":"request_id_not_allowed"`) ||
		!strings.Contains(body, `"param":"request_id"`) {
		t.Errorf("request_id with a key: %d %s", res.StatusCode, body)
	}
	if after := creates(); after != before {
		t.Errorf("%d refused creates reached a backend", after-before)
	}
	// Alice continues her own, on the backend holding it.
	next, err := alice.Responses.New(ctx, responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Which number?")},
		PreviousResponseID: openai.String(made.ID),
	})
	if err != nil || next.Status != "completed" {
		t.Fatalf("alice continues her response: %v", err)
	}
	// Bob's attempts are counted under his key, by what they were.
	tg.quiesce()
	out := tg.gathered(t)
	for _, want := range []string{
		`maitred_key_rejections_total{key="bob",reason="response_not_owned"} 6`,
		`maitred_key_rejections_total{key="bob",reason="response_not_found"} 1`,
		`maitred_key_rejections_total{key="eve",reason="response_not_owned"} 4`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, keyRejectionLines(out))
		}
	}
}

// TestResponsesOwnershipAcrossReplicas: two gateway replicas share a real
// redis-server. Alice creates a response through replica A; replica B,
// which never saw it, forwards alice's read straight to the backend that
// holds it (no probe of the other), and answers bob's read and cancel with
// the unknown id's 404, asking no backend.
func TestResponsesOwnershipAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	tok := qwen3(t)
	var sims []*sim.Server
	var urls []string
	for range 2 {
		s := sim.New(sim.Config{Model: "m", Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 4096, OutputTokens: 3},
			zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		sims, urls = append(sims, s), append(urls, httptestServer(t, s))
	}
	replica := func(name string) *testGateway {
		cfg := config.Default().Store
		cfg.URL = srv.URL()
		st, err := store.New(store.Options{Config: cfg, Replica: name, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { st.Run(ctx) })
		t.Cleanup(func() { cancel(); wg.Wait(); st.Close() })
		return startGatewayFull(t, tok, extras{responses: st}, withKeys(keyAlice, keyBob), urls...)
	}
	a, b := replica("a"), replica("b")
	ctx := t.Context()
	var ids []string
	aliceA, aliceB := keyedSDK(a, "sk-alice"), keyedSDK(b, "sk-alice")
	for range 4 {
		r, err := aliceA.Responses.New(ctx, responses.ResponseNewParams{
			Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello.")},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	for _, id := range ids {
		got, err := aliceB.Responses.Get(ctx, id, responses.ResponseGetParams{})
		if err != nil || got.ID != id || got.Status != "completed" {
			t.Fatalf("alice reads %s through replica B: %v", id, err)
		}
		if n := byIDReceived(sims, id); n != 1 {
			t.Errorf("alice's read of %s through B made %d requests to the backends; 1 (the read itself) expected", id, n)
		}
		for _, cancel := range []bool{false, true} {
			if status, body := byID(t, b, "sk-bob", id, cancel); status != http.StatusNotFound || body != notFoundBody(id) {
				t.Errorf("bob (cancel %v) on alice's %s through B: %d %s", cancel, id, status, body)
			}
		}
		if n := byIDReceived(sims, id); n != 1 {
			t.Errorf("bob's requests for %s through B reached a backend", id)
		}
	}
	// The store down: B cannot know whose a response it never saw is.
	late, err := aliceA.Responses.New(ctx, responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ttlLate, _ := srv.Do("TTL", "{maitred}:r:"+late.ID)
	srv.Stop()
	if status, body := byID(t, b, "sk-alice", late.ID, false); status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"store_unavailable"`) {
		t.Errorf("alice's read through B with the store down: %d %s", status, body)
	}
	if n := byIDReceived(sims, late.ID); n != 0 {
		t.Errorf("with the store down, B asked the backends for %s", late.ID)
	}
	// A still knows its own record.
	if got, err := aliceA.Responses.Get(ctx, late.ID, responses.ResponseGetParams{}); err != nil || got.ID != late.ID {
		t.Errorf("alice's read through A with the store down: %v", err)
	}
	// The records were in the store under the id, with store.ResponseTTL.
	if secs, _ := strconv.Atoi(strings.TrimPrefix(ttlLate, ":")); secs <= 0 || time.Duration(secs)*time.Second > store.ResponseTTL {
		t.Errorf("the store's record of %s: TTL %q", late.ID, ttlLate)
	}
}

// TestResponsesBackgroundRefusedUnderMaxConcurrent: a key with
// max_concurrent 1 cannot start background responses (vLLM answers them
// at once and runs them after, so they would escape the limit): five at
// once are each refused with a 400 naming it, and none reaches the
// backend; a foreground request of the same key, and a background one of
// a key without max_concurrent, are served.
func TestResponsesBackgroundRefusedUnderMaxConcurrent(t *testing.T) {
	tok := qwen3(t)
	s := sim.New(sim.Config{Model: "m", Tokenizer: sim.ModelTokenizer(tok), MaxModelLen: 4096, OutputTokens: 3},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	url := httptestServer(t, s)
	one := config.KeyConfig{Name: "one", SHA256: digestOf("sk-one"), Models: []string{"*"}, Limits: config.KeyLimits{MaxConcurrent: 1}}
	free := config.KeyConfig{Name: "free", SHA256: digestOf("sk-free"), Models: []string{"*"}}
	tg := startGatewayToks(t, tok, withKeys(one, free), url)
	ctx := t.Context()
	sdk := keyedSDK(tg, "sk-one")
	errs := make([]error, 5)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = sdk.Responses.New(ctx, responses.ResponseNewParams{
				Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Write a story.")},
				Background: openai.Bool(true),
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Code != "background_not_allowed" || ae.Param != "background" {
			t.Errorf("background request %d under max_concurrent 1: %v", i, err)
		}
	}
	if got := clientRequests(s, isResponsesPath); len(got) != 0 {
		t.Fatalf("%d background requests under max_concurrent 1 reached the backend", len(got))
	}
	// A streamed background request is refused too: it outlives a client
	// that leaves.
	res := tg.post(t, "/v1/responses", `{"model":"m","input":"hi","background":true,"stream":true}`, "Authorization", "Bearer sk-one")
	if body := readBodyT(t, res); res.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"code":"background_not_allowed"`) {
		t.Fatalf("streamed background under max_concurrent 1: %d %s", res.StatusCode, body)
	}
	if r, err := sdk.Responses.New(ctx, responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi.")},
	}); err != nil || r.Status != "completed" {
		t.Fatalf("a foreground request of the same key: %v", err)
	}
	freeSDK := keyedSDK(tg, "sk-free")
	r, err := freeSDK.Responses.New(ctx, responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi.")},
		Background: openai.Bool(true),
	})
	if err != nil || r.ID == "" {
		t.Fatalf("a background request of a key without max_concurrent: %v", err)
	}
}

func keyRejectionLines(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "maitred_key_rejections_total{") && !strings.HasSuffix(l, " 0") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
