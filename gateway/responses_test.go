package gateway

// The Responses API through the gateway, against two simulators, over real
// HTTP and through openai-go: create (streaming and not), retrieve and
// cancel by id reaching the backend that holds the response, through a
// second gateway that shares nothing, and the door's error table.

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

type responsesE2E struct {
	sims []*sim.Server
	urls []string
	gw   *testGateway
	sdk  openai.Client
}

// startResponses serves n simulators counting with the qwen3 tokenizer and
// a gateway in front of them all, counting with the same one.
func startResponses(t *testing.T, n int, sc sim.Config) *responsesE2E {
	t.Helper()
	tok := qwen3(t)
	sc.Model = "m"
	sc.Tokenizer = sim.ModelTokenizer(tok)
	e := &responsesE2E{}
	for range n {
		s := sim.New(sc, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(func() { s.Close(); srv.Close() })
		e.sims, e.urls = append(e.sims, s), append(e.urls, srv.URL)
	}
	e.gw, e.sdk = e.gateway(t)
	return e
}

// gateway starts one more gateway over the same simulators: a replica
// sharing nothing with the others (or the first after a restart).
func (e *responsesE2E) gateway(t *testing.T) (*testGateway, openai.Client) {
	t.Helper()
	tg := startGatewayToks(t, qwen3(t), nil, e.urls...)
	sdk := openai.NewClient(option.WithBaseURL(tg.URL+"/v1/"), option.WithAPIKey("k"),
		option.WithHTTPClient(tg.client), option.WithMaxRetries(0))
	return tg, sdk
}

// owner is the index of the simulator holding id; it fails unless exactly
// one does.
func (e *responsesE2E) owner(t *testing.T, id string) int {
	t.Helper()
	own := -1
	for i, s := range e.sims {
		if s.HasResponse(id) {
			if own >= 0 {
				t.Fatalf("response %s is on simulators %d and %d", id, own, i)
			}
			own = i
		}
	}
	if own < 0 {
		t.Fatalf("no simulator holds response %s", id)
	}
	return own
}

// byIDRequests counts the GET and cancel requests for id each simulator
// received from the gateway's forwarding (probes included: they are GETs).
func (e *responsesE2E) byIDRequests(id, suffix, method string) []int {
	out := make([]int, len(e.sims))
	for i, s := range e.sims {
		for _, r := range s.Received() {
			if r.Method == method && r.Path == "/v1/responses/"+id+suffix {
				out[i]++
			}
		}
	}
	return out
}

// TestE2EResponsesRetrieveReachesOwner: responses created through one
// gateway on either of two backends are retrieved by id, through that
// gateway and through a second one sharing nothing (as another replica, or
// the first after a restart), from the backend that holds them, every
// time; a cancel by id reaches that backend too.
func TestE2EResponsesRetrieveReachesOwner(t *testing.T) {
	e := startResponses(t, 2, sim.Config{MaxModelLen: 4096})
	ctx := t.Context()
	var ids []string
	owners := map[int]int{}
	for i := 0; i < 8 || len(owners) < 2; i++ {
		if i == 64 {
			t.Fatalf("64 creates all went to one backend: %v", owners)
		}
		r, err := e.sdk.Responses.New(ctx, responses.ResponseNewParams{
			Model:        "m",
			Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
			Instructions: openai.String("Be brief."),
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "completed" || r.OutputText() == "" {
			t.Fatalf("create: status %q, text %q", r.Status, r.OutputText())
		}
		ids = append(ids, r.ID)
		owners[e.owner(t, r.ID)]++
	}
	gw2, sdk2 := e.gateway(t)
	for _, id := range ids {
		own := e.owner(t, id)
		for gi, sdk := range []openai.Client{e.sdk, sdk2, sdk2} { // the second read of gw2 takes its fast path
			got, err := sdk.Responses.Get(ctx, id, responses.ResponseGetParams{})
			if err != nil {
				t.Fatalf("gateway %d: get %s (on backend %d): %v", gi, id, own, err)
			}
			if got.ID != id || got.Status != "completed" {
				t.Fatalf("gateway %d: get %s: id %q status %q", gi, id, got.ID, got.Status)
			}
		}
		// The owner got every forwarded read (three) and one probe from
		// gw2, which shares no record with gw1 (gw1 recorded the owner
		// when it created the response and asked no one); the second read
		// through gw2 asked no one.
		if gets := e.byIDRequests(id, "", http.MethodGet); gets[own] != 4 || gets[1-own] > 1 {
			t.Fatalf("GET %s reached the backends %v; %d holds it", id, gets, own)
		}
		// A synchronous response cannot be cancelled: vLLM's 400, which
		// only the backend holding it gives (any other says 404).
		_, err := sdk2.Responses.Cancel(ctx, id)
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "Cannot cancel a synchronous response") {
			t.Fatalf("cancel %s: %v", id, err)
		}
		cancels := e.byIDRequests(id, "/cancel", http.MethodPost)
		if cancels[own] != 1 || cancels[1-own] != 0 {
			t.Fatalf("cancel %s reached the backends %v; only %d holds it", id, cancels, own)
		}
	}
	_ = gw2
}

// TestE2EResponsesCancelBackground: a background response still running
// on one of two backends is cancelled by id through a second gateway.
func TestE2EResponsesCancelBackground(t *testing.T) {
	gate := make(chan struct{})
	e := startResponses(t, 2, sim.Config{MaxModelLen: 4096})
	_, sdk2 := e.gateway(t) // warmed up before generation is held
	for _, s := range e.sims {
		warmupDone(t, s)
		s.Update(func(c *sim.Config) { c.TokenGate = gate }) // after the warm-up: generation now waits
	}
	ctx := t.Context()
	r, err := e.sdk.Responses.New(ctx, responses.ResponseNewParams{
		Model:      "m",
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("Write a long story.")},
		Background: openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	own := e.owner(t, r.ID)
	got, err := sdk2.Responses.Cancel(ctx, r.ID)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if got.ID != r.ID || got.Status != "cancelled" {
		t.Fatalf("cancel: id %q status %q", got.ID, got.Status)
	}
	if st := e.sims[own].Stats(); st.Cancelled != 1 {
		t.Fatalf("the owner's stats after cancel: %+v", st)
	}
	got, err = sdk2.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	if err != nil || got.Status != "cancelled" {
		t.Fatalf("get after cancel: %v %+v", err, got)
	}
}

// TestE2EResponsesUnknownID: an id no backend holds gets vLLM's 404, from
// a backend, through the SDK's typed error.
func TestE2EResponsesUnknownID(t *testing.T) {
	e := startResponses(t, 2, sim.Config{})
	for _, call := range []func() error{
		func() error {
			_, err := e.sdk.Responses.Get(t.Context(), "resp_nope", responses.ResponseGetParams{})
			return err
		},
		func() error { _, err := e.sdk.Responses.Cancel(t.Context(), "resp_nope"); return err },
	} {
		var ae *openai.Error
		if err := call(); !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Message != "Response with id 'resp_nope' not found." {
			t.Fatalf("unknown id: %v", err)
		}
	}
}

// TestE2EResponsesStreaming: a streamed create through the SDK ends with
// response.completed and no error: the gateway knows a Responses stream
// ends without [DONE] and does not end it as broken.
func TestE2EResponsesStreaming(t *testing.T) {
	e := startResponses(t, 1, sim.Config{MaxModelLen: 4096, OutputTokens: 5})
	stream := e.sdk.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Hello there.", responses.EasyInputMessageRoleUser),
		}},
		MaxOutputTokens: openai.Int(64),
	})
	var text strings.Builder
	var last string
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		last = ev.Type
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		if ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if last != "response.completed" || text.Len() == 0 || final.Usage.InputTokens == 0 {
		t.Fatalf("stream ended with %q, text %q, usage %+v", last, text.String(), final.Usage)
	}
	e.gw.quiesce()
	for _, l := range strings.Split(e.gw.gathered(t), "\n") {
		if strings.HasPrefix(l, "maitred_stream_errors_total{") && !strings.HasSuffix(l, " 0") {
			t.Fatalf("a complete Responses stream was counted broken: %s", l)
		}
	}
}

