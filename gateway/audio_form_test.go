package gateway

// The audio uploads' form, read strictly: a form the gateway and vLLM
// (Starlette over python-multipart) could read differently is refused
// before any backend; and an upload is read whole before it takes a
// backend slot. Real HTTP against the simulator; raw sockets where the
// bytes on the wire matter.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
)

// rawPart is one part of a hand-written form with boundary B: its header
// lines exactly as sent (each ending in CRLF), then its body.
func rawPart(headers, body string) string { return "--B\r\n" + headers + "\r\n" + body + "\r\n" }

// rawField is a plain field of a hand-written form.
func rawField(name, value string) string {
	return rawPart("Content-Disposition: form-data; name=\""+name+"\"\r\n", value)
}

const rawEnd = "--B--\r\n"

// rawFile is the file part of a hand-written form.
var rawFile = rawPart("Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n", string(testAudio[:2000]))

// keyedAudio is a gateway in front of one simulator serving model "m",
// with a second model "other" on the same backend and key "sk-k" allowed
// only "m".
func keyedAudio(t *testing.T, mutate func(*config.Config)) *audioE2E {
	return startAudio(t, func(c *config.Config) {
		withOther(c)
		c.Auth = &config.AuthConfig{Keys: []config.KeyConfig{{Name: "k", SHA256: digestOf("sk-k"), Models: []string{"m"}}}}
		if mutate != nil {
			mutate(c)
		}
	})
}

// postForm posts body to the transcriptions endpoint with key sk-k and
// the given Content-Type headers (one each).
func (e *audioE2E) postForm(t *testing.T, body string, cts ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.gw.URL+"/v1/audio/transcriptions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range cts {
		req.Header.Add("Content-Type", ct)
	}
	req.Header.Set("Authorization", "Bearer sk-k")
	res, err := e.gw.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, readBodyT(t, res)
}

