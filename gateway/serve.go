package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/quota"
)

// handlerFunc is a gateway handler: it writes a success itself, or returns
// an error that serve renders. An *Error returned after the handler already
// wrote headers is logged, not rendered.
type handlerFunc func(w http.ResponseWriter, r *http.Request, x *exchange) error

// errClientGone reports that the client went away; nothing is written.
// errClientGoneQueued is it while the request waited in the queue
// (outcome client_gone).
var (
	errClientGone       = errors.New("client closed the request")
	errClientGoneQueued = fmt.Errorf("%w while it waited in the queue", errClientGone)
)

// statusClientClosed is logged (never sent) for requests whose client left,
// as nginx does, or stopped reading (outcome client_stalled).
const statusClientClosed = 499

// exchange is the request's scope: the request as the door decided it,
// the edge's bookkeeping of it, and its attempts at backends. serve reads
// it once, at the end, to conclude the request (conclude, result.go).
type exchange struct {
	request
	requestState
	// att is the latest attempt at a backend (attempt.go); nil before
	// the first. retries counts the attempts before it.
	att     *attempt
	retries int
	// body is what its attempts send (the door's bytes), dropped once an
	// answer's headers came (attempt.dropBody): no attempt follows.
	body []byte
	// q is the model pipeline's ticket and holds (pipeline.go), kept
	// here rather than on the handler's stack while the answer streams.
	q queued
	// tr is the request's tracing (tracing.go); tr.on() is false when the
	// gateway does not trace.
	tr spans
	// in is the client's request and rec the recorder its answer is
	// written through (serveIn's), for the request's conclusion (wrapUp).
	in  *http.Request
	rec *recorder
}

// request is what is decided about a request up to its door: the edge's
// (id, arrival, endpoint, the client's context), the key check's (key),
// the body reader's (bytesIn, upload) and the door's (the model runtime,
// adapter, stream, counts). It is written before the request queues and
// only read after: attempts and the conclusion read it, none writes it.
type request struct {
	id        string
	start     time.Time
	endpoint  string
	spec      *endpoint       // endpoint's spec, found once when the route is built
	env       errorWriter     // the envelope its errors are rendered in
	clientCtx context.Context // the client request's context
	// key is the API key the request presented (keys.go); nil when the
	// gateway is open or before the check.
	key *apiKey
	// rt is the request's model once the door (or /tokenize) found it;
	// nil before, and for a name that is not configured (unknown names
	// are not used as labels).
	rt *modelRuntime
	// adapter is the LoRA adapter the request named (rt is then its base
	// model's runtime) and only the slots of rt's backends that have it
	// loaded, the only ones it may go to; "" and nil otherwise.
	adapter string
	only    []string
	// flowed: the model's fairness is tokens; the request's flow is its
	// key (flowName).
	flowed  bool
	stream  bool
	sse     *streamShape // the API's stream shape; nil: OpenAI's
	bytesIn int
	// upload is an audio request's spooled body (audio.go); nil for the
	// others.
	upload *upload
	// onResponseID, on a Responses create, records the id its answer
	// names (responses.go); the attempt's usage meter calls it.
	onResponseID func(id string)
	// The door's numbers, logged with the request.
	promptTokens, maxTokens, maxModelLen int
	uncounted                            string
}

// requestState is the per-request bookkeeping the edge owns, written as
// the request goes: the phase clock's stamps of the request's own (each
// attempt keeps its own clock), how the client took the answer, the body
// budget it holds and its hold on its key's limits.
type requestState struct {
	// readDone, doorDone end the read and door phases (phases.go).
	readDone, doorDone time.Time
	// clientStall adds up the time writes to the client blocked;
	// clientWriteErr is the first failed write to the client, if any.
	clientStall    time.Duration
	clientWriteErr error
	// bodyHeld is the body budget the request reserved (given back at
	// its end).
	bodyHeld int64
	// res is the request's hold on its key's limits (limits.go), settled
	// when the request ends; reserved is what it took.
	res      quota.Reservation
	reserved int64
	rateSet  bool // the x-ratelimit-* headers are set
	wrapped  bool // concluded (wrapUp)
}