// TestResponsesCountedExactly: the gateway's count of a Responses input
// (instructions as the system message, message items through the chat
// template) is the backend's: a request whose input plus max_output_tokens
// fills the context exactly is forwarded, one token more is refused at the
// door with the counts.
func TestResponsesCountedExactly(t *testing.T) {
	e := startResponses(t, 1, sim.Config{MaxModelLen: 4096, OutputTokens: 2})
	body := `{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Hello"},{"type":"input_text","text":"there"}]},{"type":"message","role":"assistant","content":"Hi."},{"role":"user","content":"Again."}]`
	res := e.gw.post(t, "/v1/responses", body+`}`)
	out := readBodyT(t, res)
	var r struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || res.StatusCode != 200 || r.Usage.InputTokens == 0 {
		t.Fatalf("%d %s", res.StatusCode, out)
	}
	p := r.Usage.InputTokens
	fits := body + `,"max_output_tokens":` + strconv.Itoa(4096-p) + `}`
	if res := e.gw.post(t, "/v1/responses", fits); res.StatusCode != 200 {
		t.Fatalf("P+M = L: %d %s", res.StatusCode, readBodyT(t, res))
	} else {
		readBodyT(t, res)
	}
	before := len(clientRequests(e.sims[0], isResponsesPath))
	over := body + `,"max_output_tokens":` + strconv.Itoa(4097-p) + `}`
	res = e.gw.post(t, "/v1/responses", over)
	out = readBodyT(t, res)
	if res.StatusCode != 400 || !strings.Contains(out, `"code":"context_length_exceeded"`) || !strings.Contains(out, `"prompt_tokens":`+strconv.Itoa(p)) {
		t.Fatalf("P+M = L+1: %d %s", res.StatusCode, out)
	}
	if after := len(clientRequests(e.sims[0], isResponsesPath)); after != before {
		t.Fatalf("the over-long request reached the backend")
	}
}

