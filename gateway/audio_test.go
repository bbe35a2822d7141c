package gateway

// The audio APIs (/v1/audio/transcriptions, /v1/audio/translations)
// through the gateway, against the simulator, over real HTTP: through
// openai-go, bad inputs, the upload's limit, and its memory. The form's
// strict reading and the upload read whole before it queues:
// audio_form_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// testAudio is a stand-in upload: 3.5 s of "PCM".
var testAudio = bytes.Repeat([]byte("RIFFwave"), 14000)

type audioE2E struct {
	sim *sim.Server
	gw  *testGateway
	sdk openai.Client
	// probe, when set, is called after each MiB of a body the simulator
	// reads.
	probe atomic.Pointer[func()]
}

// startAudio serves one simulator for model "m" and a gateway in front.
func startAudio(t *testing.T, mutate func(*config.Config)) *audioE2E {
	t.Helper()
	e := &audioE2E{}
	e.sim = sim.New(sim.Config{Model: "m", OutputTokens: 4}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	h := e.sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := e.probe.Load(); p != nil {
			r.Body = io.NopCloser(&probed{r: r.Body, probe: *p})
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { e.sim.Close(); srv.Close() })
	e.gw = startGateway(t, mutate, srv.URL)
	e.sdk = openai.NewClient(option.WithBaseURL(e.gw.URL+"/v1/"), option.WithAPIKey("k"),
		option.WithHTTPClient(e.gw.client), option.WithMaxRetries(0))
	return e
}

// engineRequests is the number of requests that reached the simulator's
// engine routes (warm-up included).
func (e *audioE2E) engineRequests() int { return e.sim.Stats().Requests }

// TestAudioSDK: openai-go's transcription (plain and streamed) and
// translation through maitred reach the simulator and come back whole.
// openai-go writes `file` before `model`: the upload is spooled, then
// forwarded.
func TestAudioSDK(t *testing.T) {
	e := startAudio(t, nil)
	ctx := context.Background()
	res, err := e.sdk.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File: openai.File(bytes.NewReader(testAudio), "a.wav", "audio/wav"), Model: "m",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text == "" || res.AsTranscription().Usage.AsDuration().Seconds != 4 { // ceil(3.5)
		t.Errorf("transcription = %s", res.RawJSON())
	}
	want := res.Text

	tr, err := e.sdk.Audio.Translations.New(ctx, openai.AudioTranslationNewParams{
		File: openai.File(bytes.NewReader(testAudio), "a.wav", "audio/wav"), Model: "m",
	})
	if err != nil || tr.Text != want {
		t.Errorf("translation = %v, %v; want text %q", tr, err, want)
	}

	// Streamed: vLLM's chunks (choices[].delta.content), passed on event
	// by event and ended by [DONE].
	st := e.sdk.Audio.Transcriptions.NewStreaming(ctx, openai.AudioTranscriptionNewParams{
		File: openai.File(bytes.NewReader(testAudio), "a.wav", "audio/wav"), Model: "m",
	})
	var text strings.Builder
	var object string
	for st.Next() {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(st.Current().RawJSON()), &c); err != nil {
			t.Fatal(err)
		}
		object = c.Object
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != want || object != "transcription.chunk" {
		t.Errorf("streamed text %q (object %q), want %q", text.String(), object, want)
	}
	e.gw.quiesce()
	m := e.gw.gathered(t)
	// (The streamed one is not checked here: openai-go closes the body
	// at [DONE], sometimes before the backend's stream has ended, and the
	// gateway then logs it as client_closed, as for chat.)
	for _, want := range []string{
		`maitred_requests_total{code="200",endpoint="/v1/audio/transcriptions",model="m"} `,
		`maitred_requests_total{code="200",endpoint="/v1/audio/translations",model="m"} 1`,
		`maitred_admission_uncounted_total{model="m",reason="endpoint_not_counted"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s\n%s", want, m)
		}
	}
}

// form builds a multipart body with the fields and a file part, in the
// order given: a "file" name is the upload.
func form(t *testing.T, parts ...string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(parts); i += 2 {
		if parts[i] == "file" {
			fw, err := mw.CreateFormFile("file", "a.wav")
			if err != nil {
				t.Fatal(err)
			}
			fw.Write([]byte(parts[i+1]))
			continue
		}
		mw.WriteField(parts[i], parts[i+1])
	}
	mw.Close()
	return mw.FormDataContentType(), b.Bytes()
}

func (e *audioE2E) postAudio(t *testing.T, ct string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.gw.URL+"/v1/audio/transcriptions", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	res, err := e.gw.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, readBodyT(t, res)
}

// TestAudioBadInputs: what the gateway can tell is wrong is answered in
// OpenAI's envelope and the backend receives nothing.
func TestAudioBadInputs(t *testing.T) {
	e := startAudio(t, func(c *config.Config) { c.MaxAudioBodyBytes = 64 << 10 })
	before := e.engineRequests()
	wav := string(testAudio[:1000])
	big := strings.Repeat("x", 64<<10+formAllowance+1)
	cases := []struct {
		name   string
		ct     string
		body   []byte
		status int
		code   string
		param  string
	}{
		{"json", "application/json", []byte(`{"model":"m"}`), 400, codeUnsupportedMedia, ""},
		{"no content type", "", []byte(`x`), 400, codeUnsupportedMedia, ""},
		{"no boundary", "multipart/form-data", []byte(`x`), 400, codeUnsupportedMedia, ""},
		{"no model", "", nil, 400, codeMissingParam, "model"},
		{"unknown model", "", nil, 404, codeModelNotFound, "model"},
		{"two models", "", nil, 400, codeInvalidForm, "model"},
		{"bad stream", "", nil, 400, "invalid_type", "stream"},
		{"bad max_completion_tokens", "", nil, 400, "invalid_type", "max_completion_tokens"},
		{"malformed", "multipart/form-data; boundary=zz", []byte("--zz\r\nbroken"), 400, codeInvalidForm, ""},
		{"too large, spooled", "", nil, 413, codeRequestTooLarge, ""},
	}
	forms := map[string][]string{
		"no model":                  {"file", wav, "language", "en"},
		"unknown model":             {"file", wav, "model", "nope"},
		"two models":                {"file", wav, "model", "m", "model", "m"},
		"bad stream":                {"file", wav, "model", "m", "stream", "maybe"},
		"bad max_completion_tokens": {"file", wav, "model", "m", "max_completion_tokens", "1.5"},
		"too large, spooled":        {"file", big, "model", "m"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct, body := c.ct, c.body
			if f, ok := forms[c.name]; ok {
				ct, body = form(t, f...)
			}
			// A reader without a length: the gateway sees a chunked body
			// and cannot refuse the large one before reading it.
			status, got := e.postAudio(t, ct, io.MultiReader(bytes.NewReader(body)))
			var env struct {
				Error struct {
					Type  string  `json:"type"`
					Code  string  `json:"code"`
					Param *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(got), &env); err != nil || status != c.status || env.Error.Code != c.code ||
				(c.param != "" && (env.Error.Param == nil || *env.Error.Param != c.param)) {
				t.Errorf("%d %s, want %d code %s param %q", status, got, c.status, c.code, c.param)
			}
		})
	}
	if n := e.engineRequests(); n != before {
		t.Errorf("the backend received %d requests for bad inputs", n-before)
	}
}

// TestAudioTooLargeDeclared: a declared length over the limit is refused
// before any byte of the body is read.
func TestAudioTooLargeDeclared(t *testing.T) {
	e := startAudio(t, func(c *config.Config) { c.MaxAudioBodyBytes = 64 << 10 })
	before := e.engineRequests()
	ct, body := form(t, "model", "m", "file", strings.Repeat("x", 64<<10+formAllowance))
	status, got := e.postAudio(t, ct, bytes.NewReader(body))
	if status != 413 || !strings.Contains(got, "max_audio_body_bytes") {
		t.Errorf("%d %s, want 413", status, got)
	}
	if n := e.engineRequests(); n != before {
		t.Errorf("the backend received %d requests", n-before)
	}
}

// patterned is an endless reader of a repeating pattern; it calls probe
// after each MiB it gives out.
type patterned struct {
	n     int64
	limit int64
	probe func()
}

func (p *patterned) Read(b []byte) (int, error) {
	if p.n >= p.limit {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.limit-p.n)]
	for i := range b {
		b[i] = byte((p.n + int64(i)) % 251)
	}
	before := p.n
	p.n += int64(len(b))
	if p.probe != nil && p.n>>20 != before>>20 {
		p.probe()
	}
	return len(b), nil
}

// probed calls probe after each MiB read through it.
type probed struct {
	r     io.Reader
	n     int64
	probe func()
}

func (p *probed) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if (p.n+int64(n))>>20 != p.n>>20 {
		p.probe()
	}
	p.n += int64(n)
	return n, err
}

// heapPeak samples the heap in use after a collection: what is still
// reachable, the gateway's buffers included.
type heapPeak struct {
	mu   sync.Mutex
	base uint64
	peak uint64
}

func (h *heapPeak) sample() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.mu.Lock()
	h.peak = max(h.peak, ms.HeapInuse)
	h.mu.Unlock()
}

// TestAudioUploadSpooled: a 25 MiB upload through maitred, with the model
// before the file and after it (openai-go's order), is spooled to disk,
// then forwarded: the heap in use grows by less than 8 MiB while it passes,
// and the backend hears all of it.
func TestAudioUploadSpooled(t *testing.T) {
	e := startAudio(t, nil)
	const size = 25 << 20
	for _, order := range []string{"model first", "file first"} {
		t.Run(order, func(t *testing.T) {
			h := &heapPeak{}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			h.base = ms.HeapInuse
			sample := h.sample
			e.probe.Store(&sample) // and while the backend reads it
			defer e.probe.Store(nil)
			pr, pw := io.Pipe()
			mw := multipart.NewWriter(pw)
			go func() {
				if order == "model first" {
					mw.WriteField("model", "m")
				}
				fw, err := mw.CreateFormFile("file", "big.wav")
				if err == nil {
					_, err = io.Copy(fw, &patterned{limit: size, probe: h.sample})
				}
				if err == nil && order == "file first" {
					err = mw.WriteField("model", "m")
				}
				if err == nil {
					err = mw.Close()
				}
				pw.CloseWithError(err)
			}()
			status, got := e.postAudio(t, mw.FormDataContentType(), pr)
			if status != 200 {
				t.Fatalf("%d %s", status, got)
			}
			var res struct {
				Usage struct {
					Seconds int `json:"seconds"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(got), &res); err != nil || res.Usage.Seconds != (size+audioBytesPerSecondForTest-1)/audioBytesPerSecondForTest {
				t.Errorf("answer %s: the backend did not hear the whole upload", got)
			}
			grew := int64(h.peak) - int64(h.base)
			t.Logf("%s: heap in use grew by at most %.1f MiB during a %d MiB upload", order, float64(grew)/(1<<20), size>>20)
			if grew >= 8<<20 {
				t.Errorf("heap in use grew by %.1f MiB during the upload, want < 8 MiB", float64(grew)/(1<<20))
			}
		})
	}
}