// setModel records the model the request resolved to: rt, and for a LoRA
// adapter (only non-nil) the adapter's name and the slots of its backends.
func (x *exchange) setModel(rt *modelRuntime, name string, only []string) {
	x.rt, x.only = rt, only
	if only != nil {
		x.adapter = name
	}
}

// serve is the edge adapter: it assigns the request id, runs h, renders a
// returned error in OpenAI's envelope, and writes the one access-log line
// and the request metrics.
func (g *Gateway) serve(endpoint string, h handlerFunc) http.HandlerFunc {
	return g.serveIn(openAIErrors, endpoint, h)
}

// serveIn is serve with the API's own error envelope. It is the one place
// that turns a handler's result into the answer: a returned *Error is
// rendered in env (unless the answer had begun), the request is
// concluded (finish), and an answer cut after its headers (errAnswerCut)
// is aborted with the one panic net/http takes for that.
func (g *Gateway) serveIn(env errorWriter, endpoint string, h handlerFunc) http.HandlerFunc {
	spec := specOf(endpoint)
	return func(w http.ResponseWriter, r *http.Request) {
		// Begun and concluded in calls of their own, so that the frame
		// live while an answer streams stays small.
		x := g.begin(w, r, env, endpoint, spec)
		defer g.recovered(x)
		err := h(x.rec, r, x)
		g.wrapUp(x, err)
		abortIfCut(r, err)
	}
}

// abortIfCut aborts the client's response when its answer was cut after
// its headers went out (errAnswerCut), with the one panic net/http takes
// for that: it drops the connection (HTTP/1.1) or resets the stream.
func abortIfCut(r *http.Request, err error) {
	if err == errAnswerCut && r.Context().Value(http.ServerContextKey) != nil {
		panic(http.ErrAbortHandler)
	}
}

// begin makes a request's exchange (answering in env) with its recorder
// (x.rec) and sets its id on the answer.
//
//go:noinline
func (g *Gateway) begin(w http.ResponseWriter, r *http.Request, env errorWriter, endpoint string, spec *endpoint) *exchange {
	x := &exchange{request: request{id: requestID(r), start: time.Now(), endpoint: endpoint, spec: spec, env: env, clientCtx: r.Context()}, in: r}
	x.rec = &recorder{ResponseWriter: w, stall: &x.clientStall, werr: &x.clientWriteErr}
	w.Header().Set("X-Request-Id", x.id)
	if g.tr != nil {
		g.tr.start(x)
	}
	return x
}

// wrapUp renders a handler's returned error in the request's envelope
// (x.env; unless the answer had begun, or there is nobody to answer) and
// concludes the request (finish), once.
//
//go:noinline
func (g *Gateway) wrapUp(x *exchange, err error) {
	x.wrapped = true
	rec, r := x.rec, x.in
	if err != nil && err != errAnswerCut && !errors.Is(err, errClientGone) && !rec.wroteHeader {
		var e *Error
		if !errors.As(err, &e) {
			e = failInternal.err("internal error; request id "+x.id, nil)
		}
		x.env(rec, e)
	}
	g.finish(x, rec, r, err)
}

// recovered concludes a request whose handler panicked (serveIn's
// deferred call): the panic is logged with its stack and becomes a 500;
// http.ErrAbortHandler, which nothing in the gateway raises, stays the
// abort it asks for. A panic after the request was concluded (serveIn's
// own abort, or one in the conclusion) goes on up as it came.
func (g *Gateway) recovered(x *exchange) {
	p := recover()
	if p == nil {
		return
	}
	if x.wrapped {
		panic(p)
	}
	var err error
	switch p {
	case http.ErrAbortHandler:
		err = errAnswerCut
	default:
		g.log.Error("handler panic", zap.String("request_id", x.id), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
		err = failInternal.err("internal error; request id "+x.id, nil)
	}
	g.wrapUp(x, err)
	abortIfCut(x.in, err)
}

// metricsOf is the metric children for x's model ("" before it is known).
func (g *Gateway) metricsOf(x *exchange) *modelMetrics {
	if x.rt != nil {
		return &x.rt.metrics
	}
	return &g.noModel
}

// clientOutcome names how a client ended its request: it stopped reading
// (a write to it timed out) or it left.
func clientOutcome(x *exchange) *failure {
	if errors.Is(x.clientWriteErr, os.ErrDeadlineExceeded) {
		return failClientStalled
	}
	return failClientClosed
}

// requestID returns the client's X-Request-Id when it is a sane token, else
// a fresh random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 && printableASCII(id) {
		return id
	}
	return newID()
}

