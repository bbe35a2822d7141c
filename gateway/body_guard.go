package gateway

import (
	"io"
	"time"
)

// bodyGuard wraps a backend's answer that is not an SSE stream (a
// non-streaming completion, or an error body). Its headers have already
// reached the client, so a backend that then holds the body back would
// hold the client for as long as it likes: the guard runs an idle clock
// while it waits on the backend for bytes, and when a read makes no
// progress for idle, onIdle cancels the upstream request. The clock is
// stopped while the proxy writes to the client. Any read failure that was
// not the client's doing is reported to onBreak once, before the proxy
// aborts the client's connection (a body cut short cannot be repaired).
type bodyGuard struct {
	body    io.ReadCloser
	idle    time.Duration
	timer   *time.Timer // nil: no idle bound
	onBreak func(cause error)
	broken  bool
}

func newBodyGuard(body io.ReadCloser, idle time.Duration, onIdle func(), onBreak func(error)) *bodyGuard {
	g := &bodyGuard{body: body, idle: idle, onBreak: onBreak}
	if idle > 0 {
		g.timer = time.AfterFunc(idle, onIdle)
		g.timer.Stop()
	}
	return g
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	if g.timer != nil {
		g.timer.Reset(g.idle)
	}
	n, err := g.body.Read(p)
	if g.timer != nil {
		g.timer.Stop()
	}
	if err != nil && err != io.EOF && !g.broken {
		g.broken = true
		g.onBreak(err)
	}
	return n, err
}

func (g *bodyGuard) Close() error {
	if g.timer != nil {
		g.timer.Stop()
	}
	return g.body.Close()
}
