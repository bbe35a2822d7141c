package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
)

// errCancelled ends a background Responses job cancelled through
// POST /v1/responses/{id}/cancel.
var errCancelled = errors.New("response cancelled")

// job is one single-sequence generation of the endpoints that are not chat
// or completions (Responses, Messages, audio). It goes through the same
// engine as chat: the FIFO queue and KV admission, TTFT then one token per
// ITL, the TokenGate, the vLLM metrics and the abort accounting. Only the
// wire format differs, and that is the caller's business (emit).
type job struct {
	s       *Server
	cfg     Config
	log     *zap.Logger
	arrival time.Time
	prompt  int    // prompt tokens: the KV footprint at admission
	target  int    // tokens to generate
	finish  string // "stop" or "length"
	offset  int    // token i is tokenText(offset, i)
	stream  bool   // content chunks count towards CutAfterChunks

	generated int
	text      strings.Builder
	chunks    int
}

// newJob plans a single-sequence generation with the given budget (tokens
// the request may generate, at least 1): the natural answer is
// cfg.OutputTokens long ("stop") unless the budget is smaller ("length").
func (s *Server) newJob(cfg Config, log *zap.Logger, arrival time.Time, prompt, budget int) *job {
	j := &job{s: s, cfg: cfg, log: log, arrival: arrival, prompt: prompt, target: cfg.OutputTokens, finish: "stop"}
	if budget < j.target {
		j.target, j.finish = budget, "length"
	}
	return j
}

// run admits the job and generates its tokens, calling emit (when not nil)
// after each one. It returns nil once every token is out; otherwise the
// failure is already counted (client gone or cancelled: aborted; shutdown:
// failed) and the error is errClientGone, errCancelled or errStopped. A
// failing emit counts as the client going away.
func (j *job) run(ctx context.Context, emit func(step int, tok string) error) error {
	s, cfg := j.s, j.cfg
	t, err := s.admit(ctx, j.prompt)
	if err != nil {
		return j.fail(ctx, err, "waiting")
	}
	defer s.release(t)
	s.m.queue.WithLabelValues(cfg.Model, "0").Observe(time.Since(j.arrival).Seconds())
	var last time.Time
	for step := range j.target {
		var err error
		phase := "decode"
		if step == 0 {
			phase, err = "prefill", s.prefill(ctx, &cfg, j.prompt)
		} else {
			err = s.wait(ctx, cfg.ITL, cfg.TokenGate)
		}
		if err != nil {
			return j.fail(ctx, err, phase)
		}
		now := time.Now()
		if step == 0 {
			s.m.ttft.WithLabelValues(cfg.Model, "0").Observe(now.Sub(j.arrival).Seconds())
			s.m.promptTok.WithLabelValues(cfg.Model, "0").Add(float64(j.prompt))
		} else {
			s.m.itl.WithLabelValues(cfg.Model, "0").Observe(now.Sub(last).Seconds())
		}
		last = now
		tok := tokenText(j.offset, step)
		j.text.WriteString(tok)
		j.generated++
		if step == 0 {
			cfg.processed(j.prompt + 1)
		} else {
			cfg.processed(1)
		}
		s.grow(t, 1)
		s.m.genTok.WithLabelValues(cfg.Model, "0").Add(1)
		if emit == nil {
			continue
		}
		if err := emit(step, tok); err != nil {
			return j.fail(ctx, errClientGone, "write")
		}
		if j.stream {
			j.chunks++
			if cfg.CutAfterChunks > 0 && j.chunks >= cfg.CutAfterChunks {
				j.cut()
			}
		}
	}
	return nil
}

// done counts a job answered in full; call it after the last write.
func (j *job) done() {
	s, model := j.s, j.cfg.Model
	end := time.Now()
	s.m.e2e.WithLabelValues(model, "0").Observe(end.Sub(j.arrival).Seconds())
	s.m.reqPrompt.WithLabelValues(model, "0").Observe(float64(j.prompt))
	s.m.reqGen.WithLabelValues(model, "0").Observe(float64(j.generated))
	s.m.success.WithLabelValues(model, "0", j.finish).Inc()
	s.count(func(st *Stats) { st.Completed++ })
	j.log.Debug("sim request finished", zap.Int("completion_tokens", j.generated),
		zap.String("finish_reason", j.finish), zap.Duration("e2e", end.Sub(j.arrival)))
}

