package sim

import (
	"bytes"
	"context"
	"hash/fnv"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// audioBytes is a stand-in upload: 3.5 s of "PCM".
var audioBytes = bytes.Repeat([]byte("RIFFwave"), 14000)

func audioOffset(b []byte) int {
	h := fnv.New64a()
	h.Write(b)
	return int(h.Sum64() % uint64(len(words)))
}

// multipartBody builds a form with a file part (nil: none) and fields.
func multipartBody(t *testing.T, file io.Reader, fields ...string) (string, io.Reader) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for i := 0; i+1 < len(fields); i += 2 {
			_ = mw.WriteField(fields[i], fields[i+1])
		}
		if file != nil {
			fw, err := mw.CreateFormFile("file", "a.wav")
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := io.Copy(fw, file); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	return mw.FormDataContentType(), pr
}

func (e *testEnv) postForm(path, contentType string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestAudioTranscriptionSDK(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 4})
	c := e.openai("")
	res, err := c.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
		File:  openai.File(bytes.NewReader(audioBytes), "a.wav", "audio/wav"),
		Model: "demo",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := GeneratedText(audioOffset(audioBytes), 4)
	if res.Text != want {
		t.Errorf("text = %q, want %q", res.Text, want)
	}
	if u := res.AsTranscription().Usage.AsDuration(); u.Type != "duration" || u.Seconds != 4 { // ceil(3.5)
		t.Errorf("usage = %+v", res.AsTranscription().Usage)
	}
	// Deterministic: the same upload gives the same text; another upload
	// (probably) another.
	again, err := c.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
		File: openai.File(bytes.NewReader(audioBytes), "b.wav", "audio/wav"), Model: "demo",
	})
	if err != nil || again.Text != want {
		t.Errorf("again = %v, %v", again, err)
	}
	tr, err := c.Audio.Translations.New(context.Background(), openai.AudioTranslationNewParams{
		File: openai.File(bytes.NewReader(audioBytes), "a.wav", "audio/wav"), Model: "demo",
	})
	if err != nil || tr.Text != want {
		t.Errorf("translation = %v, %v", tr, err)
	}
	st := e.sim.Stats()
	if st.Requests != 3 || st.Completed != 3 {
		t.Errorf("stats = %+v", st)
	}
	// The upload is not kept.
	for _, r := range e.sim.Received() {
		if len(r.Body) != 0 {
			t.Errorf("%s kept a %d-byte body", r.Path, len(r.Body))
		}
	}
}

func TestAudioShapes(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 2})
	off := audioOffset(audioBytes)
	text := GeneratedText(off, 2)

	ct, body := multipartBody(t, bytes.NewReader(audioBytes), "model", "demo")
	code, _, b := e.postForm("/v1/audio/translations", ct, body)
	if code != http.StatusOK || string(b) != `{"text":"`+text+`"}` {
		t.Errorf("translation: %d %s", code, b)
	}
	ct, body = multipartBody(t, bytes.NewReader(audioBytes), "response_format", "verbose_json", "language", "de")
	code, _, b = e.postForm("/v1/audio/transcriptions", ct, body)
	m := decode[map[string]any](t, string(b))
	if code != http.StatusOK || m["duration"] != "3.5" || m["language"] != "de" || m["text"] != text || len(m["segments"].([]any)) != 1 {
		t.Errorf("verbose_json: %d %s", code, b)
	}

	// Streaming: chat-like chunks, the stop chunk, the usage chunk, [DONE].
	ct, body = multipartBody(t, bytes.NewReader(audioBytes), "stream", "true", "stream_include_usage", "true")
	code, hdr, b := e.postForm("/v1/audio/transcriptions", ct, body, "X-Request-Id", "x1")
	if code != http.StatusOK || hdr.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("stream: %d %s", code, b)
	}
	frames, err := readSSE(bytes.NewReader(b))
	if err != nil || len(frames) != 5 || frames[4] != "[DONE]" {
		t.Fatalf("frames = %q, %v", frames, err)
	}
	first := decode[map[string]any](t, frames[0])
	if first["id"] != "transcribe-x1" || first["object"] != "transcription.chunk" || first["model"] != nil {
		t.Errorf("first chunk = %s", frames[0])
	}
	if !strings.HasSuffix(frames[0], `"choices":[{"delta":{"content":"`+tokenText(off, 0)+`"}}]}`) ||
		!strings.HasSuffix(frames[2], `"choices":[{"delta":{"content":""},"finish_reason":"stop","stop_reason":null}]}`) ||
		!strings.HasSuffix(frames[3], `"choices":[],"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2}}`) ||
		strings.Contains(frames[3], `"model"`) {
		t.Errorf("frames:\n%s", strings.Join(frames, "\n"))
	}
}

