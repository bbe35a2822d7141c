package gateway

import (
	"bufio"
	"io"
	"iter"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/fleet"
)

// proxyHeaderSeeds are header blocks on the edges of RFC 9110's
// connection-specific headers, for both directions.
var proxyHeaderSeeds = []string{
	"",
	"User-Agent: sdk/1\r\nContent-Type: application/json\r\n",
	"Connection: keep-alive, X-Hop\r\nX-Hop: v\r\nKeep-Alive: timeout=5\r\n",
	"Connection: close, Content-Type\r\nContent-Type: application/json\r\n",
	"Connection: ,, x-a ,X-B\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3\r\n",
	"Connection: User-Agent\r\nUser-Agent: sdk/1\r\n",
	"Connection: X-Forwarded-For, X-Request-Id\r\nX-Request-Id: client\r\n",
	"Te: gzip, trailers\r\nTrailer: X-Sum\r\n",
	"te: TRAILERS\r\n",
	"Te: gzip\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic x\r\n",
	"Authorization: Bearer c\r\nCookie: a=b\r\nX-Api-Key: k\r\nApi-Key: k\r\nX-Real-Ip: 6.6.6.6\r\n",
	"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 7.7.7.7\r\nForwarded: for=6.6.6.6\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\n",
	"X-Maitred-Priority: high\r\nTraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n",
	"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
	"Transfer-Encoding: chunked\r\n",
	"Content-Length: 0\r\nExpect: 100-continue\r\n",
	"X-Dup: 1\r\nX-Dup: 2\r\nx-dup: 3\r\n",
}

// setByGateway are the request headers maitred sets itself after dropping
// the client's: a Connection element cannot take them away.
var setByGateway = map[string]bool{"X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true, "X-Request-Id": true}

// discardLog keeps ReverseProxy's error lines out of the fuzzer's output.
var discardLog = log.New(io.Discard, "", 0)

// namedWithParams yields the headers h's Connection names with
// parameters ("X-A;p=1"): RFC 9110 allows none, ReverseProxy then names
// no header, and maitred, stricter, still drops "X-A".
func namedWithParams(h http.Header) iter.Seq[string] {
	return func(yield func(string) bool) {
		for e := range strings.SplitSeq(strings.Join(h["Connection"], ","), ",") {
			if name, _, params := strings.Cut(e, ";"); params && !yield(http.CanonicalHeaderKey(textproto.TrimString(name))) {
				return
			}
		}
	}
}

// sameHeaders fails t unless maitred's headers (ours) are ReverseProxy's
// (theirs), values in order.
func sameHeaders(t *testing.T, what string, ours, theirs http.Header) {
	t.Helper()
	if len(ours) != len(theirs) {
		t.Fatalf("%s:\nmaitred %v\nReverseProxy %v", what, ours, theirs)
	}
	for k, vs := range theirs {
		if !slices.Equal(ours[k], vs) {
			t.Fatalf("%s: %s is %q, ReverseProxy's %q", what, k, ours[k], vs)
		}
	}
}

// roundTripFunc is an http.RoundTripper from a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzUpstreamHeaderMatchesReverseProxy: for any request header block a
// server would hand the gateway, the header a backend gets from maitred
// is the one httputil.ReverseProxy sends (Rewrite with SetURL and
// SetXForwarded: hop-by-hop headers and those Connection names dropped,
// TE: trailers kept, the client's forwarding claims replaced by the one
// hop seen), less what maitred drops on purpose: the client's credentials
// and address claims and Expect (clientOnlyHeaders), its own X-Maitred-
// headers, and a protocol upgrade (maitred never asks for one); and with
// the request id maitred gives each attempt. Where the client's header is
// malformed maitred is the stricter one: a Connection or TE element with
// parameters (RFC 9110 allows none) still names its header.
func FuzzUpstreamHeaderMatchesReverseProxy(f *testing.F) {
	for _, s := range proxyHeaderSeeds {
		f.Add(s)
	}
	target, _ := url.Parse("http://backend:8000")
	f.Fuzz(func(t *testing.T, block string) {
		in, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
			"POST /v1/chat/completions HTTP/1.1\r\nHost: gw.example\r\n" + block + "\r\n")))
		if err != nil {
			t.Skip() // no server would hand this to a handler
		}
		in.RemoteAddr = "10.0.0.7:5555"
		var theirs http.Header
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				theirs = r.Header.Clone()
				return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody}, nil
			}),
			ErrorLog: discardLog,
		}
		rp.ServeHTTP(httptest.NewRecorder(), in)
		if theirs == nil {
			t.Skip() // ReverseProxy refused it (an upgrade it cannot make)
		}
		a := &attempt{backend: &fleet.Backend{URL: target}}
		ours := upstreamHeader(in, a)

		delete(ours, "X-Request-Id")
		delete(theirs, "X-Request-Id")
		for k := range theirs {
			if slices.Contains(clientOnlyHeaders, k) || strings.HasPrefix(k, "X-Maitred-") {
				delete(theirs, k) // maitred's own drops
			}
		}
		if hasToken(in.Header["Connection"], "Upgrade") && in.Header.Get("Upgrade") != "" {
			delete(theirs, "Connection")
			delete(theirs, "Upgrade")
		}
		for k := range namedWithParams(in.Header) {
			if !setByGateway[k] {
				delete(theirs, k) // maitred's stricter reading
			}
		}
		if _, ok := theirs["User-Agent"]; !ok {
			theirs["User-Agent"] = emptyValue
		}
		if hasToken(in.Header["Te"], "trailers") && theirs.Get("Te") == "" {
			theirs["Te"] = teTrailers // "trailers;q=1": maitred's stricter reading
		}
		sameHeaders(t, "request "+strconv.Quote(block), ours, theirs)
	})
}

