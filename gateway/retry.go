package gateway

import (
	"errors"
	"github.com/maitred-dev/maitred/internal/upstream"
	"io"
	"net"
	"strings"
	"syscall"
)

// The retry rule: a failed attempt may go to another backend only when its
// request never reached a live one (neverSent): no backend can have begun
// work on it, so another may take it without the request running twice.
// Once the request may have reached a backend, the attempt is final.
// classify (attempt.go) applies the rule to a transport failure before any
// response header and names the failure (failConnect, the one retryable
// row of the failure table); queueAndForward asks retryable of each
// attempt's result; exchange.used (proxy_usage.go) applies it to a key's
// quota: a request that never reached a backend used no tokens. The rule
// reads the transports' error values (internal/upstream's for http://
// backends, net/http's for https ones) and, where net/http's are not
// exported, their text.

// retryable is the retry decision: whether the request of an attempt
// that ended with res may go to another backend.
func retryable(res attemptResult) bool {
	return res.fail != nil && res.fail.retryable && res.neverSent
}

// neverSent reports whether the attempt's transport error means its
// request never reached a live backend: refused, written into a connection
// the backend had already closed, sent on a pooled connection the backend
// closed while it was idle (net/http's "server closed idle connection": the
// backend closed it before this request was on it, as a server shutting
// down does; net/http itself retries that only for idempotent requests), or
// sent on a reused idle connection that ended before a single byte of an
// answer came (the same race, seen from the read side: a keep-alive
// connection the backend closed as the request went out).
//
// err is the transport's error, reusedIdle whether the connection was a
// reused idle one (attempt.traceConn).
func neverSent(err error, reusedIdle bool) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && (oe.Op == "dial" || oe.Op == "write" || oe.Op == "readfrom") {
		return true
	}
	if err == nil {
		return false
	}
	msg := err.Error()
	if msg == errServerClosedIdle {
		return true
	}
	return reusedIdle && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || noAnswer(err))
}

// errServerClosedIdle is net/http's text for a pooled connection the
// server closed while idle; errNoAnswerByte starts its text for a
// connection that failed before the answer's first byte (neither error
// value is exported).
const (
	errServerClosedIdle = "http: server closed idle connection"
	errNoAnswerByte     = "net/http: Transport failed to read from server"
)

// noAnswer reports whether err is a connection that failed before the
// answer's first byte: maitred's transport says so with its own error
// (upstream.NoAnswerError), net/http's (https backends) in its text.
func noAnswer(err error) bool {
	var na *upstream.NoAnswerError
	return errors.As(err, &na) || strings.HasPrefix(err.Error(), errNoAnswerByte)
}

// dialReason says in the 502's message why an attempt that never reached
// its backend failed.
func dialReason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF),
		err.Error() == errServerClosedIdle, noAnswer(err):
		return "connection closed by the backend"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "connect timed out"
	}
	return "connect failed"
}