func TestAudioErrors(t *testing.T) {
	big := io.LimitReader(zeroReader{}, 25<<20+1) // streamed, never held by the test either
	for _, tc := range []struct {
		name    string
		cfg     Config
		ct      func(t *testing.T) (string, io.Reader)
		status  int
		typ     string
		param   any
		message string
	}{
		{"json body", Config{}, func(*testing.T) (string, io.Reader) {
			return "application/json", strings.NewReader(`{"model":"demo"}`)
		}, 400, "Bad Request", "body.file", ""},
		{"no file", Config{}, func(t *testing.T) (string, io.Reader) { return multipartBody(t, nil, "model", "demo") },
			400, "Bad Request", "body.file", ""},
		{"file as a string", Config{}, func(t *testing.T) (string, io.Reader) { return multipartBody(t, nil, "file", "abc") },
			422, "Unprocessable Entity", nil, "Expected 'file' to be a file-like object, not 'str'."},
		{"stream options without stream", Config{}, func(t *testing.T) (string, io.Reader) {
			return multipartBody(t, bytes.NewReader(audioBytes), "stream_include_usage", "false")
		}, 400, "Bad Request", "stream_include_usage", ""},
		{"bad response_format", Config{}, func(t *testing.T) (string, io.Reader) {
			return multipartBody(t, bytes.NewReader(audioBytes), "response_format", "mp3")
		}, 400, "Bad Request", "body.response_format", ""},
		{"srt unsupported", Config{}, func(t *testing.T) (string, io.Reader) {
			return multipartBody(t, bytes.NewReader(audioBytes), "response_format", "srt")
		}, 400, "BadRequestError", nil, "Currently only support response_format: `text`, `json` or `verbose_json`"},
		{"verbose_json stream", Config{}, func(t *testing.T) (string, io.Reader) {
			return multipartBody(t, bytes.NewReader(audioBytes), "response_format", "verbose_json", "stream", "true")
		}, 400, "BadRequestError", nil, "verbose_json format doesn't support streaming case"},
		{"bad temperature", Config{}, func(t *testing.T) (string, io.Reader) {
			return multipartBody(t, bytes.NewReader(audioBytes), "temperature", "hot")
		}, 400, "Bad Request", "body.temperature", ""},
		{"unknown model", Config{}, func(t *testing.T) (string, io.Reader) {
			return multipartBody(t, bytes.NewReader(audioBytes), "model", "x")
		}, 404, "NotFoundError", "model", "The model `x` does not exist."},
		{"file over 25 MiB", Config{}, func(t *testing.T) (string, io.Reader) { return multipartBody(t, big) },
			400, "BadRequestError", "audio_filesize_mb", "Maximum file size exceeded (parameter=audio_filesize_mb, value=25.000000953674316)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			ct, body := tc.ct(t)
			code, _, b := e.postForm("/v1/audio/transcriptions", ct, body)
			checkOpenAIError(t, code, b, tc.status, tc.typ, tc.param, tc.message)
			if st := e.sim.Stats(); st.Requests != 1 || st.Rejected != 1 || st.Running != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
