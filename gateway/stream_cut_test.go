package gateway

// A stream the backend cuts, in each API family, through the real gateway
// and the simulator (CutAfterChunks drops its connection mid-stream): the
// client sees the family's error event and then an abortive end, never
// the family's last event, so that an SDK that reads the error event
// raises it and a client that reads only the text (the Vercel AI SDK's
// textStream) raises on the broken body (issue 26).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/maitred-dev/maitred/sim"
)

// cutFamily is one API family's streamed request and how its SDK reads it.
type cutFamily struct {
	name, path, body string
	// errorEvent: the last event must be the family's error event.
	errorEvent func(ev string) bool
	// lastEvents are the family's own ends, none of which may come.
	lastEvents []string
	// sdk reads a stream with the family's official Go SDK and returns
	// what its iteration ended with and how many items it yielded.
	sdk func(t *testing.T, e *poolingE2E) (error, int)
}

var cutFamilies = []cutFamily{
	{
		name: "chat", path: "/v1/chat/completions",
		body:       `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"stream":true}`,
		errorEvent: func(ev string) bool { return strings.HasPrefix(ev, `data: {"error":{`) },
		lastEvents: []string{"data: [DONE]"},
		sdk: func(t *testing.T, e *poolingE2E) (error, int) {
			s := e.sdk.Chat.Completions.NewStreaming(t.Context(), chatParams(10))
			defer s.Close()
			n := 0
			for s.Next() {
				n++
			}
			return s.Err(), n
		},
	},
	{
		name: "responses", path: "/v1/responses",
		body:       `{"model":"m","input":"hi","max_output_tokens":10,"stream":true}`,
		errorEvent: func(ev string) bool { return strings.HasPrefix(ev, `data: {"error":{`) },
		lastEvents: []string{"data: [DONE]", "response.completed", "response.incomplete", "response.failed"},
		sdk: func(t *testing.T, e *poolingE2E) (error, int) {
			s := e.sdk.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
				Model:           "m",
				Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
				MaxOutputTokens: openai.Int(10),
			})
			defer s.Close()
			n := 0
			for s.Next() {
				n++
			}
			return s.Err(), n
		},
	},
	{
		name: "messages", path: "/v1/messages",
		body:       `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		errorEvent: func(ev string) bool { return strings.HasPrefix(ev, "event: error\ndata: {\"type\":\"error\"") },
		lastEvents: []string{"data: [DONE]", "message_stop"},
		sdk: func(t *testing.T, e *poolingE2E) (error, int) {
			c := anthropicSDK(e.gw.URL, e.gw.client)
			s := c.Messages.NewStreaming(t.Context(), anthropic.MessageNewParams{Model: "m", MaxTokens: 10,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
			defer s.Close()
			n := 0
			for s.Next() {
				n++
			}
			return s.Err(), n
		},
	},
}

// startCutting starts the simulator and a gateway in front of it, and
// makes the simulator cut every stream after its second content chunk
// once the warm-up (a stream too) has passed.
func startCutting(t *testing.T) *poolingE2E {
	t.Helper()
	e := startPooling(t, sim.Config{OutputTokens: 10}, nil)
	e.sim.Update(func(c *sim.Config) { c.CutAfterChunks = 2 })
	return e
}

// TestCutStreamFailsInEverySDK: through maitred, each family's Go SDK
// ends its stream iteration with an error when the backend cuts the
// stream, after yielding what came before the cut; and a client reading
// the body with net/http alone (as a text-only reader does) gets an
// error too, not a body that ends like a whole one.
func TestCutStreamFailsInEverySDK(t *testing.T) {
	e := startCutting(t)
	for _, f := range cutFamilies {
		t.Run(f.name, func(t *testing.T) {
			err, n := f.sdk(t, e)
			if err == nil || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("after %d items the SDK's stream ended with %v, want the gateway's error", n, err)
			}
			if n == 0 {
				t.Errorf("the SDK yielded nothing before the cut")
			}
			body := readCutBody(t, e.gw.post(t, f.path, f.body))
			evs := sseEvents(body)
			if last := evs[len(evs)-1]; len(evs) < 2 || !f.errorEvent(last) || !strings.Contains(last, "truncated") {
				t.Fatalf("the stream does not end with the family's error event: ...%q", body[max(0, len(body)-400):])
			}
			for _, end := range f.lastEvents {
				if strings.Contains(body, end) {
					t.Errorf("a cut stream carries %q: ...%q", end, body[max(0, len(body)-400):])
				}
			}
		})
	}
	e.gw.quiesce()
	if m := e.gw.gathered(t); !strings.Contains(m, `maitred_stream_errors_total{model="m",reason="backend_disconnected"} 6`) {
		t.Errorf("stream errors not counted once per cut stream:\n%s", grepLines(m, "maitred_stream_errors_total"))
	}
	if st := e.sim.Stats(); st.Cut != 6 {
		t.Errorf("the simulator cut %d streams, want 6", st.Cut)
	}
}

// TestCutStreamOnTheWire: on a raw HTTP/1.1 connection, a cut stream's
// chunked body ends with the error event and then the connection closes:
// no [DONE] (nor the family's other ends) and no terminating zero-length
// chunk, which is what makes an HTTP client report the body as broken.
// The connection is keep-alive, so a body that ended properly would end
// with the zero-length chunk and the connection would stay open.
func TestCutStreamOnTheWire(t *testing.T) {
	e := startCutting(t)
	for _, f := range cutFamilies {
		t.Run(f.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(e.gw.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", f.path, len(f.body), f.body)
			rd := bufio.NewReader(c)
			head, err := readHead(rd)
			if err != nil || !strings.HasPrefix(head, "HTTP/1.1 200 ") || !strings.Contains(strings.ToLower(head), "transfer-encoding: chunked") {
				t.Fatalf("head %q: %v", head, err)
			}
			data, terminated, err := readChunks(rd)
			if terminated {
				t.Fatalf("the body ended with the zero-length chunk: ...%q", data[max(0, len(data)-300):])
			}
			if err != io.EOF {
				t.Fatalf("reading the chunks: %v, want the connection closed", err)
			}
			evs := sseEvents(data)
			errors := 0
			for _, ev := range evs {
				if f.errorEvent(ev) {
					errors++
				}
			}
			if !f.errorEvent(evs[len(evs)-1]) || !strings.HasSuffix(data, "\n\n") || errors != 1 {
				t.Fatalf("the body does not end with one error event: ...%q", data[max(0, len(data)-400):])
			}
			for _, end := range f.lastEvents {
				if strings.Contains(data, end) {
					t.Errorf("a cut stream carries %q", end)
				}
			}
		})
	}
}

// readHead reads a response's status line and headers.
func readHead(rd *bufio.Reader) (string, error) {
	var head strings.Builder
	for {
		line, err := rd.ReadString('\n')
		head.WriteString(line)
		if err != nil || line == "\r\n" {
			return head.String(), err
		}
	}
}

// readChunks decodes a chunked body by hand until the zero-length chunk
// (terminated) or until the connection ends (err io.EOF).
func readChunks(rd *bufio.Reader) (data string, terminated bool, err error) {
	var out strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				err = io.ErrUnexpectedEOF // a size line cut in half
			}
			return out.String(), false, err
		}
		size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(line, ";", 2)[0]), 16, 64)
		if err != nil {
			return out.String(), false, fmt.Errorf("chunk size line %q: %v", line, err)
		}
		if size == 0 {
			return out.String(), true, nil
		}
		if _, err := io.CopyN(&out, rd, size+2); err != nil { // the chunk and its CRLF
			return out.String(), false, io.ErrUnexpectedEOF
		}
		s := out.String()
		if !strings.HasSuffix(s, "\r\n") {
			return s, false, fmt.Errorf("chunk not followed by CRLF")
		}
		out.Reset()
		out.WriteString(strings.TrimSuffix(s, "\r\n"))
	}
}

// grepLines is m's lines that start with prefix.
func grepLines(m, prefix string) string {
	var out []string
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
