package prefixindex

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/kvevents"
)

// watch passes a subscription's calls to the index and tells the test
// about each, so that it awaits what happened instead of sleeping.
type watch struct {
	inner kvevents.Sink
	ctx   context.Context
	ch    chan string
}

func (w *watch) say(s string) {
	select {
	case w.ch <- s:
	case <-w.ctx.Done():
	}
}

func (w *watch) Apply(r int, b kvevents.Batch) { w.inner.Apply(r, b); w.say("apply") }
func (w *watch) Clear(r int, why string)       { w.inner.Clear(r, why); w.say("clear: " + why) }
func (w *watch) State(r int, live bool, why string) {
	w.inner.State(r, live, why)
	if live {
		w.say("live")
	} else {
		w.say("down: " + why)
	}
}
func (w *watch) Noted(r int, n kvevents.Noted) {
	w.inner.Noted(r, n)
	w.say([...]string{"gap", "replayed", "decode error"}[n])
}

// await reads the watch until a message starting with prefix (or fails
// the test after a minute: a guard, not a timing assertion).
func (w *watch) await(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		select {
		case s := <-w.ch:
			if strings.HasPrefix(s, prefix) {
				return s
			}
		case <-deadline.C:
			t.Fatalf("no %q from the subscriber", prefix)
		}
	}
}

// blocks awaits the index holding want leading blocks of an n-token
// prompt for "a", checked after each call the subscriber makes.
func (w *watch) blocks(t *testing.T, x *Index, n, want int) {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	out := make([]int, 1)
	keys := AppendKeys(nil, "", prompt(n), bs)
	for !x.Match(keys, []string{"a"}, out) || out[0] != want {
		select {
		case <-w.ch:
		case <-deadline.C:
			st, _ := x.Status("a")
			t.Fatalf("cached blocks = %d, want %d (%+v)", out[0], want, st)
		}
	}
}

// warm publishes empty batches until the subscriber reports want (PUB
// drops what it sends before the subscription reaches it).
func (w *watch) warm(t *testing.T, p *testPub, want string) string {
	t.Helper()
	for range 3000 {
		p.publish(payload(), false)
		select {
		case s := <-w.ch:
			if strings.HasPrefix(s, want) {
				return s
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %q from the subscriber", want)
	return ""
}

func runSub(t *testing.T, x *Index, name, ep, replay string) (*watch, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{inner: x.Sink(name), ctx: ctx, ch: make(chan string, 64)}
	s := &kvevents.Subscriber{Endpoint: ep, ReplayEndpoint: replay, Topic: "kv", Sink: w,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	return w, func() { cancel(); <-done }
}

func blocksOf(t *testing.T, x *Index, n int) int {
	t.Helper()
	out := make([]int, 1)
	if !x.Match(AppendKeys(nil, "", prompt(n), bs), []string{"a"}, out) {
		st, _ := x.Status("a")
		t.Fatalf("index not usable: %+v", st)
	}
	return out[0]
}

func TestSubscriberOverZMQ(t *testing.T) {
	x := New(bs, 0, nil)
	x.Add("a", 0, 1)
	p := startPub(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", "kv")
	p.next = 1000 // a publisher that ran before: its early batches are gone
	ep, replay := p.endpoints()
	w, stop := runSub(t, x, "a", ep, replay)
	defer stop()
	w.warm(t, p, "apply")

	p.publish(payload(evStored(0, []uint64{11, 12}, toks(100, 8))), false)
	w.blocks(t, x, 12, 2)

	// A batch lost on the way is replayed from the first missing seq.
	p.publish(payload(evStored(12, []uint64{13}, toks(108, 4))), true)
	p.publish(payload(), false)
	w.await(t, "replayed")
	w.await(t, "live")
	if n := blocksOf(t, x, 12); n != 3 {
		t.Fatalf("after replay: cached blocks = %d, want 3", n)
	}

	// A batch older than the replay buffer: the index is cleared.
	lost := p.publish(payload(evStored(0, []uint64{40}, toks(500, 4))), true)
	p.forget(lost)
	p.publish(payload(), false)
	if s := w.await(t, "clear"); !strings.Contains(s, "not replayable") {
		t.Fatalf("clear: %s", s)
	}
	w.await(t, "live")
	if n := blocksOf(t, x, 12); n != 0 {
		t.Fatalf("after an unreplayable gap: cached blocks = %d, want 0", n)
	}

	// AllBlocksCleared.
	p.publish(payload(evStored(0, []uint64{21}, toks(100, 4))), false)
	w.blocks(t, x, 12, 1)
	p.publish(payload(evCleared()), false)
	w.blocks(t, x, 12, 0) // AllBlocksCleared

	// The publisher restarts on the same ports, counting from 0.
	p.publish(payload(evStored(0, []uint64{31}, toks(100, 4))), false)
	w.blocks(t, x, 12, 1)
	p.close()
	w.await(t, "down")
	p = startPub(t, ep, replay, "kv")
	defer p.close()
	if s := w.warm(t, p, "clear"); !strings.Contains(s, "publisher restarted") {
		t.Fatalf("clear: %s", s)
	}
	w.await(t, "live")
	if n := blocksOf(t, x, 12); n != 0 {
		t.Fatalf("after a restart: cached blocks = %d, want 0", n)
	}
	st, _ := x.Status("a")
	// Replays: the lost batch, and the restarted publisher's first batches.
	if st.Gaps != 2 || st.Replays != 2 || st.State != Live || !strings.Contains(st.LastClear, "restarted") {
		t.Fatalf("status = %+v", st)
	}
}

func toks(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// A publisher sending garbage: the decode error is counted, the index is
// cleared and not used for routing (Match false) until a batch is read
// again; nothing panics.
func TestSubscriberGarbage(t *testing.T) {
	x := New(bs, 0, nil)
	x.Add("a", 0, 1)
	p := startPub(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", "kv")
	defer p.close()
	ep, replay := p.endpoints()
	w, stop := runSub(t, x, "a", ep, replay)
	defer stop()
	w.warm(t, p, "apply")
	p.publish(payload(evStored(0, []uint64{11}, toks(100, 4))), false)
	w.blocks(t, x, 4, 1)

	p.publish([]byte("\x93\xcb\x3f not msgpack"), false)
	if s := w.await(t, "down"); !strings.Contains(s, "undecodable") {
		t.Fatalf("state: %s", s)
	}
	out := make([]int, 1)
	if x.Match(AppendKeys(nil, "", prompt(4), bs), []string{"a"}, out) {
		t.Fatal("the index of a backend sending garbage was used")
	}
	st, _ := x.Status("a")
	if st.DecodeErrors != 1 || st.State != Stale || st.Blocks != 0 || !strings.Contains(st.Reason, "undecodable") {
		t.Fatalf("status = %+v", st)
	}
	p.publish(payload(), false)
	w.await(t, "live")
}

// An endpoint nobody listens on: the backend stays unusable, with why.
func TestSubscriberUnreachable(t *testing.T) {
	p := startPub(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", "kv")
	ep, _ := p.endpoints()
	p.close() // the port is free now: connections are refused
	x := New(bs, 0, nil)
	x.Add("a", 0, 1)
	w, stop := runSub(t, x, "a", ep, "")
	defer stop()
	if s := w.await(t, "down"); !strings.Contains(s, "unreachable") {
		t.Fatalf("state: %s", s)
	}
	w.await(t, "down") // and again, after a backoff
	st, _ := x.Status("a")
	if st.State != Stale || !strings.Contains(st.Reason, "unreachable") {
		t.Fatalf("status = %+v", st)
	}
}
