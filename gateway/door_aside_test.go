package gateway

import (
	"fmt"
	"net"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"testing"
	"time"

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
	q := queueBehindOne(t, tok, 100, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"Say hello."}]}`)
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
// take 1.2 KiB) exceed the quarter a collection requires. Measured as the
// process's stack in use per waiting request after two collections, less
// the stacks of the request's other goroutines (net/http's background
// read), each at the runtime's starting size, with collections held off
// while the requests arrive so that the starting size stays as read.
// The race detector doubles the stack guard and grows every frame: the
// test runs without it (make benchonce).
func TestWaitingHandlerParksOnSmallStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's stack guard and frames are larger: run without -race (make benchonce does)")
	}
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := queueBehindOne(t, tok, 1000, `{"model":"m","max_tokens":3,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello."}]}`)
	send := q.send
	const n = 100
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
		send()
	}
	eventually(t, "all waiting", func() bool { return q.depth() == n+1 })
	debug.SetGCPercent(100)
	stack1, gs1 := memory()
	starting := int64(start[0].Value.Uint64())
	others := int64(gs1-gs0) - n // each request's goroutines beside its handler
	per := (stack1 - stack0 - others*starting) / n
	t.Logf("stack per waiting request's handler: %d B (%d B in use per request, %.2f goroutines, starting size %d B)",
		per, (stack1-stack0)/n, float64(gs1-gs0)/n, starting)
	if starting > 4<<10 {
		t.Skipf("goroutines start with %d B of stack here: a handler cannot park on 4 KiB", starting)
	}
	if per > 4<<10 {
		t.Errorf("%d B of stack per waiting request's handler: it grew past the 4 KiB it starts with before it parked (want at most 4 KiB)", per)
	}
}

// behindOne is a model whose one backend slot a request holds, with a
// second request waiting for it (its door ran inline: nobody was queued
// before it); send sends another chat that will wait.
type behindOne struct {
	send  func()
	depth func() int
}

// queueBehindOne starts a gateway with tok for model m, its one backend
// (the simulator, its tokens held back) taking one request at a time and
// queue requests waiting, and sends the two requests of behindOne.
func queueBehindOne(t *testing.T, tok *tokenize.Model, queue int, body string) behindOne {
	t.Helper()
	gate := make(chan struct{})
	s := sim.New(sim.Config{Model: "m", OutputTokens: 3}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); hs.Close() })
	tg := startGatewayToks(t, tok, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueSize = queue
		c.Models[0].QueueTimeout = config.Duration(10 * time.Minute)
		c.Models[0].TokenizerCheck = "off" // the simulator counts with its own template
	}, hs.URL)
	warmupDone(t, s)
	s.Update(func(c *sim.Config) { c.TokenGate = gate })
	t.Cleanup(func() { close(gate) })
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
	return behindOne{send: send, depth: func() int { return pool.Advice().Depth }}
}