// FuzzAnswerHeaderMatchesReverseProxy: for any response header block a
// backend could send, the headers maitred relays to the client are those
// httputil.ReverseProxy relays: all but the hop-by-hop ones and those the
// answer's Connection header names (maitred, stricter, also drops one
// named with parameters).
func FuzzAnswerHeaderMatchesReverseProxy(f *testing.F) {
	for _, s := range proxyHeaderSeeds {
		f.Add(s)
	}
	target, _ := url.Parse("http://backend:8000")
	f.Fuzz(func(t *testing.T, block string) {
		res, err := http.ReadResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\n"+block+"\r\n")), nil)
		if err != nil {
			t.Skip() // net/http's transport would refuse it
		}
		res.Body.Close()
		res.Body, res.Trailer = http.NoBody, nil
		in := httptest.NewRequest(http.MethodPost, "http://gw.example/v1/chat/completions", nil)
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
			Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
				r := *res
				r.Header = res.Header.Clone()
				return &r, nil
			}),
			ErrorLog: discardLog,
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, in)
		theirs := rec.Result().Header
		ours := res.Header.Clone()
		dropHopByHop(ours)
		for k := range namedWithParams(res.Header) {
			delete(theirs, k) // maitred's stricter reading
		}
		sameHeaders(t, "answer "+strconv.Quote(block), ours, theirs)
	})
}

// FuzzBackendURLMatchesReverseProxy: the URL a request goes to on a
// backend (its base path joined with the request's, both queries) is the
// one httputil.ProxyRequest.SetURL makes.
func FuzzBackendURLMatchesReverseProxy(f *testing.F) {
	for _, s := range [][2]string{
		{"http://b:8000", "/v1/chat/completions"},
		{"http://b:8000/", "/v1/models?x=1"},
		{"http://b:8000/vllm/", "/v1/models"},
		{"http://b:8000/vllm?k=v", "/v1/models?x=1"},
		{"http://b:8000/a%2Fb", "/v1/responses/r%2F1"},
		{"https://b/x/", "//v1//models"},
		{"http://b:8000/a%20b/", "/c%2fd/?q=%20"},
		{"http://b", "/"},
		{"http://b", "/v1/models?"},
		{"http://0/%2F", "/v1/responss/r%2F1es/r%2F1"}, // a backend path ending in an escaped slash
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, base, path string) {
		b, err := url.Parse(base)
		if err != nil || b.Host == "" || (b.Scheme != "http" && b.Scheme != "https") || b.Fragment != "" || b.User != nil || b.Opaque != "" {
			t.Skip() // config refuses such a backend URL
		}
		in, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + path + " HTTP/1.1\r\nHost: gw\r\n\r\n")))
		if err != nil || in.URL.Host != "" || in.URL.Opaque != "" || !strings.HasPrefix(in.URL.Path, "/") {
			t.Skip() // no server would route this to a model API
		}
		pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
		pr.SetURL(b)
		theirs := pr.Out.URL
		ours := backendURL(b, in.URL)
		if ours.String() != theirs.String() {
			t.Fatalf("backend %q, request %q: %q, ReverseProxy's %q", base, path, ours, theirs)
		}
	})
}