// audioBytesPerSecondForTest is the simulator's rate (16 kHz 16-bit PCM):
// usage.seconds tells how many bytes it heard.
const audioBytesPerSecondForTest = 32000

// TestAudioUploadRetried: a spooled upload is replayed on another backend
// when the first cannot be connected to.
func TestAudioUploadRetried(t *testing.T) {
	s := sim.New(sim.Config{Model: "m", OutputTokens: 4}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	live := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); live.Close() })
	dead := httptest.NewServer(s.Handler())
	tg := startGateway(t, func(c *config.Config) { c.EjectAfter = 100 }, dead.URL, live.URL)
	dead.Close() // ready at probe time, refusing now
	ok := 0
	for range 4 {
		ct, body := form(t, "file", string(testAudio), "model", "m")
		req, _ := http.NewRequest(http.MethodPost, tg.URL+"/v1/audio/transcriptions", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		res, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if b := readBodyT(t, res); res.StatusCode == 200 {
			ok++
		} else {
			t.Errorf("%d %s", res.StatusCode, b)
		}
	}
	if ok != 4 {
		t.Errorf("%d of 4 answered", ok)
	}
	tg.quiesce()
	if m := tg.gathered(t); !strings.Contains(m, `kind="connect_failed"`) {
		t.Errorf("no attempt reached the dead backend:\n%s", m)
	}
}

