package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestOpenStreamHandlerStackIsShallow: a streaming request's handler
// goroutine, waiting on its backend for the next event, parks with its
// frames under a quarter of 16 KiB (less the 800 bytes the runtime counts
// for its stack guard), so that a collection halves its stack to 8 KiB;
// with the pipeline's, the attempt's and the relay's large locals on the
// stack (the door's decision, the ticket, the upstream request) it stays
// at 16. Over h2c, as a front proxy reaches maitred: the handler's
// goroutine then starts at the HTTP/2 server's runHandler (net/http's
// HTTP/1.1 conn.serve alone takes 1.1 KiB more). Measured as the
// process's stack in use per open stream after two collections, with no
// goroutine of the backend's per stream (it hijacks each connection,
// writes the stream's headers and first event and keeps the socket): what
// is left per stream is the handler's stack and the h2c client's request
// writer (net/http's, 4 KiB): 12 KiB with the handler at 8, 20 with it at
// 16, and 20 again if the backend connection had goroutines of its own
// (net/http's transport has a read and a write loop per connection, 4
// KiB each; maitred's has none: internal/upstream). The race
// detector doubles the runtime's stack guard and grows every frame, so
// the test runs without it, alone in its process (make benchonce): stacks
// that earlier tests freed stay in the runtime's stack pool and would be
// reused unseen.
func TestOpenStreamHandlerStackIsShallow(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's stack guard and frames are larger: run without -race (make benchonce does)")
	}
	const streams = 100
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
		fmt.Fprintf(buf, "%x\r\n%s\r\n", len(ev), ev)
		buf.Flush()
		mu.Lock()
		held = append(held, c)
		mu.Unlock()
	})
	fb.forget = true
	srv := serveH2C(t, fb.URL, nil)
	body := `{"model":"m","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	var answers []*http.Response
	t.Cleanup(func() {
		for _, res := range answers {
			res.Body.Close()
		}
	})
	open := func() {
		res, err := srv.client.Post(srv.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, res)
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first event: %q, %v", line, err)
		}
	}
	open() // the first of its kind: connections and pools set up
	stacks := func() int64 {
		runtime.GC()
		runtime.GC() // a collection shrinks the stacks under a quarter used
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.StackInuse)
	}
	before := stacks()
	for range streams {
		open()
	}
	// A handler caught between its flush and its next wait is not
	// shrunk by that collection: the least of three readings.
	least := min(stacks(), stacks(), stacks())
	per := (least - before) / streams
	t.Logf("stack in use per open stream: %d B", per)
	if per > 16<<10 {
		t.Errorf("%d KiB of stack per open stream: the handler's frames at the backend read hold a 16 KiB stack, or the backend connection has goroutines (want at most 16 KiB: 8 for the handler, 4 for the h2c client's writer)", per>>10)
	}
}