// fail counts an interrupted job and returns the error that ended it. A
// job whose context was cancelled with cause errCancelled was cancelled by
// the API rather than abandoned by its client.
func (j *job) fail(ctx context.Context, err error, phase string) error {
	s, model := j.s, j.cfg.Model
	if errors.Is(err, errStopped) {
		s.m.success.WithLabelValues(model, "0", "error").Inc()
		s.count(func(st *Stats) { st.Failed++ })
		j.log.Info("sim request aborted by shutdown", zap.String("phase", phase))
		return errStopped
	}
	if errors.Is(context.Cause(ctx), errCancelled) {
		s.m.success.WithLabelValues(model, "0", "abort").Inc()
		s.count(func(st *Stats) { st.Cancelled++ })
		j.log.Info("sim request cancelled", zap.String("phase", phase))
		return errCancelled
	}
	s.aborted(j.log, model, 1, phase)
	return errClientGone
}

// cut drops the connection on purpose (CutAfterChunks), like generation.cut.
func (j *job) cut() {
	s := j.s
	s.m.simCut.WithLabelValues(j.cfg.Model, "0").Inc()
	s.m.success.WithLabelValues(j.cfg.Model, "0", "abort").Inc()
	s.count(func(st *Stats) { st.Cut++ })
	j.log.Info("sim cutting stream (CutAfterChunks)", zap.Int("chunks", j.chunks))
	panic(http.ErrAbortHandler)
}

// errorWriter writes one error answer in an endpoint's envelope.
type errorWriter func(w http.ResponseWriter, e *apiError)

// rejectWith counts a generation request answered with an error and
// writes it with write.
func (s *Server) rejectWith(w http.ResponseWriter, e *apiError, write errorWriter) {
	s.count(func(st *Stats) {
		if e.Status >= 500 {
			st.Failed++
		} else {
			st.Rejected++
		}
	})
	write(w, e)
}

// admissionFaults applies the faults every engine route (generation and
// pooling) shares before parsing: 503 once stopped, and Hang. It reports whether the request was
// answered (or abandoned) already.
func (s *Server) admissionFaults(ctx context.Context, w http.ResponseWriter, cfg Config, log *zap.Logger, write errorWriter) bool {
	if s.stopped() {
		s.rejectWith(w, failError(http.StatusServiceUnavailable, ""), write)
		return true
	}
	if !cfg.Hang {
		return false
	}
	log.Debug("sim hanging request (Hang)")
	select {
	case <-ctx.Done():
		s.aborted(log, cfg.Model, 1, "hang")
	case <-s.stop:
		s.rejectWith(w, generationError(), write)
	}
	return true
}

// runWhole generates a non-streaming answer to its end. It reports false
// when the request ended otherwise: shutdown (answered with the family's
// generation error, written by writeErr) or a client gone (counted as an
// abort); the caller then writes nothing more.
func (j *job) runWhole(ctx context.Context, w http.ResponseWriter, writeErr func(http.ResponseWriter, *apiError)) bool {
	if err := j.run(ctx, nil); err != nil {
		if err == errStopped {
			writeErr(w, generationError())
		}
		return false
	}
	if ctx.Err() != nil {
		_ = j.fail(ctx, errClientGone, "write")
		return false
	}
	return true
}

// startStream sends a streaming answer's headers; a client already gone
// is counted as an abort and nil returned.
func (j *job) startStream(w http.ResponseWriter) *sseWriter {
	sw, err := startSSE(w)
	if err != nil {
		j.s.aborted(j.log, j.cfg.Model, 1, "write")
		return nil
	}
	j.stream = true
	return sw
}

// sseWriter writes "event: <name>\ndata: <json>\n\n" frames (the Responses
// and Anthropic streams) or bare "data:" frames, flushing each.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE sends 200 and the event-stream headers.
func startSSE(w http.ResponseWriter) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	return sw, sw.rc.Flush()
}

func (sw *sseWriter) frame(event string, data []byte) error {
	var b []byte
	if event != "" {
		b = append(b, "event: "...)
		b = append(b, event...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	if _, err := sw.w.Write(b); err != nil {
		return err
	}
	return sw.rc.Flush()
}