// TestResponsesModelOptional: vLLM's Responses request may leave out
// model (the server's one model); with one model configured the gateway
// does the same.
func TestResponsesModelOptional(t *testing.T) {
	e := startResponses(t, 1, sim.Config{OutputTokens: 2})
	res := e.gw.post(t, "/v1/responses", `{"input":"hi","max_output_tokens":4}`)
	if body := readBodyT(t, res); res.StatusCode != 200 || !strings.Contains(body, `"status":"completed"`) {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
}

func isResponsesPath(p string) bool { return strings.HasPrefix(p, "/v1/responses") }

// TestResponsesBadInputsNeverReachBackend: the error table. Each bad input
// gets OpenAI's envelope from the door and the backend receives nothing.
func TestResponsesBadInputsNeverReachBackend(t *testing.T) {
	e := startResponses(t, 1, sim.Config{MaxModelLen: 32})
	long := strings.TrimSpace(strings.Repeat("word ", 40))
	cases := []struct {
		name, body  string
		status      int
		code, param string
	}{
		{"input number", `{"model":"m","input":5}`, 400, "invalid_type", "input"},
		{"input missing", `{"model":"m"}`, 400, "missing_required_parameter", "input"},
		{"item not object", `{"model":"m","input":["hi"]}`, 400, "invalid_type", "input[0]"},
		{"item role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, 400, "invalid_value", "input[0].role"},
		{"item role type", `{"model":"m","input":[{"role":1,"content":"x"}]}`, 400, "invalid_type", "input[0].role"},
		{"item content", `{"model":"m","input":[{"role":"user","content":5}]}`, 400, "invalid_type", "input[0].content"},
		{"item type", `{"model":"m","input":[{"type":5}]}`, 400, "invalid_type", "input[0].type"},
		{"instructions", `{"model":"m","input":"x","instructions":3}`, 400, "invalid_type", "instructions"},
		{"previous id", `{"model":"m","input":"x","previous_response_id":3}`, 400, "invalid_type", "previous_response_id"},
		{"max_output_tokens type", `{"model":"m","input":"x","max_output_tokens":"9"}`, 400, "invalid_type", "max_output_tokens"},
		{"max_output_tokens zero", `{"model":"m","input":"x","max_output_tokens":0}`, 400, "invalid_value", "max_output_tokens"},
		{"stream", `{"model":"m","input":"x","stream":"yes"}`, 400, "invalid_type", "stream"},
		{"background", `{"model":"m","input":"x","background":1}`, 400, "invalid_type", "background"},
		{"model type", `{"model":7,"input":"x"}`, 400, "invalid_type", "model"},
		{"unknown model", `{"model":"nope","input":"x"}`, 404, "model_not_found", "model"},
		{"key case", `{"model":"m","INPUT":"x"}`, 400, "invalid_json", "INPUT"},
		{"not json", `{"model":"m",`, 400, "invalid_json", "model"},
		{"over-long input", `{"model":"m","input":"` + long + `"}`, 400, "context_length_exceeded", "input"},
		{"over-long with output", `{"model":"m","input":"hi","max_output_tokens":30}`, 400, "context_length_exceeded", "input"},
		{"output over context", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"}],"max_output_tokens":32}`, 400, "context_length_exceeded", "input"},
	}
	for _, tc := range cases {
		res := e.gw.post(t, "/v1/responses", tc.body)
		body := readBodyT(t, res)
		var env struct {
			Error struct {
				Type  string  `json:"type"`
				Param *string `json:"param"`
				Code  *string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Code == nil {
			t.Errorf("%s: %d %s: not OpenAI's envelope", tc.name, res.StatusCode, body)
			continue
		}
		param := ""
		if env.Error.Param != nil {
			param = *env.Error.Param
		}
		if res.StatusCode != tc.status || *env.Error.Code != tc.code || param != tc.param || env.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s", tc.name, res.StatusCode, body)
		}
	}
	if got := clientRequests(e.sims[0], isResponsesPath); len(got) != 0 {
		t.Errorf("the simulator received %d Responses requests; the door should have refused them all (first: %s)", len(got), got[0].Body)
	}
	// Through the SDK: the typed error.
	_, err := e.sdk.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(long)},
	})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "context_length_exceeded" {
		t.Fatalf("sdk over-long: %v", err)
	}
}

// TestResponsesByIDRoutes: the by-id routes answer 405 with their methods
// in Allow, and an id that would make another path of the backend's
// (an encoded slash, a dot segment) is refused before any backend.
func TestResponsesByIDRoutes(t *testing.T) {
	e := startResponses(t, 1, sim.Config{})
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/responses/abc", "GET"},
		{http.MethodDelete, "/v1/responses/abc", "GET"},
		{http.MethodGet, "/v1/responses/abc/cancel", "POST"},
		{http.MethodGet, "/v1/responses", "POST"},
	} {
		req, _ := http.NewRequest(c.method, e.gw.URL+c.path, nil)
		res, err := e.gw.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readBodyT(t, res)
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q %s", c.method, c.path, res.StatusCode, res.Header.Get("Allow"), body)
		}
	}
	for _, p := range []string{"/v1/responses/..%2Fsim%2Fconfig", "/v1/responses/a%2F..%2F..%2Fversion/cancel", "/v1/responses/%2E%2E"} {
		req, _ := http.NewRequest(http.MethodGet, e.gw.URL+p, nil)
		if strings.HasSuffix(p, "/cancel") {
			req.Method = http.MethodPost
		}
		res, err := e.gw.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readBodyT(t, res)
		if res.StatusCode != http.StatusNotFound || !strings.Contains(body, `"code":"unknown_url"`) {
			t.Errorf("%s: %d %s", p, res.StatusCode, body)
		}
	}
	if got := clientRequests(e.sims[0], func(p string) bool { return !strings.HasPrefix(p, "/v1/models") && p != "/health" }); len(got) != 0 {
		for _, r := range got {
			t.Errorf("the backend received %s %s", r.Method, r.Path)
		}
	}
}

