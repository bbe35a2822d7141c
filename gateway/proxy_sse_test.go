package gateway

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// chunks is a backend body that returns its pieces one Read at a time and
// then fails with err (io.EOF for a clean end).
type chunks struct {
	pieces []string
	err    error
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.pieces) == 0 {
		return 0, c.err
	}
	n := copy(p, c.pieces[0])
	c.pieces[0] = c.pieces[0][n:]
	if c.pieces[0] == "" {
		c.pieces = c.pieces[1:]
	}
	return n, nil
}

func (c *chunks) Close() error { return nil }

// readAll reads the guard's output, recording what each Read returned.
func readAll(t *testing.T, r io.Reader) (string, []string, error) {
	t.Helper()
	var out strings.Builder
	var reads []string
	buf := make([]byte, 64)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			out.Write(buf[:n])
			reads = append(reads, string(buf[:n]))
		}
		if err != nil {
			if err == io.EOF {
				return out.String(), reads, nil
			}
			return out.String(), reads, err
		}
	}
}

// breakEvents stand for the family's error event; the guard adds nothing
// after them and then fails with errStreamCut.
const breakEvents = "data: {\"error\":\"broken\"}\n\n"

func TestStreamGuard(t *testing.T) {
	reset := errors.New("connection reset")
	tests := []struct {
		name   string
		pieces []string
		err    error
		want   string
		broken bool
	}{
		{
			name:   "complete stream passes untouched",
			pieces: []string{"data: {\"a\":1}\n\n", "data: {\"a\":2}\n\n", "data: [DONE]\n\n"},
			err:    io.EOF,
			want:   "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n",
		},
		{
			name:   "event split across reads is joined, not dropped",
			pieces: []string{"data: {\"a\"", ":1}\n", "\ndata: [DO", "NE]\n\n"},
			err:    io.EOF,
			want:   "data: {\"a\":1}\n\ndata: [DONE]\n\n",
		},
		{
			name:   "CRLF boundaries",
			pieces: []string{"data: {\"a\":1}\r\n\r\n", "data: [DONE]\r\n\r\n"},
			err:    io.EOF,
			want:   "data: {\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n",
		},
		{
			name:   "reset mid-event drops the partial event and ends with the error event and a cut",
			pieces: []string{"data: {\"a\":1}\n\n", "data: {\"a\":"},
			err:    reset,
			want:   "data: {\"a\":1}\n\n" + breakEvents,
			broken: true,
		},
		{
			name:   "clean close without DONE is a break too",
			pieces: []string{"data: {\"a\":1}\n\n"},
			err:    io.EOF,
			want:   "data: {\"a\":1}\n\n" + breakEvents,
			broken: true,
		},
		{
			name:   "break before any event",
			err:    reset,
			want:   breakEvents,
			broken: true,
		},
		{
			name:   "[DONE] inside a token is not the end",
			pieces: []string{"data: {\"c\":\"data: [DONE]\"}\n\n"},
			err:    reset,
			want:   "data: {\"c\":\"data: [DONE]\"}\n\n" + breakEvents,
			broken: true,
		},
		{
			name:   "a line data: [DONE] inside a longer event is not the end",
			pieces: []string{"data: x\ndata: [DONE]\n\n"},
			err:    io.EOF,
			want:   "data: x\ndata: [DONE]\n\n" + breakEvents,
			broken: true,
		},
		{
			name:   "data:[DONE] without the space ends the stream",
			pieces: []string{"data: {\"a\":1}\n\n", "data:[DONE]\n\n"},
			err:    reset,
			want:   "data: {\"a\":1}\n\ndata:[DONE]\n\n",
		},
		{
			name:   "[DONE] with a comment and an id, CRLF",
			pieces: []string{": keep-alive\r\nid: 7\r\ndata: [DONE]\r\n\r\n"},
			err:    io.EOF,
			want:   ": keep-alive\r\nid: 7\r\ndata: [DONE]\r\n\r\n",
		},
		{
			name:   "a break after an oversized partial event ends it before the error event",
			pieces: []string{"data: {\"a\":1}\n\n", "data: " + strings.Repeat("x", maxPartialEvent+1)},
			err:    reset,
			want:   "data: {\"a\":1}\n\n" + "data: " + strings.Repeat("x", maxPartialEvent+1) + "\n\n" + breakEvents,
			broken: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cause error
			called := 0
			g := newStreamGuard(&chunks{pieces: append([]string(nil), tt.pieces...), err: tt.err}, context.Background(),
				func(c error) []byte { called++; cause = c; return []byte(breakEvents) })
			got, _, err := readAll(t, g)
			if tt.broken && err != errStreamCut || !tt.broken && err != nil {
				t.Fatalf("read error %v, want errStreamCut: %v", err, tt.broken)
			}
			if got != tt.want {
				t.Errorf("got  %.300q\nwant %.300q", got, tt.want)
			}
			if tt.broken != (called == 1) {
				t.Errorf("onBreak called %d times, want broken=%v", called, tt.broken)
			}
			if tt.broken && tt.err != io.EOF && !errors.Is(cause, tt.err) {
				t.Errorf("cause = %v, want %v", cause, tt.err)
			}
		})
	}
}

