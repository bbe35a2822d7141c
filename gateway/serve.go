package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/quota"
	"github.com/maitred-dev/maitred/triage"
)

// handlerFunc is a gateway handler: it writes a success itself, or returns
// an error that serve renders. An *Error returned after the handler already
// wrote headers is logged, not rendered.
type handlerFunc func(w http.ResponseWriter, r *http.Request, x *exchange) error

// errClientGone reports that the client went away; nothing is written.
var errClientGone = errors.New("client closed the request")

// statusClientClosed is logged (never sent) for requests whose client left,
// as nginx does, or stopped reading (outcome client_stalled).
const statusClientClosed = 499

// exchange is the request's scope: what the gateway knows about one
// request, filled in as it moves along and read once by serve to write the
// log line and metrics. Each try at a backend is an attempt of its own
// (attempt.go); att is the latest.
// setModel records the model the request resolved to: rt, and for a LoRA
// adapter (only non-nil) the adapter's name and the slots of its backends.
func (x *exchange) setModel(rt *modelRuntime, name string, only []string) {
	x.rt, x.only = rt, only
	if only != nil {
		x.adapter = name
	}
}

type exchange struct {
	id       string
	start    time.Time
	endpoint string
	// rt is the request's model once the door (or /tokenize) found it;
	// nil before, and for a name that is not configured (unknown names
	// are not used as labels).
	rt *modelRuntime
	// adapter is the LoRA adapter the request named (rt is then its base
	// model's runtime) and only the slots of rt's backends that have it
	// loaded, the only ones it may go to; "" and nil otherwise.
	adapter string
	only    []string
	stream  bool
	sse     *streamShape // the API's stream shape; nil: OpenAI's
	bytesIn int
	// bodyHeld is the body budget the request reserved (given back at
	// its end).
	bodyHeld int64
	// upload is an audio request's spooled body (audio.go); nil for the
	// others.
	upload *upload
	// onResponseID, on a Responses create, records the id its answer
	// names (responses.go); the attempt's usage meter calls it.
	onResponseID func(id string)
	// att is the latest attempt at a backend; nil before the first.
	att     *attempt
	retries int
	// clientCtx is the client request's context.
	clientCtx context.Context
	// The phase clock: each stamp ends a phase (see phases in triage.go).
	readDone, doorDone, sentAt, headersAt, firstEventAt, lastEventAt time.Time
	events                                                           int
	clientStall                                                      time.Duration
	// clientWriteErr is the first failed write to the client, if any.
	clientWriteErr error
	// streamBroke is the reason the gateway ended a backend's answer after
	// its headers: a stream (with an error event, then by aborting) or a
	// body (by aborting); sseBroke says it was a stream, whose error event
	// named it, so that its outcome stays its status (settle).
	streamBroke string
	sseBroke    bool
	// outcome names how the request ended when it did not succeed, and
	// layer where its progress stopped; failed says they are set. They are
	// set once, by fail, where the failure is known (a door rejection's
	// outcome is its admission.Reason, the label of
	// maitred_rejections_total); nothing overwrites them.
	outcome string
	layer   triage.Layer
	failed  bool
	// key is the API key the request presented (keys.go); nil when the
	// gateway is open or before the check.
	key *apiKey
	// res is the request's hold on its key's limits (limits.go), settled
	// when the request ends; reserved is what it took.
	res      quota.Reservation
	reserved int64
	rateSet  bool // the x-ratelimit-* headers are set
	// The door's numbers, logged with the request.
	promptTokens, maxTokens, maxModelLen int
	uncounted                            string
	// tr is the request's tracing (tracing.go); tr.on() is false when the
	// gateway does not trace.
	tr spans
}

// serve is the edge adapter: it assigns the request id, runs h, renders a
// returned error in OpenAI's envelope, and writes the one access-log line
// and the request metrics.
func (g *Gateway) serve(endpoint string, h handlerFunc) http.HandlerFunc {
	return g.serveIn(openAIErrors, endpoint, h)
}

// serveIn is serve with the API's own error envelope.
func (g *Gateway) serveIn(env errorWriter, endpoint string, h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		x := &exchange{id: requestID(r), start: time.Now(), endpoint: endpoint, clientCtx: r.Context()}
		rec := &recorder{ResponseWriter: w, stall: &x.clientStall, werr: &x.clientWriteErr}
		w.Header().Set("X-Request-Id", x.id)
		if g.tr != nil {
			g.tr.start(r, x)
		}
		var err error
		defer func() {
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				g.log.Error("handler panic", zap.String("request_id", x.id), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
				err = &Error{Status: http.StatusInternalServerError, Type: typeServer, Code: codeInternal, Message: "internal error; request id " + x.id}
				if !rec.wroteHeader {
					env(rec, err.(*Error))
				}
			}
			if p == http.ErrAbortHandler {
				// The proxy aborted a body it had started: the client's
				// doing, or the backend's (streamBroke names it).
				switch {
				case r.Context().Err() != nil || x.clientWriteErr != nil:
					x.fail(clientOutcome(x), triage.LayerClient)
				case x.sseBroke:
					// A stream ended with its error event, then aborted:
					// settle names it by stream_error, as before the abort.
				case x.streamBroke != "":
					x.fail(x.streamBroke, x.brokenLayer())
				default:
					x.fail(outcomeAborted, triage.LayerClient)
				}
			}
			g.finish(x, rec, r, err)
			if p == http.ErrAbortHandler {
				panic(p) // let net/http drop the connection
			}
		}()
		err = h(rec, r, x)
		if err == nil {
			return
		}
		var e *Error
		switch {
		case errors.As(err, &e):
			x.fail(e.outcome(), e.Layer)
			if !rec.wroteHeader {
				env(rec, e)
			}
		case errors.Is(err, errClientGone):
			x.fail(outcomeClientClosed, triage.LayerClient)
		default:
			x.fail(codeInternal, triage.LayerDoor)
			if !rec.wroteHeader {
				env(rec, &Error{Status: http.StatusInternalServerError, Type: typeServer, Code: codeInternal,
					Message: "internal error; request id " + x.id})
			}
		}
	}
}

