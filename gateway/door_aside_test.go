package gateway

import (
	"fmt"
	"net"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// TestWaitingRequestHoldsNoDoorStack: a request waiting in the queue does
// not hold the stack its door needed. The chat template recurses 300
// macro calls deep, so that rendering a prompt takes hundreds of KiB of
// stack; with a request already waiting, the door of each later request
// runs aside (admitAside, with the rest of admit) and the handler
// goroutines that park keep only their own frames. Measured as the process's stack in use per waiting
// request (raw connections: no client goroutines), before any collection
// could shrink a stack.
func TestWaitingRequestHoldsNoDoorStack(t *testing.T) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{ChatTemplate: `{%- macro deep(n) -%}{%- if n > 0 -%}{{ deep(n - 1) }}{%- endif -%}{%- endmacro -%}
{%- for m in messages %}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
{%- endfor %}{{ deep(300) }}<|im_start|>assistant
`})
	if err != nil {
		t.Fatal(err)
	}
	q := queueBehindOne(t, tok, extras{}, 100, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"Say hello."}]}`)
	send := q.send
	const n = 20
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		send()
	}
	eventually(t, "all waiting", func() bool { return q.depth() == n+1 })
	runtime.ReadMemStats(&after)
	per := (int64(after.StackInuse) - int64(before.StackInuse)) / n
	t.Logf("stack in use per waiting request: %d B", per)
	if per > 64<<10 {
		t.Errorf("%d B of stack per waiting request: its handler holds the stack its door grew (want at most 64 KiB; a door needs hundreds)", per)
	}
}

// TestWaitingHandlerParksOnSmallStack: with requests already waiting, a
// request that waits parks its handler goroutine on the 4 KiB stack a
// goroutine starts with: nothing it runs before it parks grows the stack
// (chi's route lookup, admit's frame, the body's reading and the door
// run elsewhere: listenerHandler, admitAside; its first wait is the
// pipeline's own, waitTurn). Once grown to 8 KiB a parked handler's stack
// is never halved back, since its frames at the park (net/http's alone
// take 1.2 KiB) exceed the quarter a collection requires
// (waitingHandlerStack measures it). The race detector doubles the stack
// guard and grows every frame: the test runs without it (make benchonce).
func TestWaitingHandlerParksOnSmallStack(t *testing.T) {
	if raceEnabled {
		t.Skip(raceStacks)
	}
	_, per, starting := waitingHandlerStack(t, extras{})
	checkParkedStack(t, per, starting)
}

// TestTracedWaitingHandlerParksOnSmallStack is
// TestWaitingHandlerParksOnSmallStack with tracing on, every request
// sampled and exported to an in-process OTLP collector: beginning the
// request's trace (the sampler, the ids, the root span) and its wait's
// span grow no waiting handler's stack past 4 KiB either. The traces
// begun aside with their requests' admits are then what an inline one's
// is: the server span, with the door, queue and backend spans in their
// order within it. Under the race detector only the spans are checked.
func TestTracedWaitingHandlerParksOnSmallStack(t *testing.T) {
	coll := &otlpCollector{}
	srv := httptest.NewServer(coll)
	t.Cleanup(srv.Close)
	ratio := 1.0
	tp := newTracing(t, config.TracingConfig{Endpoint: srv.URL, SamplingRatio: &ratio})
	q, per, starting := waitingHandlerStack(t, extras{tracer: tp})
	if !raceEnabled {
		checkParkedStack(t, per, starting)
	}
	q.release()
	q.gw.quiesce() // every request answered, its trace finished
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans, _ := coll.snapshot()
	st := spanTree(spans)
	servers := 0
	for _, sp := range st {
		if sp.Kind != tracepb.Span_SPAN_KIND_SERVER || sp.Name != "POST /v1/chat/completions" {
			continue
		}
		servers++
		kids := st.children(sp)
		if len(kids) != 3 || len(kids["door"]) != 1 || len(kids["queue"]) != 1 || len(kids["backend"]) != 1 {
			t.Fatalf("request %s: children %v, want door, queue and one backend span", attrStr(sp, "maitred.request_id"), kids)
		}
		door, queue, backend := kids["door"][0], kids["queue"][0], kids["backend"][0]
		if attrStr(queue, "maitred.queue.outcome") != "admitted" || attrInt(sp, "http.response.status_code") != 200 {
			t.Errorf("request %s: queue span %v, server span %v", attrStr(sp, "maitred.request_id"), queue.Attributes, sp.Attributes)
		}
		at := []uint64{sp.StartTimeUnixNano, door.StartTimeUnixNano, door.EndTimeUnixNano, queue.StartTimeUnixNano,
			queue.EndTimeUnixNano, backend.StartTimeUnixNano, backend.EndTimeUnixNano, sp.EndTimeUnixNano}
		if !slices.IsSorted(at) {
			t.Errorf("request %s: server start, door, queue, backend (start, end), server end at %v: not in order", attrStr(sp, "maitred.request_id"), at)
		}
	}
	if want := waitingRequests + 2; servers != want {
		t.Errorf("%d chat requests traced, want %d", servers, want)
	}
}

// raceStacks is why a test of stack sizes skips under the race detector.
const raceStacks = "the race detector's stack guard and frames are larger: run without -race (make benchonce does)"

// checkParkedStack fails t when a waiting request's handler parks on more
// than the 4 KiB a goroutine starts with (waitingHandlerStack's figures).
func checkParkedStack(t *testing.T, per, starting int64) {
	t.Helper()
	if starting > 4<<10 {
		t.Skipf("goroutines start with %d B of stack here: a handler cannot park on 4 KiB", starting)
	}
	if per > 4<<10 {
		t.Errorf("%d B of stack per waiting request's handler: it grew past the 4 KiB it starts with before it parked (want at most 4 KiB)", per)
	}
}

// waitingRequests is how many requests waitingHandlerStack queues behind
// the two of queueBehindOne.
const waitingRequests = 100

// waitingHandlerStack queues waitingRequests requests behind one on a
// gateway with ex's parts and returns the queue, the stack each waiting
// request's handler parks on, and the runtime's starting stack size. It
// is the process's stack in use per waiting request after two
// collections, less the stacks of the request's other goroutines
// (net/http's background read), each at the starting size, with
// collections held off while the requests arrive so that the starting
// size stays as read.
func waitingHandlerStack(t *testing.T, ex extras) (q behindOne, per, starting int64) {
	t.Helper()
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q = queueBehindOne(t, tok, ex, 1000, `{"model":"m","max_tokens":3,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello."}]}`)
	const n = waitingRequests
	memory := func() (stack int64, goroutines int) {
		runtime.GC()
		runtime.GC() // a collection halves the stacks under a quarter used
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.StackInuse), runtime.NumGoroutine()
	}
	stack0, gs0 := memory()
	start := []rtmetrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	rtmetrics.Read(start)
	for range n {
		q.send()
	}
	eventually(t, "all waiting", func() bool { return q.depth() == n+1 })
	debug.SetGCPercent(100)
	stack1, gs1 := memory()
	starting = int64(start[0].Value.Uint64())
	others := int64(gs1-gs0) - n // each request's goroutines beside its handler
	per = (stack1 - stack0 - others*starting) / n
	t.Logf("stack per waiting request's handler: %d B (%d B in use per request, %.2f goroutines, starting size %d B)",
		per, (stack1-stack0)/n, float64(gs1-gs0)/n, starting)
	return q, per, starting
}

