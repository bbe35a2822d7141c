package gateway

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
	"github.com/maitred-dev/maitred/triage"
)

// TestFailureTableIsComplete: every failure the gateway can produce has a
// row in the failure table, once: each door rejection reason and key
// check, each queue outcome other than admitted, and every code and
// outcome the gateway declares (errors.go, read as source so that a new
// constant without a row fails here).
func TestFailureTableIsComplete(t *testing.T) {
	byCode := map[string]*failure{}
	names := map[string]bool{}
	for _, f := range failureTable {
		if byCode[f.code] != nil {
			t.Errorf("two rows name %q", f.code)
		}
		byCode[f.code] = f
		names[f.code], names[f.wireCode()] = true, true
	}
	for _, r := range admission.Reasons() {
		if byCode[r.String()] == nil {
			t.Errorf("door reason %s has no row", r)
		}
	}
	for _, o := range admission.Outcomes() {
		if o == admission.Admitted {
			continue
		}
		if f := queueFailure(o); f == nil || byCode[f.code] != f {
			t.Errorf("queue outcome %s has no row", o)
		}
	}
	fs := token.NewFileSet()
	file, err := parser.ParseFile(fs, "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := 0
	ast.Inspect(file, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
			return true
		}
		name := vs.Names[0].Name
		lit, ok := vs.Values[0].(*ast.BasicLit)
		if !ok || !(strings.HasPrefix(name, "code") || strings.HasPrefix(name, "outcome")) {
			return true
		}
		declared++
		v, _ := strconv.Unquote(lit.Value)
		if !names[v] {
			t.Errorf("%s (%q) is a failure the gateway declares but no row of the failure table names", name, v)
		}
		return true
	})
	if declared < 30 {
		t.Fatalf("read %d code and outcome constants from errors.go; the parse is broken", declared)
	}
}