// Each complete event must be handed on by the Read that completes it, so
// that the proxy flushes it at once: the guard must not wait for more.
func TestStreamGuardReturnsEachEventImmediately(t *testing.T) {
	body := &chunks{pieces: []string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"}, err: io.EOF}
	g := newStreamGuard(body, context.Background(), func(error) []byte { t.Fatal("unexpected break"); return nil })
	_, reads, err := readAll(t, g)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"}
	if strings.Join(reads, "|") != strings.Join(want, "|") {
		t.Errorf("reads = %q, want %q", reads, want)
	}
}

func TestStreamGuardClientGoneFailsQuietly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g := newStreamGuard(&chunks{pieces: []string{"data: 1\n\n"}, err: context.Canceled}, ctx,
		func(error) []byte { t.Fatal("no error event for a client that left"); return nil })
	_, _, err := readAll(t, g)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// doneIn is the test's own reading of the SSE spec: does s hold a complete
// event whose data is exactly [DONE]?
func doneIn(s string) bool {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	events := strings.Split(s, "\n\n")
	for _, ev := range events[:len(events)-1] { // the last is unterminated
		var data []string
		for _, line := range strings.Split(ev, "\n") {
			name, value, _ := strings.Cut(line, ":")
			if name == "data" {
				data = append(data, strings.TrimPrefix(value, " "))
			}
		}
		if data != nil && strings.Join(data, "\n") == "[DONE]" {
			return true
		}
	}
	return false
}

func FuzzStreamGuard(f *testing.F) {
	f.Add("data: {\"a\":1}\n\ndata: [DONE]\n\n", 3, false)
	f.Add("data: x\r\n\r\ndata: y", 5, true)
	f.Add("data: {\"c\":\"data: [DONE]\"}\n\ndata: {\"a\"", 7, true)
	f.Add(": c\ndata:[DONE]\n\ntrailing", 4, false)
	f.Fuzz(func(t *testing.T, stream string, split int, fail bool) {
		if split <= 0 {
			split = 1
		}
		var pieces []string
		for s := stream; s != ""; {
			n := min(split, len(s))
			pieces = append(pieces, s[:n])
			s = s[n:]
		}
		err := io.EOF
		if fail {
			err = errors.New("reset")
		}
		broke := false
		g := newStreamGuard(&chunks{pieces: pieces, err: err}, context.Background(),
			func(error) []byte { broke = true; return []byte(breakEvents) })
		got, _, rerr := readAll(t, g)
		if broke != (rerr == errStreamCut) || rerr != nil && rerr != errStreamCut {
			t.Fatalf("broke=%v, read error %v", broke, rerr)
		}
		if broke {
			// Output is a prefix of the stream ending at an event boundary, then the break events.
			prefix, ok := strings.CutSuffix(got, breakEvents)
			if ok && !strings.HasPrefix(stream, prefix) {
				// After an oversized partial event, "\n\n" ends it first.
				prefix, ok = strings.CutSuffix(prefix, "\n\n")
			}
			if !ok || !strings.HasPrefix(stream, prefix) {
				t.Fatalf("broken output %q is not a stream prefix + break events", got)
			}
			if doneIn(prefix) {
				t.Fatalf("a stream that sent DONE was treated as broken: %q", stream)
			}
		} else if got != stream {
			t.Fatalf("unbroken stream altered: got %q want %q", got, stream)
		} else if !doneIn(stream) {
			t.Fatalf("a stream without a [DONE] event ended quietly: %q", stream)
		}
	})
}

// probedBody is a backend body that returns its pieces one Read at a
// time, calling probe with each Read's buffer first.
type probedBody struct {
	chunks
	probe func(p []byte)
}

func (b *probedBody) Read(p []byte) (int, error) {
	b.probe(p)
	return b.chunks.Read(p)
}

// A guard with nothing in hand waits on its backend for one byte and holds
// no buffer meanwhile: an open stream between two events costs no buffer.
// Once it has bytes, it reads into its pooled buffer, and gives the buffer
// back when it has handed them all out.
func TestStreamGuardWaitsHoldingNoBuffer(t *testing.T) {
	var g *streamGuard
	type wait struct {
		size int
		held bool
	}
	var waits []wait
	body := &probedBody{chunks: chunks{pieces: []string{"data: 1\n\n", "data: 2\n\ndata: [DONE]\n\n"}, err: io.EOF}}
	body.probe = func(p []byte) {
		if len(g.buf) == 0 {
			waits = append(waits, wait{size: len(p), held: g.buf != nil})
		}
	}
	g = newStreamGuard(body, context.Background(), func(error) []byte { t.Fatal("unexpected break"); return nil })
	g.awaitData() // as the copy does before it takes its own buffer
	if g.buf != nil || !g.oneTaken {
		t.Fatalf("after awaitData: buf %v, waited byte taken %v; want no buffer and the byte read", g.buf != nil, g.oneTaken)
	}
	got, reads, err := readAll(t, g)
	if err != nil {
		t.Fatal(err)
	}
	if want := "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if want := []string{"data: 1\n\n", "data: 2\n\ndata: [DONE]\n\n"}; strings.Join(reads, "|") != strings.Join(want, "|") {
		t.Errorf("reads = %q, want %q (each event handed on by the Read that completes it)", reads, want)
	}
	// The waits with nothing in hand: before each event and at the end.
	if len(waits) != 3 {
		t.Fatalf("waits with nothing in hand = %+v, want 3", waits)
	}
	for i, w := range waits {
		if w.size != 1 || w.held {
			t.Errorf("wait %d with nothing in hand read %d bytes holding a buffer: %v; want 1 byte and no buffer", i, w.size, w.held)
		}
	}
	if g.buf != nil || g.bufp != nil {
		t.Errorf("after the stream the guard still holds its buffer")
	}
}
