package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// maxPartialEvent bounds how much of an unfinished SSE event the guard
// holds back. vLLM writes whole events, so in practice it holds nothing; an
// event larger than this passes through in pieces.
const maxPartialEvent = 1 << 20

// streamBufSize is a stream guard's working buffer: it holds several vLLM
// events and grows for larger ones.
const streamBufSize = 4 << 10

// streamBufs are the guards' working buffers. A guard holds one only
// while it has bytes in hand (an event on its way to the client, or the
// start of one); a stream waiting on its backend holds none, so an idle
// open stream costs no buffer here.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, 0, streamBufSize); return &b }}

// doneData is the data of the event that ends an OpenAI stream.
var doneData = []byte("[DONE]")

// errStreamCut is what a streamGuard's Read returns once it has handed out
// the events that end a broken stream: the proxy then aborts the client's
// response (no [DONE], no terminating chunk), so that a client reading
// only the text sees a failure too, not a short answer that looks whole.
var errStreamCut = errors.New("the backend stream ended before its last event")

// streamGuard wraps a backend's SSE body. It passes complete events through
// as soon as they arrive and watches for the [DONE] event. When the backend
// stream ends any other way (a reset, a cut, a clean close too early), it
// drops the unfinished event, hands out the events onBreak returns (the
// family's error event, never its end) and then fails with errStreamCut,
// which makes the proxy abort the client's response: SDKs that read the
// error event raise it, and a client that reads only the text gets an
// abortive end instead of a truncated answer that ends like a whole one.
// When the client itself left, it simply fails.
type streamGuard struct {
	body    io.ReadCloser
	ctx     context.Context
	onBreak func(cause error) []byte

	buf     []byte  // read from the backend, not yet returned; nil when none
	bufp    *[]byte // buf's pooled storage (streamBufs), while held
	ready   int     // buf[:ready] holds complete events
	partial bool    // buf[:ready] ends inside an event (a piece of an oversized one)
	sawDone bool
	// one and its read's outcome: the byte a guard with nothing in hand
	// waits for (awaitData, or a Read), so that the wait holds no buffer.
	one      [1]byte
	oneN     int
	oneErr   error
	oneTaken bool // one's read happened and is not yet consumed
	// isEnd reports whether complete events hold the stream's last
	// event (the API's streamShape.end); nil: OpenAI's [DONE].
	isEnd func(events []byte) bool
	tail  []byte // the break events still to return
	ended bool
	cut   bool // ended by a break: the last Read fails with errStreamCut

	// The idle clock runs only while the guard waits on the backend for a
	// complete event: it starts when a Read (or awaitData) has no complete
	// event to hand out and stops when the Read returns. Time the proxy spends writing to
	// the client is never counted against the backend, and bytes that do
	// not complete an event do not restart it.
	idle    time.Duration
	timer   *time.Timer
	waiting bool
	// onEvents, when set, is told of complete events as they arrive (the
	// phase clock: first event = first token, last = end of decode).
	onEvents func(n int, at time.Time)
}

// watchIdle calls onIdle when the guard has waited d on the backend for a
// complete event; onIdle cancels the upstream request, which makes the
// pending Read fail and the guard end the stream.
func (g *streamGuard) watchIdle(d time.Duration, onIdle func()) {
	g.idle = d
	g.timer = time.AfterFunc(d, onIdle)
	g.timer.Stop()
}

func newStreamGuard(body io.ReadCloser, ctx context.Context, onBreak func(error) []byte) *streamGuard {
	return &streamGuard{body: body, ctx: ctx, onBreak: onBreak}
}

// awaitData waits until the guard has something to hand out: when it
// holds nothing, it reads the backend's next byte into one (the idle clock
// running, as for a Read), without a buffer. The next Read goes on from
// there. The copy calls it before it takes its own buffer, so that a
// stream waiting for its next event holds neither (copyAnswer).
func (g *streamGuard) awaitData() bool {
	if g.ready == 0 && g.tail == nil && !g.ended && len(g.buf) == 0 && !g.oneTaken {
		g.startIdle()
		g.readOne()
	}
	return true
}

// readOne reads the backend's next byte into one.
func (g *streamGuard) readOne() {
	g.oneN, g.oneErr = g.body.Read(g.one[:])
	g.oneTaken = true
}

// startIdle starts the idle clock unless it runs.
func (g *streamGuard) startIdle() {
	if g.timer != nil && !g.waiting {
		g.timer.Reset(g.idle)
		g.waiting = true
	}
}

// fill reads what the backend has next onto buf's end: the byte
// awaitData read, or, with nothing in hand, the next byte (a wait that
// holds no buffer), or, after bytes, as much as buf holds. It takes buf
// from streamBufs when it has none. It returns the bytes added.
func (g *streamGuard) fill() (int, error) {
	if len(g.buf) == 0 && !g.oneTaken {
		g.readOne()
	}
	if g.oneTaken {
		g.oneTaken = false
		if g.oneN == 0 {
			return 0, g.oneErr
		}
		g.take()
		g.buf = append(g.buf, g.one[0])
		return 1, g.oneErr
	}
	g.take()
	if len(g.buf) == cap(g.buf) {
		g.buf = append(g.buf, 0)[:len(g.buf)]
	}
	n, err := g.body.Read(g.buf[len(g.buf):cap(g.buf)])
	g.buf = g.buf[:len(g.buf)+n]
	return n, err
}

// take gives the guard a buffer from streamBufs when it has none.
func (g *streamGuard) take() {
	if g.buf == nil {
		g.bufp = streamBufs.Get().(*[]byte)
		g.buf = (*g.bufp)[:0]
	}
}

