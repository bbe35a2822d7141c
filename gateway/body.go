package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/triage"
)

// checkContentType refuses what vLLM refuses on every POST route
// (validate_json_request): the media type, lowercased and cut at the first
// ';', must be exactly application/json. A missing header, a +json type
// and "application/json ;..." are refused there with a 400 outside
// OpenAI's envelope, after the request took a queue slot and a round trip;
// the door refuses them first, in the envelope.
func checkContentType(ct string) *Error {
	mt, _, _ := strings.Cut(strings.ToLower(ct), ";")
	if mt == "application/json" {
		return nil
	}
	if ct == "" {
		return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeUnsupportedMedia,
			Outcome: admission.UnsupportedMedia.String(), Layer: triage.LayerDoor,
			Message: "Content-Type must be application/json; the request sent none."}
	}
	return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeUnsupportedMedia,
		Outcome: admission.UnsupportedMedia.String(), Layer: triage.LayerDoor,
		Message: fmt.Sprintf("Content-Type must be application/json, got %q.", ct)}
}

// readJSONBody is every JSON endpoint's first step: the Content-Type
// check, then the body.
func (g *Gateway) readJSONBody(w http.ResponseWriter, r *http.Request, x *exchange) ([]byte, error) {
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	body, err := g.readBody(w, r, x)
	x.bytesIn = len(body)
	return body, err
}

// bodyBudget bounds the request body bytes all requests hold at once
// (max_body_bytes_in_flight). Memory follows bytes received, never a
// declared length: a reader grows its buffer only as bytes arrive.
type bodyBudget struct {
	limit int64 // 0: no cap
	used  atomic.Int64
}

// take reserves n bytes; false when that would pass the cap.
func (b *bodyBudget) take(n int64) bool {
	if b.used.Add(n) > b.limit && b.limit > 0 {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *bodyBudget) give(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}

// bodiesFull answers a body that would pass max_body_bytes_in_flight.
func bodiesFull() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeServerBusy,
		RetryAfter: time.Second, CloseConn: true, Layer: triage.LayerDoor,
		Message: "The gateway holds too many request bodies at once (max_body_bytes_in_flight); retry shortly."}
}

// firstBodyBuffer is the buffer a body starts in: a chat request is
// usually far smaller, and a declared length is a promise, not bytes.
const firstBodyBuffer = 16 << 10

// readBody reads the whole body within max_body_bytes and
// read_body_timeout. The gateway needs the whole JSON before it can
// route, and forwards the same bytes. The buffer grows by doubling as
// bytes arrive (never beyond the declared length + 1), and every growth is
// reserved in the gateway's body budget until the request ends (serve
// gives it back).
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, x *exchange) ([]byte, error) {
	limit := g.conf().MaxBodyBytes
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if d := g.conf().ReadBodyTimeout.D(); d > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) == nil {
			// Cleared once the body is in: a read deadline left behind
			// would cut the server's watch for the client leaving.
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	grow := func(buf []byte, size int64) ([]byte, error) {
		if !g.bodies.take(size - int64(cap(buf))) {
			return nil, bodiesFull()
		}
		x.bodyHeld = size
		nb := make([]byte, len(buf), size)
		copy(nb, buf)
		return nb, nil
	}
	size := int64(firstBodyBuffer)
	if r.ContentLength >= 0 && r.ContentLength < size {
		size = r.ContentLength + 1 // +1: EOF is seen without another growth
	}
	buf, err := grow(nil, size)
	if err != nil {
		return nil, err
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			next := min(2*int64(cap(buf)), limit+1)
			if r.ContentLength >= 0 {
				next = min(next, r.ContentLength+1)
			}
			if next <= int64(cap(buf)) {
				next = int64(cap(buf)) + 1
			}
			if buf, err = grow(buf, next); err != nil {
				return nil, err
			}
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, bodyReadError(r, err, limit, g.conf().ReadBodyTimeout.D())
		}
	}
}

// bodyReadError classifies a failed body read: over the limit (413), too
// slow (408; net/http also cancels the request context then, so this is
// checked first), the client gone, or a malformed body (400).
func bodyReadError(r *http.Request, err error, limit int64, timeout time.Duration) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return tooLarge(limit)
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return &Error{Status: http.StatusRequestTimeout, Type: typeInvalidRequest, Code: codeRequestTimeout, CloseConn: true, Layer: triage.LayerDoor,
			Message: fmt.Sprintf("The request body did not arrive within %s (read_body_timeout).", timeout), Cause: err}
	}
	if r.Context().Err() != nil {
		return errClientGone
	}
	return badRequest(codeBodyRead, "", "The request body could not be read: %v", err)
}

// tooLarge answers a body over the limit. The rest of that body is still
// on the connection, unread: the connection closes after the answer, as
// nginx and Go's MaxBytesReader do, rather than being drained for reuse.
func tooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: codeRequestTooLarge,
		Outcome: admission.TooLarge.String(), Layer: triage.LayerDoor,
		Message: fmt.Sprintf("The request body exceeds the gateway's limit of %d bytes.", limit), CloseConn: true}
}
