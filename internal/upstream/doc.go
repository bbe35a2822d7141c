// Package upstream is the gateway's HTTP/1.1 client to its backends: a
// connection pool whose request runs on its caller's goroutine, start to
// end. The request is written and its answer's head read by the goroutine
// that calls RoundTrip; the answer's body is read by the goroutine that
// reads it. No goroutine exists per connection: an idle connection is a
// file descriptor in the pool, and an open stream is its handler's
// goroutine parked on its socket, holding a 1 KiB read buffer
// (ReadBufferSize).
//
// Why not net/http's Transport: it hands every request to a write loop and
// its answer from a read loop, two goroutines per connection for as long
// as the connection lives, and keeps a 4 KiB reader and a write buffer
// per connection. At ten thousand open streams on one replica that is
// about 21 KiB per stream of the gateway's memory (docs/performance.md).
// The wire is net/http's own: requests are written by http.Request.Write
// and answers parsed by http.ReadResponse, so framing, header rules,
// trailers and chunked encoding are net/http's code, and
// TestTransportMatchesNetHTTP compares the two transports on the same
// exchanges, byte for byte and error for error.
//
// What it does not carry goes to NetHTTP (a net/http Transport made from
// the same settings): https backends. A request of unknown length is
// written chunked, as net/http would.
//
// The pool: idle connections by host, the most recently used first, at
// most MaxIdleConnsPerHost a host and MaxIdleConns in all (no cap when
// negative), closed after IdleConnTimeout. A connection taken from the
// pool is checked first with one non-blocking peek: a backend that closed
// it while idle (uvicorn closes keep-alive connections after 5 s) is found
// there, not by the request. A request whose reused connection still fails before a single
// byte of an answer came (the backend closed it as the request went out)
// is sent once more on a fresh connection by net/http's rule (resendable):
// when none of it was written and its body can be read again, or when it
// is idempotent and replayable. A POST that was written fails; the
// gateway's retry rule then decides whether another backend may take it.
//
// Cancellation: the request's context, once done, closes its connection,
// which ends a write, a read of the head or a read of the body at once;
// those then fail with the context's cause, as net/http's do. A body read
// to its end puts its connection back in the pool; a body closed before
// its end closes it.
//
// Concurrency: a connection belongs to one request at a time; the pool is
// guarded by the Transport's mutex. A response body is read and closed by
// one goroutine at a time (the relay's).
package upstream