// newID is a random 128-bit id in hex.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// recorder notes the status and size of the answer. It forwards Flush and
// exposes Unwrap so http.ResponseController (which the proxy uses to
// flush each SSE event) reaches the real connection.
type recorder struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
	// stall adds up the time writes to the client blocked: a slow reader
	// fills the socket buffer and the gateway waits.
	stall *time.Duration
	// writeIdle, when set (by the proxy), bounds each write and flush to
	// the client: one that makes no progress for this long fails, which
	// also cancels the request. werr keeps the first write error.
	writeIdle time.Duration
	// An event stream's writes (stream: the answer's Content-Type said
	// so) are bounded by watch, a timer of the recorder's own, reset as
	// each write or flush starts and stopped as it ends, rather than by
	// a write deadline set for each (over HTTP/2 each is a message to
	// the connection's serve goroutine, which every event would pay);
	// when it fires it sets the connection's write deadline in the past,
	// as a deadline would have passed (HTTP/1.1: the blocked write
	// fails; HTTP/2: the stream is reset). inWrite, under mu, says a
	// write or flush is under way: the timer touches the ResponseWriter
	// only then, never once the handler is done with it. Any other
	// answer sets a deadline per write and flush (a timer would be an
	// allocation per request).
	stream  bool
	watch   *time.Timer
	mu      sync.Mutex
	inWrite bool
	rc      *http.ResponseController
	werr    *error
}

// stallThreshold: a write that takes longer than this waited for the client.
const stallThreshold = 200 * time.Microsecond

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
		r.stream = isEventStream(r.Header().Get("Content-Type"))
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = http.StatusOK, true
	}
	t := r.begin()
	n, err := r.ResponseWriter.Write(p)
	r.end(t)
	r.bytes += int64(n)
	r.noteErr(err)
	return n, err
}

func (r *recorder) Flush() { r.FlushError() }

// FlushError flushes and reports the error, which Flush cannot; the
// proxy's ResponseController prefers it.
func (r *recorder) FlushError() error {
	t := r.begin()
	err := r.controller().Flush()
	r.end(t)
	if !errors.Is(err, http.ErrNotSupported) {
		r.noteErr(err)
	}
	return err
}

// begin starts a write or flush: its clock, and when writeIdle is set
// its bound (a stream's watch, else a write deadline). It returns now.
func (r *recorder) begin() time.Time {
	t := time.Now()
	switch {
	case r.writeIdle <= 0:
	case !r.stream:
		r.controller().SetWriteDeadline(t.Add(r.writeIdle))
	default:
		r.controller() // before the timer can read it
		r.mu.Lock()
		r.inWrite = true
		r.mu.Unlock()
		if r.watch == nil {
			r.watch = time.AfterFunc(r.writeIdle, r.expire)
		} else {
			r.watch.Reset(r.writeIdle)
		}
	}
	return t
}

// end ends a write or flush begun at t: its watch stops, and the time it
// took counts as stall when it waited on the client.
func (r *recorder) end(t time.Time) {
	if r.watch != nil {
		r.watch.Stop()
		r.mu.Lock() // waits for an expire under way
		r.inWrite = false
		r.mu.Unlock()
	}
	if d := time.Since(t); d > stallThreshold {
		*r.stall += d
	}
}

// expire runs when a write or flush has taken writeIdle: the write
// deadline it would have had has passed.
func (r *recorder) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inWrite {
		r.rc.SetWriteDeadline(time.Now().Add(-time.Second))
	}
}

func (r *recorder) controller() *http.ResponseController {
	if r.rc == nil {
		r.rc = http.NewResponseController(r.ResponseWriter)
	}
	return r.rc
}

func (r *recorder) noteErr(err error) {
	if err != nil && r.werr != nil && *r.werr == nil {
		*r.werr = err
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