// TestAudioUploadFailsWhileSpooling: an upload that passes the limit, or
// stalls past read_audio_body_timeout, after its model field or before it
// is the client's failure: 413 or 408, never a backend error, and the
// backend is not blamed.
func TestAudioUploadFailsWhileSpooling(t *testing.T) {
	e := startAudio(t, func(c *config.Config) {
		c.MaxAudioBodyBytes = 64 << 10
		c.ReadAudioBodyTimeout = config.Duration(300 * time.Millisecond)
	})
	for _, c := range []struct {
		name       string
		modelFirst bool
		stall      bool
		status     int
		config     string
	}{
		{"too large, model first", true, false, 413, "max_audio_body_bytes"},
		{"stalled, model first", true, true, 408, "read_audio_body_timeout"},
		{"stalled, file first", false, true, 408, "read_audio_body_timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			mw := multipart.NewWriter(pw)
			go func() {
				if c.modelFirst {
					mw.WriteField("model", "m")
				}
				fw, err := mw.CreateFormFile("file", "a.wav")
				if err != nil {
					return
				}
				if c.stall {
					fw.Write(testAudio[:1000]) // then nothing until the answer came
					return
				}
				io.Copy(fw, &patterned{limit: 64<<10 + formAllowance + 1})
				mw.WriteField("model", "m")
				pw.CloseWithError(mw.Close())
			}()
			status, got := e.postAudio(t, mw.FormDataContentType(), pr)
			if status != c.status || !strings.Contains(got, c.config) {
				t.Errorf("%d %s, want %d naming %s", status, got, c.status, c.config)
			}
		})
	}
	e.gw.quiesce()
	if m := e.gw.gathered(t); strings.Contains(m, "maitred_backend_errors_total{") {
		t.Errorf("the client's failures were counted against the backend:\n%s", m)
	}
}