// TestE2EResponsesContinuationReachesOwner: a create that continues an
// earlier response (previous_response_id) is queued for the backend that
// holds it, through a gateway that never saw it: vLLM reads the earlier
// conversation from that server's memory and answers 404 anywhere else.
func TestE2EResponsesContinuationReachesOwner(t *testing.T) {
	e := startResponses(t, 2, sim.Config{MaxModelLen: 4096, OutputTokens: 3})
	ctx := t.Context()
	first, err := e.sdk.Responses.New(ctx, responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Remember the number 7.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	own := e.owner(t, first.ID)
	_, sdk2 := e.gateway(t)
	for i := range 10 {
		next, err := sdk2.Responses.New(ctx, responses.ResponseNewParams{
			Model:              "m",
			Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("Which number?")},
			PreviousResponseID: openai.String(first.ID),
		})
		if err != nil {
			t.Fatalf("continuation %d: %v", i, err)
		}
		if got := e.owner(t, next.ID); got != own {
			t.Fatalf("continuation %d ran on backend %d; the previous response is on %d", i, got, own)
		}
	}
}

// TestResponsesLookupBackendFailing: a backend that cannot answer whether
// it holds an id does not hide the one that does; when none holds it and
// one could not be asked, the answer is 502, not a 404 that may be false.
func TestResponsesLookupBackendFailing(t *testing.T) {
	s := sim.New(sim.Config{Model: "m", Tokenizer: sim.ModelTokenizer(qwen3(t))}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	simURL := httptestServer(t, s)
	broken := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
	})
	tg := startGatewayToks(t, qwen3(t), nil, simURL, broken.URL)
	// A response made on the simulator directly.
	res, err := http.Post(simURL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	var made struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(readBodyT(t, res)), &made); err != nil || made.ID == "" {
		t.Fatalf("create on the simulator: %v %q", err, made.ID)
	}
	req, _ := http.NewRequest(http.MethodGet, tg.URL+"/v1/responses/"+made.ID, nil)
	res, err = tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readBodyT(t, res); res.StatusCode != 200 || !strings.Contains(body, made.ID) {
		t.Fatalf("get %s: %d %s", made.ID, res.StatusCode, body)
	}
	req, _ = http.NewRequest(http.MethodGet, tg.URL+"/v1/responses/resp_nowhere", nil)
	res, err = tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readBodyT(t, res); res.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"code":"backend_unavailable"`) {
		t.Fatalf("unknown id with a failing backend: %d %s", res.StatusCode, body)
	}
}

// TestResponseOwnersBounded: the table of response owners keeps at most
// responseCacheSize ids, dropping the oldest first.
func TestResponseOwnersBounded(t *testing.T) {
	var o responseOwners
	for i := range responseCacheSize + 10 {
		o.put("resp_"+strconv.Itoa(i), admission.ResponseOwner{Key: strconv.Itoa(i)})
	}
	if n := len(o.m); n != responseCacheSize {
		t.Fatalf("%d ids held", n)
	}
	if _, ok := o.get("resp_9"); ok {
		t.Fatal("the oldest ids were kept")
	}
	if v, ok := o.get("resp_10"); !ok || v.Key != "10" {
		t.Fatal("a recent id was dropped")
	}
	o.put("resp_10", admission.ResponseOwner{Key: "again"})
	if n := len(o.m); n != responseCacheSize {
		t.Fatalf("%d ids held after a put of a known id", n)
	}
}

// TestE2EResponsesStreamReplay: a background stream created through one
// gateway is replayed by id (?stream=true&starting_after=N) through a
// second one, from the backend that holds it, and ends at
// response.completed without the gateway calling it broken.
func TestE2EResponsesStreamReplay(t *testing.T) {
	e := startResponses(t, 2, sim.Config{MaxModelLen: 4096, OutputTokens: 4})
	stream := e.sdk.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi.")},
		Background: openai.Bool(true),
	})
	var id string
	n := 0
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.created" {
			id = ev.Response.ID
		}
		n++
	}
	if err := stream.Err(); err != nil || id == "" {
		t.Fatalf("background stream: %v (id %q)", err, id)
	}
	tg2, _ := e.gateway(t)
	req, _ := http.NewRequest(http.MethodGet, tg2.URL+"/v1/responses/"+id+"?stream=true&starting_after=2", nil)
	res, err := tg2.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readBodyT(t, res)
	events := strings.Count(body, "\nevent: ") + 1
	if res.StatusCode != 200 || !strings.HasPrefix(body, "event: ") || events != n-3 ||
		!strings.HasSuffix(strings.TrimSpace(body[strings.LastIndex(body, "event: "):]), "}") ||
		!strings.Contains(body[strings.LastIndex(body, "event: "):], "event: response.completed") || strings.Contains(body, "backend_disconnected") {
		t.Fatalf("replay after event 2 of %d: %d %s", n, res.StatusCode, body)
	}
}

// TestResponsesHarmonyUncounted: vLLM builds a gpt-oss model's Responses
// prompt with its own harmony messages, not the chat template, so the door
// does not count it: an input the template would put over the context is
// forwarded for vLLM to judge (zero false rejections).
func TestResponsesHarmonyUncounted(t *testing.T) {
	// The fixture folder has no template: a harmony-shaped one stands in
	// for gpt-oss's.
	harmonyTemplate := "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}" +
		"{% if add_generation_prompt %}<|start|>assistant<|channel|>final<|message|>{% endif %}"
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "gptoss"), tokenize.LoadOptions{ChatTemplate: harmonyTemplate})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 64, Tokenizer: sim.ModelTokenizer(tok)}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	tg := startGatewayToks(t, tok, nil, httptestServer(t, s))
	long := strings.TrimSpace(strings.Repeat("word ", 100))
	res := tg.post(t, "/v1/responses", `{"model":"m","input":"`+long+`"}`)
	body := readBodyT(t, res)
	if got := clientRequests(s, isResponsesPath); len(got) != 1 {
		t.Fatalf("the request did not reach the backend (%d %s)", res.StatusCode, body)
	}
	// Chat stays counted for the same model.
	res = tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+long+`"}]}`)
	if body := readBodyT(t, res); res.StatusCode != 400 || !strings.Contains(body, "context_length_exceeded") {
		t.Fatalf("chat: %d %s", res.StatusCode, body)
	}
}
