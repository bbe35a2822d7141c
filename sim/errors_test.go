package sim

import (
	"net/http"
	"strings"
	"testing"
)

func TestErrors(t *testing.T) {
	const chatHi = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name     string
		cfg      Config
		method   string // default POST
		path     string // default chat
		body     string
		hdr      []string
		status   int
		want     string // exact body, if set
		contains []string
		rejected int // Stats.Rejected afterwards (-1: don't check)
	}{
		{
			name: "context overflow prompt+max_tokens", cfg: Config{MaxModelLen: 100},
			body: `{` + chatHi + `,"max_tokens":95}`, status: 400,
			want:     `{"error":{"message":"This model's maximum context length is 100 tokens. However, you requested 95 output tokens and your prompt contains at least 6 input tokens, for a total of at least 101 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=6)","type":"BadRequestError","param":"input_tokens","code":400}}`,
			rejected: 1,
		},
		{
			name: "context overflow prompt alone", cfg: Config{MaxModelLen: 10},
			body: `{"messages":[{"role":"user","content":"aaaa bbbb cccc dddd"}]}`, status: 400,
			want:     `{"error":{"message":"This model's maximum context length is 10 tokens. However, you requested 0 output tokens and your prompt contains at least 11 input tokens, for a total of at least 11 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=11)","type":"BadRequestError","param":"input_tokens","code":400}}`,
			rejected: 1,
		},
		{
			name: "prompt exactly fills context", cfg: Config{MaxModelLen: 10},
			body: `{"messages":[{"role":"user","content":"aaaa bbbb cccc"}]}`, status: 400,
			want:     `{"error":{"message":"max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)","type":"BadRequestError","param":"max_tokens","code":400}}`,
			rejected: 1,
		},
		{
			name: "token-id prompt reports exact count", cfg: Config{MaxModelLen: 10}, path: "/v1/completions",
			body: `{"prompt":[1,2,3,4,5,6,7,8,9,10],"max_tokens":5}`, status: 400,
			contains: []string{"you requested 5 output tokens and your prompt contains 10 input tokens, for a total of 15 tokens."},
			rejected: 1,
		},
		{
			name: "completions default budget counts", cfg: Config{MaxModelLen: 17}, path: "/v1/completions",
			body: `{"prompt":"hi"}`, status: 400,
			contains: []string{"you requested 16 output tokens and your prompt contains at least 2 input tokens, for a total of at least 18 tokens."},
			rejected: 1,
		},
		{
			name: "max_completion_tokens above max_model_len", cfg: Config{MaxModelLen: 100},
			body: `{` + chatHi + `,"max_completion_tokens":101}`, status: 400,
			want:     `{"error":{"message":"max_completion_tokens=101 cannot be greater than max_model_len=max_total_tokens=100. Please request fewer output tokens. (parameter=max_completion_tokens, value=101)","type":"BadRequestError","param":"max_completion_tokens","code":400}}`,
			rejected: 1,
		},
		{
			name: "max_tokens zero", body: `{` + chatHi + `,"max_tokens":0}`, status: 400,
			want:     `{"error":{"message":"max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)","type":"BadRequestError","param":"max_tokens","code":400}}`,
			rejected: 1,
		},
		{
			name: "greedy n>1", body: `{` + chatHi + `,"n":2,"temperature":0}`, status: 400,
			want:     `{"error":{"message":"n must be 1 when using greedy sampling, got 2. (parameter=n, value=2)","type":"BadRequestError","param":"n","code":400}}`,
			rejected: 1,
		},
		{
			name: "unknown model", body: `{"model":"gpt-4",` + chatHi + `}`, status: 404,
			want:     "{\"error\":{\"message\":\"The model `gpt-4` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}",
			rejected: 1,
		},
		{
			name: "empty model means served model", body: `{"model":"",` + chatHi + `,"max_tokens":1}`, status: 200, rejected: 0,
		},
		{
			name: "auth missing", cfg: Config{APIKey: "sekret"}, body: `{` + chatHi + `}`, status: 401,
			want: `{"error":"Unauthorized"}`, rejected: 1,
		},
		{
			name: "auth wrong", cfg: Config{APIKey: "sekret"}, body: `{` + chatHi + `}`, hdr: []string{"Authorization", "Bearer nope"},
			status: 401, want: `{"error":"Unauthorized"}`, rejected: 1,
		},
		{
			name: "auth ok", cfg: Config{APIKey: "sekret"}, body: `{` + chatHi + `,"max_tokens":1}`,
			hdr: []string{"Authorization", "Bearer sekret"}, status: 200, rejected: 0,
		},
		{
			name: "auth guards models", cfg: Config{APIKey: "sekret"}, method: "GET", path: "/v1/models",
			status: 401, want: `{"error":"Unauthorized"}`, rejected: 0,
		},
		{
			name: "auth does not guard health", cfg: Config{APIKey: "sekret"}, method: "GET", path: "/health",
			status: 200, want: ``, rejected: -1,
		},
		{
			name: "auth does not guard tokenize", cfg: Config{APIKey: "sekret"}, path: "/tokenize",
			body: `{"prompt":"hi"}`, status: 200, rejected: -1,
		},
		{
			name: "fail status 500", cfg: Config{FailStatus: 500}, body: `{` + chatHi + `}`, status: 500,
			want:     `{"error":{"message":"EngineCore encountered an issue. See stack trace (above) for the root cause.","type":"InternalServerError","param":null,"code":500}}`,
			rejected: 0,
		},
		{
			name: "fail status 503", cfg: Config{FailStatus: 503}, path: "/v1/completions", body: `{"prompt":"x"}`, status: 503,
			want:     `{"error":{"message":"Service Unavailable","type":"ServiceUnavailableError","param":null,"code":503}}`,
			rejected: 0,
		},
		{
			name: "fail status custom message", cfg: Config{FailStatus: 429, FailMessage: "slow down"}, body: `{` + chatHi + `}`, status: 429,
			want:     `{"error":{"message":"slow down","type":"TooManyRequestsError","param":null,"code":429}}`,
			rejected: 1,
		},
		{
			name: "stream_options without stream", body: `{` + chatHi + `,"stream_options":{"include_usage":true}}`, status: 400,
			contains: []string{`"type":"Bad Request"`, `"param":"stream_options"`, "Value error, Stream options can only be defined when `stream=True`."},
			rejected: 1,
		},
		{
			name: "malformed JSON", body: `{"messages":`, status: 400,
			contains: []string{`"type":"Bad Request"`, "JSON decode error", `"code":400`}, rejected: 1,
		},
		{
			name: "missing messages", body: `{"model":"demo"}`, status: 400,
			contains: []string{`"type":"Bad Request"`, `"param":"body.messages"`, "Field required"}, rejected: 1,
		},
		{
			name: "wrong type", body: `{` + chatHi + `,"max_tokens":"five"}`, status: 400,
			contains: []string{`"param":"body.max_tokens"`, "Input should be a valid integer"}, rejected: 1,
		},
		{
			name: "not json content type", body: `{` + chatHi + `}`, hdr: []string{"Content-Type", "text/plain"}, status: 400,
			want:     `{"error":{"message":"Unsupported Media Type: Only 'application/json' is allowed","type":"Bad Request","param":null,"code":400}}`,
			rejected: 1,
		},
		{
			// vLLM cuts at ';' without trimming: the space makes it another type.
			name: "space before the parameters", body: `{` + chatHi + `}`, hdr: []string{"Content-Type", "application/json ; charset=utf-8"}, status: 400,
			want:     `{"error":{"message":"Unsupported Media Type: Only 'application/json' is allowed","type":"Bad Request","param":null,"code":400}}`,
			rejected: 1,
		},
		{
			name: "upper case with parameters", body: `{` + chatHi + `}`, hdr: []string{"Content-Type", "Application/JSON;charset=utf-8"}, status: 200,
		},
		{
			name: "unknown route", method: "GET", path: "/v1/nope", status: 404,
			want: `{"error":{"message":"Not Found","type":"Not Found","param":null,"code":404}}`, rejected: 0,
		},
		{
			name: "wrong method", method: "GET", path: "/v1/chat/completions", status: 405,
			want: `{"error":{"message":"Method Not Allowed","type":"Method Not Allowed","param":null,"code":405}}`, rejected: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			method, path := tc.method, tc.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/chat/completions"
			}
			resp, err := e.send(t.Context(), method, path, tc.body, tc.hdr...)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if tc.want != "" || tc.status == 200 && path == "/health" {
				if body != tc.want {
					t.Errorf("body =\n%s\nwant\n%s", body, tc.want)
				}
			}
			for _, c := range tc.contains {
				if !strings.Contains(body, c) {
					t.Errorf("body %s\ndoes not contain %s", body, c)
				}
			}
			if tc.status >= 400 && resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("content-type = %q", resp.Header.Get("Content-Type"))
			}
			if tc.rejected >= 0 {
				if got := e.sim.Stats().Rejected; got != tc.rejected {
					t.Errorf("Stats.Rejected = %d, want %d", got, tc.rejected)
				}
			}
		})
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}