// TestAudioAmbiguousFormRefused: a form the gateway and vLLM could read
// differently is refused with 400 in OpenAI's envelope and the backend
// receives nothing. The first two are the issue's: a second `model` field
// after the file (vLLM reads the last one: model "other", outside the
// key's allow-list), and a part whose Content-Disposition repeats `name`
// (Go's parser skipped the part; python-multipart takes the last name).
func TestAudioAmbiguousFormRefused(t *testing.T) {
	e := keyedAudio(t, nil)
	const ct = "multipart/form-data; boundary=B"
	m := rawField("model", "m")
	other := func(headers string) string { return m + rawFile + rawPart(headers, "other") + rawEnd }
	cases := []struct {
		name  string
		cts   []string
		body  string
		code  string
		param string
	}{
		{"model after the file", nil, m + rawFile + rawField("model", "other") + rawEnd, codeInvalidForm, "model"},
		{"model twice before the file", nil, m + rawField("model", "other") + rawFile + rawEnd, codeInvalidForm, "model"},
		{"repeated name", nil, other("Content-Disposition: form-data; name=\"x\"; name=\"model\"\r\n"), codeInvalidForm, ""},
		{"repeated name, another case", nil, other("Content-Disposition: form-data; name=\"x\"; NAME=\"model\"\r\n"), codeInvalidForm, ""},
		{"repeated filename", nil, m + rawPart("Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"; filename=\"b.wav\"\r\n", "x") + rawEnd, codeInvalidForm, ""},
		{"RFC 2231 name", nil, other("Content-Disposition: form-data; name*=utf-8''model\r\n"), codeInvalidForm, ""},
		{"RFC 2231 continuation", nil, other("Content-Disposition: form-data; name=\"x\"; name*0=\"model\"\r\n"), codeInvalidForm, ""},
		{"two Content-Disposition headers", nil, other("Content-Disposition: form-data; name=\"x\"\r\ncontent-disposition: form-data; name=\"model\"\r\n"), codeInvalidForm, ""},
		{"not form-data", nil, other("Content-Disposition: attachment; name=\"model\"\r\n"), codeInvalidForm, ""},
		{"folded header", nil, other("Content-Disposition: form-data;\r\n name=\"model\"\r\n"), codeInvalidForm, ""},
		{"bare LF in the headers", nil, other("Content-Disposition: form-data; name=\"x\"\nContent-Disposition: form-data; name=\"model\"\r\n"), codeInvalidForm, ""},
		{"NUL in a name", nil, other("Content-Disposition: form-data; name=\"model\x00\"\r\n"), codeInvalidForm, ""},
		{"no name", nil, other("Content-Disposition: form-data; filename=\"a.wav\"\r\n"), codeInvalidForm, ""},
		{"no Content-Disposition", nil, other("Content-Type: text/plain\r\n"), codeInvalidForm, ""},
		{"parameter without a value", nil, other("Content-Disposition: form-data; model; name=\"x\"\r\n"), codeInvalidForm, ""},
		{"escape that is not a quote", nil, other("Content-Disposition: form-data; name=\"mo\\del\"\r\n"), codeInvalidForm, ""},
		{"escaped backslash before the closing quote", nil, other("Content-Disposition: form-data; filename=\"a\\\\\"; name=\"model\"\r\n"), codeInvalidForm, ""},
		{"unterminated quote", nil, other("Content-Disposition: form-data; name=\"model\r\n"), codeInvalidForm, ""},
		{"model as a file", nil, rawFile + rawPart("Content-Disposition: form-data; name=\"model\"; filename=\"m.txt\"\r\n", "other") + rawEnd, codeInvalidForm, "model"},
		{"quoted-printable model", nil, rawFile + rawPart("Content-Disposition: form-data; name=\"model\"\r\nContent-Transfer-Encoding: quoted-printable\r\n", "m") + rawEnd, codeInvalidForm, ""},
		{"padded delimiter", nil, m + rawPart("Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n",
			"RIFF\r\n--B \r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nother") + rawEnd, codeInvalidForm, ""},
		{"delimiter followed by data", nil, m + rawPart("Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n", "RIFF\r\n--Bx") + rawEnd, codeInvalidForm, ""},
		{"preamble", nil, "\r\nhello\r\n" + m + rawFile + rawEnd, codeInvalidForm, ""},
		{"cut short", nil, m + rawFile, codeInvalidForm, ""},
		{"charset that is not UTF-8", []string{ct + "; charset=utf-16"}, m + rawFile + rawEnd, codeUnsupportedMedia, ""},
		{"two boundaries", []string{ct + "; boundary=C"}, m + rawFile + rawEnd, codeUnsupportedMedia, ""},
		{"RFC 2231 boundary", []string{"multipart/form-data; boundary*=utf-8''B"}, m + rawFile + rawEnd, codeUnsupportedMedia, ""},
		{"two Content-Type headers", []string{ct, "multipart/form-data; boundary=C"}, m + rawFile + rawEnd, codeUnsupportedMedia, ""},
	}
	before := e.engineRequests()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cts := c.cts
			if cts == nil {
				cts = []string{ct}
			}
			status, got := e.postForm(t, c.body, cts...)
			var env struct {
				Error struct {
					Type  string  `json:"type"`
					Code  string  `json:"code"`
					Param *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(got), &env); err != nil || status != 400 || env.Error.Type != typeInvalidRequest ||
				env.Error.Code != c.code || (c.param != "" && (env.Error.Param == nil || *env.Error.Param != c.param)) {
				t.Errorf("%d %s, want 400 %s code %s param %q", status, got, typeInvalidRequest, c.code, c.param)
			}
		})
	}
	if n := e.engineRequests(); n != before {
		t.Errorf("the backend received %d of the refused forms", n-before)
	}

	// What real clients send passes: the same parts, unambiguous, with a
	// quoted boundary, a UTF-8 charset, a filename with an escaped quote
	// and non-ASCII bytes, the fields after the file, and an epilogue.
	for _, ok := range []struct{ ct, body string }{
		{ct, m + rawFile + rawEnd},
		{`multipart/form-data; boundary="B"; charset=UTF-8`, rawPart("Content-Disposition: form-data; name=\"file\"; filename=\"caf\xc3\xa9 \\\"1\\\".wav\"\r\n", string(testAudio[:2000])) +
			rawPart("content-disposition: FORM-DATA ;NAME=model\r\n", "m") + rawField("language", "en") + rawEnd + "epilogue\r\n"},
	} {
		if status, got := e.postForm(t, ok.body, ok.ct); status != 200 {
			t.Errorf("a well-formed form: %d %s", status, got)
		}
	}
	if n := e.engineRequests(); n != before+2 {
		t.Errorf("the backend received %d requests, want the 2 well-formed forms", n-before)
	}
}

