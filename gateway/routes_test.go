package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestStaticRoutesMatchChi: the table of routes without a parameter
// (listenerHandler) serves a request exactly when chi would serve it from
// the same route: every route's registered methods and no others, the
// path chi matches (a URL's raw path when it has one, so an escaped
// slash is not the route), no trailing-slash or case variant. What the
// table does not take goes to chi, which answers it as before (404, 405
// with its Allow). Each request is also served through the listener's
// handler: a static route's answer never comes from chi's 404 or 405.
func TestStaticRoutesMatchChi(t *testing.T) {
	tg := startGateway(t, nil, startKeyedSim(t))
	for _, l := range []listenerKind{apiListener, adminListener} {
		mux := tg.router(l)
		static := newStaticRoutes(mux)
		if len(static) == 0 {
			t.Fatalf("listener %d: no static route in the table", l)
		}
		var paths []string
		chi.Walk(mux, func(_, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			paths = append(paths, route)
			return nil
		})
		for _, route := range paths {
			if strings.ContainsAny(route, "{*") {
				if _, ok := static[route]; ok {
					t.Errorf("listener %d: %s has a parameter but is in the table", l, route)
				}
				continue
			}
			targets := []string{route, route + "/", strings.ToUpper(route)}
			if i := strings.LastIndexByte(route, '/'); i > 0 {
				targets = append(targets, route[:i]+"%2F"+route[i+1:])
			}
			for _, target := range targets {
				for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions, "PURGE"} {
					req := httptest.NewRequest(m, target, nil)
					path := req.URL.RawPath
					if path == "" {
						path = req.URL.Path
					}
					chiServes := mux.Match(chi.NewRouteContext(), m, path)
					h := static.route(req)
					if (h != nil) != chiServes {
						t.Errorf("listener %d: %s %s: the table serves it: %v, chi: %v", l, m, target, h != nil, chiServes)
					}
					if h != nil && req.Pattern != route {
						t.Errorf("listener %d: %s %s: Pattern %q, want %q (as chi sets it)", l, m, target, req.Pattern, route)
					}
				}
			}
		}
	}
}
