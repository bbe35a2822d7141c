package gateway

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// listenerHandler is one listener's handler (routes, gateway.go): the
// check of each request's framing, then its route. A route whose pattern
// has no parameter (every model API's) is found in a table of its own
// (static), by one map lookup, before chi is asked: chi's lookup recurses
// a frame of 432 bytes per node of its tree on the handler's goroutine
// (four for /v1/chat/completions), which alone grows the goroutine's
// stack from 4 to 8 KiB before the request is read, a stack a request
// that then waits in a queue would keep while it waits
// (TestWaitingHandlerParksOnSmallStack); and chi gives each request a
// copy with a context of its own (allocations). A request is served from
// the table only where chi would serve it from the same route: the path
// chi matches (the raw path when the URL has one), a method the route was
// registered for. Anything else (a pattern with a parameter, a method not
// allowed, an unknown path) goes to chi, which answers it as before.
type listenerHandler struct {
	static staticRoutes
	mux    *chi.Mux
	// ambiguous answers a request framed two ways (conn.go), before any
	// route sees it.
	ambiguous http.HandlerFunc
}

func newListenerHandler(mux *chi.Mux, ambiguous http.HandlerFunc) *listenerHandler {
	return &listenerHandler{static: newStaticRoutes(mux), mux: mux, ambiguous: ambiguous}
}

// ServeHTTP is a method of the handler itself, not a closure behind
// http.HandlerFunc: one frame fewer under every request.
func (l *listenerHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if fc, ok := req.Context().Value(connKey{}).(*framedConn); ok && fc.nextRequest() {
		l.ambiguous(w, req)
		return
	}
	if h := l.static.route(req); h != nil {
		h(w, req)
		return
	}
	l.mux.ServeHTTP(w, req)
}

// staticRoutes are a router's routes without a parameter, by path.
type staticRoutes map[string][]staticRoute

// staticRoute is one method of a static path and its handler, called
// directly (an http.HandlerFunc, as every route's is, without the frame
// of its ServeHTTP method).
type staticRoute struct {
	method string
	serve  http.HandlerFunc
}

// newStaticRoutes reads r's routes without a parameter, wildcard or
// middleware into a table.
func newStaticRoutes(r chi.Routes) staticRoutes {
	t := staticRoutes{}
	chi.Walk(r, func(method, route string, h http.Handler, mws ...func(http.Handler) http.Handler) error {
		if len(mws) == 0 && !strings.ContainsAny(route, "{*") {
			f, ok := h.(http.HandlerFunc)
			if !ok {
				f = h.ServeHTTP
			}
			t[route] = append(t[route], staticRoute{method: method, serve: f})
		}
		return nil
	})
	return t
}

// route is req's handler when the table has its route, with req's
// Pattern set as chi sets it; nil leaves req to chi. A call of its own:
// the map lookup's frame is gone when the handler runs.
//
//go:noinline
func (t staticRoutes) route(req *http.Request) http.HandlerFunc {
	path := req.URL.RawPath
	if path == "" {
		path = req.URL.Path
	}
	for _, m := range t[path] {
		if m.method == req.Method {
			req.Pattern = path
			return m.serve
		}
	}
	return nil
}