// TestAudioSlowUploadHoldsNoSlot: an upload that sends its model field
// and then drips does not hold the model's only backend slot: it is read
// whole before it queues, so a normal upload meanwhile is answered.
func TestAudioSlowUploadHoldsNoSlot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("watches the spool through /proc/self/fd")
	}
	spools := t.TempDir()
	t.Setenv("TMPDIR", spools)
	e := startAudio(t, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueTimeout = config.Duration(15 * time.Second)
	})
	before := e.engineRequests()

	// The dripping client, on a raw socket: headers declaring a body far
	// longer than what it sends, its model field, the file part's headers
	// and first bytes; then nothing until the test ends.
	addr := strings.TrimPrefix(e.gw.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	prefix := rawField("model", "m") + "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"slow.wav\"\r\n\r\nRIFF"
	fmt.Fprintf(conn, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: %s\r\nContent-Type: multipart/form-data; boundary=B\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(prefix)+1<<20, prefix)

	// Await the gateway having read the model field and the file's first
	// bytes: its spool (an open, unlinked file under TMPDIR) holds them.
	eventually(t, "the gateway spooling the dripping upload's model field", func() bool {
		return spooledAtLeast(spools, int64(len(prefix)))
	})

	// A normal upload to the same model, while the slow one is open.
	ct, body := form(t, "model", "m", "file", string(testAudio[:4000]))
	status, got := e.postAudio(t, ct, strings.NewReader(string(body)))
	if status != 200 {
		t.Fatalf("a normal upload while another drips: %d %s", status, got)
	}
	if n := e.engineRequests(); n != before+1 {
		t.Errorf("the backend received %d requests, want the normal upload only", n-before)
	}

	// The dripping client is still being read: its next bytes and the end
	// of the form complete it, and it is answered.
	rest := strings.Repeat("x", 1<<20-len("\r\n"+rawEnd)) + "\r\n" + rawEnd
	if _, err := io.WriteString(conn, rest); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := readBodyT(t, res); res.StatusCode != 200 {
		t.Errorf("the slow upload, once complete: %d %s", res.StatusCode, b)
	}
}

// spooledAtLeast reports whether this process has a file under dir open
// (the gateway's spool, unlinked) holding at least n bytes.
func spooledAtLeast(dir string, n int64) bool {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false
	}
	for _, fd := range fds {
		p := filepath.Join("/proc/self/fd", fd.Name())
		target, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Size() >= n {
			return true
		}
	}
	return false
}

// TestAudioUploadInBodyBudget: an upload's spool counts in
// max_body_bytes_in_flight as it arrives: one that would pass it is
// answered 503 server_busy and the backend receives nothing; the budget is
// given back when the request ends.
func TestAudioUploadInBodyBudget(t *testing.T) {
	e := startAudio(t, func(c *config.Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxBodyBytesInFlight = 192 << 10
	})
	before := e.engineRequests()
	ct, body := form(t, "model", "m", "file", strings.Repeat("x", 256<<10))
	status, got := e.postAudio(t, ct, strings.NewReader(string(body)))
	if status != http.StatusServiceUnavailable || !strings.Contains(got, `"server_busy"`) {
		t.Errorf("an upload over the body budget: %d %s, want 503 server_busy", status, got)
	}
	if n := e.engineRequests(); n != before {
		t.Errorf("the backend received %d requests", n-before)
	}
	eventually(t, "the budget to empty", func() bool { return e.gw.bodies.used.Load() == 0 })
	ct, body = form(t, "model", "m", "file", strings.Repeat("x", 128<<10))
	if status, got := e.postAudio(t, ct, strings.NewReader(string(body))); status != 200 {
		t.Errorf("an upload within the body budget: %d %s", status, got)
	}
	eventually(t, "the budget to empty", func() bool { return e.gw.bodies.used.Load() == 0 })
}
