// Package gateway is maitred's HTTP edge: the chi router, the handlers, the
// reverse proxy with SSE streaming, and the one place where errors become
// responses.
//
// # Model
//
// Every route is a handlerFunc wrapped by serve, the edge adapter. A handler
// either writes its success itself (the proxy streams the backend's answer
// straight to the client) or returns an error; serve renders a returned
// *Error in OpenAI's envelope, assigns the X-Request-Id, and writes the one
// access-log line and the request metrics. Nothing else in maitred writes an
// HTTP response.
//
// A completion request is read once (within max_body_bytes), parsed with the
// strict ojson reader to learn its model and whether it streams, and its
// original bytes are forwarded unchanged through a single
// httputil.ReverseProxy. The proxy drops hop-by-hop headers both ways, drops
// the client's Authorization and cookies, and sends the backend's own key.
// Backend answers, errors included, pass through byte for byte. A streaming
// answer is wrapped in a streamGuard that passes each complete SSE event on
// at once (the proxy flushes every write) and, if the backend stream ends
// without [DONE], ends the client's stream with one error event and [DONE].
//
// # Concurrency
//
// A Gateway is immutable after New except for its lifecycle phase (atomic)
// and its metrics; each request's state lives in its exchange, owned by the
// request's goroutine and read by the proxy hooks of that same request. A
// client that disconnects cancels the request context, which cancels the
// backend request, so vLLM aborts it and frees its KV cache.
package gateway