// release gives an empty buf back to streamBufs (a grown one is dropped;
// its pooled storage goes back).
func (g *streamGuard) release() {
	if len(g.buf) > 0 || g.bufp == nil {
		return
	}
	streamBufs.Put(g.bufp)
	g.buf, g.bufp = nil, nil
}

// Read hands out complete events, waiting on the backend only when it
// has none; the idle clock runs only during that wait.
func (g *streamGuard) Read(p []byte) (int, error) {
	n, err := g.read(p)
	if g.waiting {
		g.timer.Stop()
		g.waiting = false
	}
	return n, err
}

func (g *streamGuard) read(p []byte) (int, error) {
	for {
		if g.ready > 0 {
			n := copy(p, g.buf[:g.ready])
			g.buf = g.buf[:copy(g.buf, g.buf[n:])]
			g.ready -= n
			g.release()
			return n, nil
		}
		if g.tail != nil {
			n := copy(p, g.tail)
			g.tail = g.tail[n:]
			if len(g.tail) == 0 {
				g.tail = nil
				g.ended = true
			}
			return n, nil
		}
		if g.ended {
			if g.cut {
				return 0, errStreamCut
			}
			return 0, io.EOF
		}
		g.startIdle()
		n, err := g.fill()
		if n > 0 {
			g.scan(len(g.buf) - n)
		}
		if err == nil {
			continue
		}
		if g.sawDone {
			// The answer is complete; how the connection ended after it
			// does not matter to the client. Nor does the client leaving
			// now: SDKs close the stream once they have read [DONE],
			// often before the backend's connection has ended.
			if g.ctx.Err() != nil {
				g.ended = true
				return 0, io.EOF
			}
			if g.ready == 0 && len(g.buf) > 0 {
				g.ready = len(g.buf) // trailing bytes after [DONE]: pass them on
			}
			g.ended = g.ready == 0
			if g.ended {
				return 0, io.EOF
			}
			g.tail = nil
			continue
		}
		if g.ctx.Err() != nil {
			return 0, err // the client left; there is no one to tell
		}
		var cause error
		if err != io.EOF {
			cause = err
		}
		// Drop the unfinished event: half a JSON object is worse than none.
		g.buf = g.buf[:g.ready]
		g.tail = g.onBreak(cause)
		g.cut = true
		if g.partial {
			// What went out ends inside an oversized event: end its line
			// and the event, so that the error event starts on its own.
			g.tail = append([]byte("\n\n"), g.tail...)
		}
	}
}

// scan moves ready past the last complete event in buf, looking only at
// bytes from start on (and the two before, for a boundary split across
// reads), and notes the [DONE] event.
func (g *streamGuard) scan(start int) {
	from := max(start-2, g.ready)
	end := -1
	for i := from; i+1 < len(g.buf); i++ {
		if g.buf[i] != '\n' {
			continue
		}
		if g.buf[i+1] == '\n' {
			end = i + 2
		} else if i+2 < len(g.buf) && g.buf[i+1] == '\r' && g.buf[i+2] == '\n' {
			end = i + 3
		}
	}
	if end < 0 {
		if len(g.buf)-g.ready > maxPartialEvent {
			g.ready = len(g.buf)
			g.partial = true
		}
		return
	}
	if g.onEvents != nil {
		n := bytes.Count(g.buf[g.ready:end], []byte("\n\n"))
		if n > 0 && !g.sawDone {
			g.onEvents(n, time.Now())
		}
	}
	if !g.sawDone {
		isEnd := g.isEnd
		if isEnd == nil {
			isEnd = openAIStreamEnd
		}
		g.sawDone = isEnd(g.buf[g.ready:end])
	}
	g.ready = end
	g.partial = false
}

// streamShape is how an API family's SSE stream ends: end reports
// whether complete events hold the stream's last event, and breakEvents
// renders the gateway's own error as the events that end a stream the
// backend broke; meter reads one event's data for the usage meter
// (proxy_usage.go): its text deltas and the usage it reports.
type streamShape struct {
	end         func(events []byte) bool
	breakEvents func(e *Error) []byte
	meter       func(m *usageMeter, data []byte)
}

// openAIStream is the OpenAI APIs' stream: it ends with data: [DONE], and
// a broken one gets an error event and no [DONE] (the response is then
// aborted).
var openAIStream = &streamShape{end: openAIStreamEnd, breakEvents: (*Error).sseEvent, meter: meterOpenAIEvent}

func openAIStreamEnd(events []byte) bool {
	return bytes.Contains(events, doneData) && hasDoneEvent(events)
}

// streamShape is the request's API's stream shape.
func (x *exchange) streamShape() *streamShape {
	if x.sse != nil {
		return x.sse
	}
	return openAIStream
}

// hasDoneEvent reports whether events, which end at an event boundary,
// hold an event whose data is exactly [DONE]: one data line, "data:" then
// an optional space then "[DONE]", as the SSE spec parses fields. The text
// [DONE] inside a JSON chunk (a completion can contain it) is not the end.
func hasDoneEvent(events []byte) bool {
	dataLines, done := 0, false
	for len(events) > 0 {
		var line []byte
		line, events, _ = bytes.Cut(events, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 { // the blank line ending an event
			if dataLines == 1 && done {
				return true
			}
			dataLines, done = 0, false
			continue
		}
		name, value, _ := bytes.Cut(line, []byte{':'})
		if string(name) != "data" {
			continue // a comment, or another field
		}
		value = bytes.TrimPrefix(value, []byte{' '})
		dataLines++
		done = bytes.Equal(value, doneData)
	}
	return false
}

func (g *streamGuard) Close() error {
	if g.timer != nil {
		g.timer.Stop()
	}
	return g.body.Close()
}
