package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// scrapeConn is one backend's /metrics connection, owned by its scraper
// goroutine (RunScraper): the request written straight to the kept
// connection and the answer read on the same goroutine, under the
// connection's deadline. net/http's client hands every request to a write
// loop and its answer from a read loop (three goroutines a request), with
// a context timer and the transport's pool around it: at hundreds of
// backends, that was most of a scrape's CPU beside the syscalls. Plain
// http:// backends only, with a transport that dials directly; others are
// scraped through the fleet's client (Scrape).
type scrapeConn struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	addr string // host:port (port 80 when the URL names none)
	conn net.Conn
	br   *bufio.Reader
	req  []byte // the whole request, built once
	// stop unregisters the close of conn when the scraper's context ends.
	stop func() bool
}

// newScrapeConn returns b's scrape connection, or nil when b is scraped
// through the fleet's client (an https backend, a proxy, a transport not
// net/http's).
func (f *Fleet) newScrapeConn(b *Backend) *scrapeConn {
	tr, ok := f.client.Transport.(*http.Transport)
	if !ok || tr.Proxy != nil || b.URL.Scheme != "http" || f.client.Timeout != 0 {
		return nil
	}
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s/metrics HTTP/1.1\r\nHost: %s\r\nUser-Agent: maitred-probe\r\n%s: metrics\r\n", strings.TrimSuffix(b.URL.EscapedPath(), "/"), b.URL.Host, ProbeHeader)
	if b.Key != "" {
		fmt.Fprintf(&req, "Authorization: Bearer %s\r\n", b.Key)
	}
	req.WriteString("\r\n")
	addr := b.URL.Host
	if b.URL.Port() == "" {
		addr = net.JoinHostPort(b.URL.Hostname(), "80")
	}
	return &scrapeConn{dial: dial, addr: addr, req: []byte(req.String())}
}

// close drops the connection (the next scrape dials again).
func (c *scrapeConn) close() {
	if c.conn != nil {
		c.stop()
		c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// scrape reads b's /metrics once over c, within timeout; what Scrape
// does, without net/http's client. A kept connection the backend closed
// while idle fails before any answer: the request is sent again once on a
// new one, as net/http does.
func (f *Fleet) scrapeConn(ctx context.Context, c *scrapeConn, b *Backend, timeout time.Duration) (Gauges, error) {
	deadline := time.Now().Add(timeout)
	for attempt := 0; ; attempt++ {
		reused := c.conn != nil
		if !reused {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			conn, err := c.dial(dctx, "tcp", c.addr)
			cancel()
			if err != nil {
				return Gauges{}, &ScrapeError{Err: errors.New("/metrics: " + describeDialError(err))}
			}
			c.conn, c.br = conn, bufio.NewReaderSize(conn, 16<<10)
			c.stop = context.AfterFunc(ctx, func() { conn.Close() })
		}
		c.conn.SetDeadline(deadline)
		g, err, retry := f.scrapeOnce(c, b)
		if err == nil {
			return g, nil
		}
		c.close()
		if !(retry && reused && attempt == 0) || ctx.Err() != nil {
			return Gauges{}, err
		}
	}
}

// scrapeOnce sends the request on c's connection and reads the answer.
// retry: the connection failed before any byte of an answer came. On an
// error the caller closes the connection; on success it is kept, unless
// the answer said otherwise (then it is closed here).
func (f *Fleet) scrapeOnce(c *scrapeConn, b *Backend) (g Gauges, err error, retry bool) {
	if _, err := c.conn.Write(c.req); err != nil {
		return Gauges{}, &ScrapeError{Err: errors.New("/metrics: " + describeDialError(err))}, true
	}
	if _, err := c.br.Peek(1); err != nil {
		// Closed by the backend while idle (EOF, reset): worth one more
		// try on a new connection; no answer in time is not.
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout()
		return Gauges{}, &ScrapeError{Err: errors.New("/metrics: " + describeDialError(err))}, !timeout
	}
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return Gauges{}, &ScrapeError{Err: errors.New("/metrics: " + describeDialError(err))}, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		// The connection is closed with it: the answer's body is not
		// worth reading to keep it.
		return Gauges{}, &ScrapeError{Answered: true, Err: fmt.Errorf("/metrics answered %d", res.StatusCode)}, false
	}
	g, err = f.parseBody(res.Body, b)
	if err != nil {
		return Gauges{}, err, false
	}
	// Read to the end (a chunked answer's last chunk), so that the next
	// request finds the connection at an answer's start.
	if _, err := io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)); err != nil || !bodyDone(res.Body) {
		return Gauges{}, &ScrapeError{Err: errors.New("/metrics: the answer did not end")}, false
	}
	if res.Close {
		c.close()
	}
	return g, nil, false
}

// bodyDone reports whether body has nothing left to read.
func bodyDone(body io.Reader) bool {
	var one [1]byte
	n, err := body.Read(one[:])
	return n == 0 && errors.Is(err, io.EOF)
}