// behindOne is a model whose one backend slot a request holds, with a
// second request waiting for it (its door ran inline: nobody was queued
// before it); send sends another chat that will wait; release lets the
// backend answer them all.
type behindOne struct {
	gw      *testGateway
	send    func()
	depth   func() int
	release func()
}

// queueBehindOne starts a gateway with tok and ex's parts for model m, its one backend
// (the simulator, its tokens held back) taking one request at a time and
// queue requests waiting, and sends the two requests of behindOne.
func queueBehindOne(t *testing.T, tok *tokenize.Model, ex extras, queue int, body string) behindOne {
	t.Helper()
	gate := make(chan struct{})
	s := sim.New(sim.Config{Model: "m", OutputTokens: 3}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); hs.Close() })
	tg := startGatewayFull(t, tok, ex, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueSize = queue
		c.Models[0].QueueTimeout = config.Duration(10 * time.Minute)
		c.Models[0].TokenizerCheck = "off" // the simulator counts with its own template
	}, hs.URL)
	warmupDone(t, s)
	s.Update(func(c *sim.Config) { c.TokenGate = gate })
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	send := func() {
		c, err := net.Dial("tcp", strings.TrimPrefix(tg.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: maitred\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	pool := tg.live().byName["m"].pool
	send() // holds the backend's one slot
	eventually(t, "the first request at the backend", func() bool { return s.Stats().Running == 1 })
	send() // the first to wait
	eventually(t, "one request waiting", func() bool { return pool.Advice().Depth == 1 })
	return behindOne{gw: tg, send: send, depth: func() int { return pool.Advice().Depth }, release: release}
}