// fail records how the request failed and where, the first time it is
// told: the failure is named where it is known, and nothing renames it.
func (x *exchange) fail(outcome string, layer triage.Layer) {
	if !x.failed {
		x.outcome, x.layer, x.failed = outcome, layer, true
	}
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
func clientOutcome(x *exchange) string {
	if errors.Is(x.clientWriteErr, os.ErrDeadlineExceeded) {
		return outcomeClientStalled
	}
	return outcomeClientClosed
}

func (g *Gateway) finish(x *exchange, rec *recorder, r *http.Request, err error) {
	g.bodies.give(x.bodyHeld)
	x.upload.close(x)
	status := rec.status
	if x.clientWriteErr != nil {
		// The answer was complete upstream but did not all reach the client.
		x.fail(clientOutcome(x), triage.LayerClient)
	}
	switch {
	case !rec.wroteHeader:
		status = statusClientClosed
		x.fail(outcomeClientClosed, triage.LayerClient)
	case x.outcome == outcomeClientClosed || x.outcome == outcomeClientStalled:
		// Headers went out, but the client did not take the whole answer.
		status = statusClientClosed
	}
	layer := x.settle(status)
	end := time.Now()
	d := end.Sub(x.start)
	code := strconv.Itoa(status)
	ph := x.phases(end)
	g.observe(x, layer, ph, d)
	if x.tr.on() {
		g.tr.end(x, status, layer, end)
	}
	mm := g.metricsOf(x)
	mm.requests.WithLabelValues(x.endpoint, code).Inc()
	mm.duration.WithLabelValues(x.endpoint).Observe(d.Seconds())

	// Probes and scrapes are not worth a line each at info level.
	lvl := zap.InfoLevel
	if specOf(x.endpoint).quiet {
		lvl = zap.DebugLevel
	}
	ce := g.log.Check(lvl, "request")
	if ce == nil {
		return
	}
	fields := make([]zap.Field, 0, 24) // room for a full line: no regrowth
	fields = append(fields,
		zap.String("request_id", x.id),
		zap.String("method", r.Method),
		zap.String("endpoint", x.endpoint),
		zap.Int("status", status),
		zap.Int("bytes_in", x.bytesIn),
		zap.Int64("bytes_out", rec.bytes),
		zap.Duration("duration", d),
		zap.String("remote", r.RemoteAddr),
	)
	if x.rt != nil {
		fields = append(fields, zap.String("model", x.rt.name))
	}
	if x.adapter != "" {
		fields = append(fields, zap.String("adapter", x.adapter))
	}
	if x.key != nil {
		fields = append(fields, zap.String("key", x.key.name))
	}
	if a := x.att; a != nil {
		fields = append(fields, zap.String("backend", a.backend.URL.Host))
		if a.upstreamID != "" {
			fields = append(fields, zap.String("upstream_request_id", a.upstreamID))
		}
	}
	if x.stream {
		fields = append(fields, zap.Bool("stream", true))
	}
	if x.outcome != "" {
		fields = append(fields, zap.String("outcome", x.outcome))
	}
	if x.promptTokens > 0 {
		fields = append(fields, zap.Int("prompt_tokens", x.promptTokens))
	}
	if x.maxTokens > 0 {
		fields = append(fields, zap.Int("max_tokens", x.maxTokens))
	}
	if x.maxModelLen > 0 {
		fields = append(fields, zap.Int("max_model_len", x.maxModelLen))
	}
	if x.uncounted != "" {
		fields = append(fields, zap.String("uncounted", x.uncounted))
	}
	if x.att != nil {
		if n, ok := x.used(); ok {
			fields = append(fields, zap.Int64("used_tokens", n))
			if from := x.att.usage.from(); from != "" {
				fields = append(fields, zap.String("used_from", from))
			}
		}
	}
	if x.streamBroke != "" {
		fields = append(fields, zap.String("stream_error", x.streamBroke))
	}
	if x.rt != nil {
		fields = append(fields, zap.Object("phases", ph))
		if layer != triage.LayerNone {
			fields = append(fields, zap.String("layer", string(layer)))
		}
	}
	if x.retries > 0 {
		fields = append(fields, zap.Int("retries", x.retries))
	}
	if err != nil {
		fields = append(fields, zap.String("error", logText(err)))
	}
	ce.Write(fields...)
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
	rc        *http.ResponseController
	werr      *error
}

// stallThreshold: a write that takes longer than this waited for the client.
const stallThreshold = 200 * time.Microsecond

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = http.StatusOK, true
	}
	t := r.bound()
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	if d := time.Since(t); d > stallThreshold {
		*r.stall += d
	}
	r.noteErr(err)
	return n, err
}

func (r *recorder) Flush() { r.FlushError() }

// FlushError flushes and reports the error, which Flush cannot; the
// proxy's ResponseController prefers it.
func (r *recorder) FlushError() error {
	t := r.bound()
	err := r.controller().Flush()
	if d := time.Since(t); d > stallThreshold {
		*r.stall += d
	}
	if !errors.Is(err, http.ErrNotSupported) {
		r.noteErr(err)
	}
	return err
}

// bound sets the write deadline when writeIdle is set, and returns now.
func (r *recorder) bound() time.Time {
	t := time.Now()
	if r.writeIdle > 0 {
		r.controller().SetWriteDeadline(t.Add(r.writeIdle))
	}
	return t
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