// TestFailureTableVocabulary checks every row of the failure table: a
// request that fails with it, concluded by the edge's own finish, is
// named by the row's code in the access log's outcome (a broken
// stream's stream_error), the server span's maitred.outcome, the triage
// sample's reason (and triage's count by reason) and the label of the
// metric that counts it (the row's metric). Each row is produced where
// the gateway produces it (the door's rejection, the queue's refusal,
// classify, the stream guard's break, the client's write); a row no case
// below produces fails the test.
func TestFailureTableVocabulary(t *testing.T) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	simURL := httptestServer(t, sim.New(sim.Config{Model: "m", OutputTokens: 2, MaxModelLen: 256, Tokenizer: sim.ModelTokenizer(tok)}, nil))
	coll := &otlpCollector{}
	srv := httptest.NewServer(coll)
	t.Cleanup(srv.Close)
	ratio := 1.0
	tp := newTracing(t, config.TracingConfig{SamplingRatio: &ratio, ServiceName: "maitred-test", Endpoint: srv.URL})
	core, logs := observer.New(zap.InfoLevel)
	tri := triage.New(triage.DefaultConfig(), time.Now)
	tg := startGatewayFull(t, tok, extras{log: zap.New(core), triage: tri, tracer: tp}, nil, simURL)
	rt := tg.live().byName["m"]
	backend := rt.fm.Backends()[0]

	results := map[string]Result{}
	observed := map[string]string{}
	for _, f := range failureTable {
		id := "row-" + f.code
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		x := &exchange{request: request{id: id, start: time.Now(), endpoint: "/v1/chat/completions", spec: specOf("/v1/chat/completions"), clientCtx: r.Context(), rt: rt}, in: r}
		rec := &recorder{ResponseWriter: httptest.NewRecorder(), stall: &x.clientStall, werr: &x.clientWriteErr}
		tg.tr.start(x)
		x.readDone, x.doorDone = time.Now(), time.Now()
		newAttempt := func() *attempt {
			a := x.newAttempt(backend)
			a.sentAt = time.Now()
			return a
		}
		queue := func(o admission.Outcome) error { return tg.queueRefused(rt, o, admission.Ticket{Tokens: 1 << 30}) }
		var err error
		switch f.source {
		case fromDoor, fromQuota:
			if f.metric == metricRejections { // a door reason, or a key check
				err = tg.rejected(x, rejection(&admission.Rejection{Reason: reasonNamed(t, f.code), Status: f.status, Code: f.wireCode(), Message: "refused"}))
				break
			}
			err = f.err("refused", nil)
		case fromQueue, fromStore:
			err = queue(outcomeOf(t, f))
		case fromBackend:
			a := newAttempt()
			switch f {
			case failConnect:
				a.res = tg.classify(r, a, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
				err = a.res.err
			case failBeforeHeaders:
				a.res = tg.classify(r, a, io.ErrUnexpectedEOF)
				err = a.res.err
			case failFirstByte:
				a.timedOut.Store(true)
				a.res = tg.classify(r, a, errors.New("context canceled"))
				err = a.res.err
			case failStalled, failDisconnected:
				x.stream = true
				rec.WriteHeader(http.StatusOK)
				a.headersAt, a.upstreamStatus = time.Now(), http.StatusOK
				a.clockEvents(3, time.Now())
				a.stalled.Store(f == failStalled)
				tg.streamBroken(a, io.ErrUnexpectedEOF)
				a.res = attemptResult{err: errAnswerCut, cut: true}
				err = errAnswerCut
			case failRejected:
				a.headersAt, a.upstreamStatus = time.Now(), http.StatusBadRequest
				rec.WriteHeader(http.StatusBadRequest)
			default:
				t.Errorf("row %s: no case produces it: add one", f.code)
				continue
			}
		case fromClient:
			switch f {
			case failClientClosed:
				err = errClientGone
			case failClientStalled:
				newAttempt()
				rec.WriteHeader(http.StatusOK)
				x.clientWriteErr = &net.OpError{Op: "write", Err: os.ErrDeadlineExceeded}
			case failAborted:
				newAttempt()
				rec.WriteHeader(http.StatusOK)
				err = errAnswerCut
			case failReadTimeout, failBodyRead:
				err = f.err("the body", nil)
			default:
				t.Errorf("row %s: no case produces it: add one", f.code)
				continue
			}
		default:
			t.Errorf("row %s: no case produces it: add one", f.code)
			continue
		}
		if e := (*Error)(nil); errors.As(err, &e) && !rec.wroteHeader {
			e.write(rec)
		}
		res := tg.finish(x, rec, r, err)
		results[f.code] = res
		observed[f.code] = observation(x, &res).Reason
	}
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	snap, _ := coll.snapshot()
	spans := spanTree(snap)
	lines := map[string]map[string]any{}
	for _, e := range logs.FilterMessage("request").All() {
		f := e.ContextMap()
		id, _ := f["request_id"].(string)
		lines[id] = f
	}
	metrics := tg.gathered(t)
	var ev map[string]any
	for _, m := range tri.Report().Models {
		if m.Model == "m" {
			ev = m.Evidence
		}
	}
	byReason := map[string]int{}
	for _, k := range []string{"rejections_by_reason", "failures_by_reason"} {
		if m, ok := ev[k].(map[string]int); ok {
			for r, n := range m {
				byReason[r] += n
			}
		}
	}

	for _, f := range failureTable {
		res, ok := results[f.code]
		if !ok {
			continue // reported above
		}
		id := "row-" + f.code
		if res.Code != f.code {
			t.Errorf("%s: concluded as %q", f.code, res.Code)
		}
		line := lines[id]
		logged, _ := line["outcome"].(string)
		if res.InStream {
			logged, _ = line["stream_error"].(string)
		}
		if logged != f.code {
			t.Errorf("%s: the access log names it %q (line %v)", f.code, logged, line)
		}
		if got := attrStr(spans.server(t, id), attrOutcome); got != f.code {
			t.Errorf("%s: the span's %s is %q", f.code, attrOutcome, got)
		}
		if observed[f.code] != f.code {
			t.Errorf("%s: triage's reason is %q", f.code, observed[f.code])
		}
		if res.Layer != triage.LayerNone && byReason[f.code] == 0 {
			t.Errorf("%s: triage counts no failure by that reason: %v", f.code, byReason)
		}
		if f.metric != "" && !hasLabel(metrics, f.metric, f.code) {
			t.Errorf("%s: %s counts no series labelled %q:\n%s", f.code, f.metric, f.code, grepLines(metrics, f.metric))
		}
	}
}

// reasonNamed is the door reason whose name is code.
func reasonNamed(t *testing.T, code string) admission.Reason {
	for _, r := range admission.Reasons() {
		if r.String() == code {
			return r
		}
	}
	t.Fatalf("no door reason %q", code)
	return 0
}

// outcomeOf is the queue outcome whose failure is f.
func outcomeOf(t *testing.T, f *failure) admission.Outcome {
	for _, o := range admission.Outcomes() {
		if queueFailure(o) == f {
			return o
		}
	}
	t.Fatalf("no queue outcome fails as %s", f.code)
	return 0
}

// hasLabel reports whether the exposition has a series of family with a
// label value code (and model m).
func hasLabel(text, family, code string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, family+"{") && strings.Contains(l, `model="m"`) && strings.Contains(l, `="`+code+`"`) && !strings.HasSuffix(l, " 0") {
			return true
		}
	}
	return false
}
