package gateway

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFramingScanner follows request streams fed in every split of two
// pieces, as the reads from a socket may come, and finds the request
// framed two ways (its 1-based index among those handed to handlers).
func TestFramingScanner(t *testing.T) {
	req := func(hdr, body string) string { return "POST /x HTTP/1.1\r\nHost: h\r\n" + hdr + "\r\n" + body }
	cl := func(b string) string { return "Content-Length: " + strconv.Itoa(len(b)) + "\r\n" }
	chunked := func(parts ...string) string {
		var s strings.Builder
		for _, p := range parts {
			s.WriteString(strconv.FormatInt(int64(len(p)), 16) + ";ext=1\r\n" + p + "\r\n")
		}
		return s.String() + "0\r\nTrailer-Field: x\r\n\r\n"
	}
	const te = "Transfer-Encoding: chunked\r\n"
	// A body that looks like a header block framed two ways must not be
	// taken for one.
	decoy := "GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	tests := []struct {
		name   string
		stream string
		want   int
	}{
		{"one plain request", req(cl("{}"), "{}"), 0},
		{"TE and CL", req(cl("xxxx")+te, chunked("{}")), 1},
		{"lower-case names, bare LF", "POST /x HTTP/1.1\nhost: h\ncontent-length: 3\ntransfer-encoding: chunked\n\n" + chunked("{}"), 1},
		{"third request", req(cl("{}"), "{}") + req(te, chunked("a", "bc")) + req(te+cl("{}"), chunked("{}")), 3},
		{"a decoy in a Content-Length body", req(cl(decoy), decoy) + req(cl("{}"), "{}"), 0},
		{"a decoy in a chunk", req(te, chunked(decoy, decoy)) + req(te+cl("1"), chunked("{}")), 2},
		{"OPTIONS * gets no handler", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n" + req(te+cl("1"), chunked("{}")), 1},
		{"GET without a body", "GET / HTTP/1.1\r\nHost: h\r\n\r\n" + req(te+cl("1"), chunked("{}")), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for cut := 0; cut <= len(tt.stream); cut++ {
				s := newFramingScanner()
				got := s.feed([]byte(tt.stream[:cut]))
				if k := s.feed([]byte(tt.stream[cut:])); got == 0 {
					got = k
				}
				if got != tt.want {
					t.Fatalf("split at %d: ambiguous request %d, want %d", cut, got, tt.want)
				}
			}
		})
	}
}

// TestListenerCapsConnections: with max_connections 2, a third client is
// not accepted until one of the first two closes, and the open count
// follows.
func TestListenerCapsConnections(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open float64
	openc := make(chan float64, 16)
	ln := newListener(inner, 2, func(d float64) { open += d; openc <- open })
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	first, second := <-accepted, <-accepted
	if got := <-openc; got != 1 {
		t.Fatalf("open %v", got)
	}
	if got := <-openc; got != 2 {
		t.Fatalf("open %v", got)
	}
	// The third is in the kernel's backlog: Accept waits on the cap. It
	// cannot be shown to wait for ever; it is shown to come only after a
	// close, by the order of the open count's changes.
	first.Close()
	if got := <-openc; got != 1 {
		t.Fatalf("after a close: open %v, want 1 before the third is accepted", got)
	}
	third := <-accepted
	if got := <-openc; got != 2 {
		t.Fatalf("open %v", got)
	}
	second.Close()
	third.Close()
	third.Close() // closing twice releases once
	for range 2 {
		<-openc
	}
	if open != 0 {
		t.Fatalf("open %v after every close", open)
	}
	ln.Close()
	select {
	case _, ok := <-accepted:
		if ok {
			t.Fatal("accepted after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}
