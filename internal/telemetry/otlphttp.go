package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits and defaults of the OTLP/HTTP exporter, the standard exporter's.
const (
	defaultExportTimeout = 10 * time.Second
	maxRequestBytes      = 64 << 20 // a request larger is not sent
	maxResponseBytes     = 4 << 20  // of a response, read at most this
)

// retryPolicy is how long an export that the collector throttles (429,
// 502, 503, 504) keeps trying: exponential backoff from initial by 1.5
// with ±50% jitter, at most maxDelay between tries, none started after
// maxElapsed; a Retry-After the collector sends is the least wait.
type retryPolicy struct {
	initial, maxDelay, maxElapsed time.Duration
}

var defaultRetry = retryPolicy{initial: 5 * time.Second, maxDelay: 30 * time.Second, maxElapsed: time.Minute}

// httpExporter POSTs each batch to an OTLP/HTTP traces endpoint as a
// protobuf ExportTraceServiceRequest, encoded straight from the traces by
// a spanEncoder into one reused buffer
// (the standard exporter builds the request's messages, then marshals
// them by reflection: most of tracing's CPU cost). It runs on the
// batcher's goroutine, never on a request's.
type httpExporter struct {
	url     string
	client  *http.Client
	headers http.Header // sent with every export; Content-Type included
	gzip    bool
	retry   retryPolicy

	stop    context.Context // cancelled by Shutdown: exports in flight give up
	stopNow context.CancelFunc
	mu      sync.Mutex // one export at a time: the buffers are shared
	enc     *spanEncoder
	zbuf    bytes.Buffer
	zw      *gzip.Writer
	closed  bool
}

// httpSettings are the exporter's settings beyond the endpoint, from the
// environment.
type httpSettings struct {
	headers map[string]string
	timeout time.Duration
	gzip    bool
	tls     *tls.Config // nil: the system's roots, no client certificate
}

// readHTTPSettings reads OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, _TIMEOUT
// (milliseconds), _COMPRESSION (gzip or none), _CERTIFICATE (a PEM file
// of roots), _CLIENT_CERTIFICATE and _CLIENT_KEY (PEM files), the
// per-signal variable winning. A malformed value is an error naming the
// variable.
func readHTTPSettings(getenv func(string) string, readFile func(string) ([]byte, error)) (httpSettings, error) {
	s := httpSettings{timeout: defaultExportTimeout}
	get := func(name string) (string, string) {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + name, "OTEL_EXPORTER_OTLP_" + name} {
			if v := strings.TrimSpace(getenv(k)); v != "" {
				return k, v
			}
		}
		return "", ""
	}
	// Headers: both variables apply, the per-signal one's keys winning.
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			continue
		}
		for _, pair := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(pair, "=")
			name = strings.TrimSpace(name)
			if !ok || !validHeaderName(name) {
				return s, fmt.Errorf("%s: want name=value pairs separated by commas, got %q", k, pair)
			}
			val, err := url.PathUnescape(val)
			if err != nil {
				return s, fmt.Errorf("%s: header %s: %w", k, name, err)
			}
			if s.headers == nil {
				s.headers = map[string]string{}
			}
			s.headers[name] = strings.TrimSpace(val)
		}
	}
	if k, v := get("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return s, fmt.Errorf("%s: want milliseconds, got %q", k, v)
		}
		s.timeout = time.Duration(ms) * time.Millisecond
	}
	if k, v := get("COMPRESSION"); v != "" {
		switch v {
		case "gzip":
			s.gzip = true
		case "none":
		default:
			return s, fmt.Errorf("%s: want gzip or none, got %q", k, v)
		}
	}
	var t tls.Config
	if k, v := get("CERTIFICATE"); v != "" {
		pem, err := readFile(v)
		if err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return s, fmt.Errorf("%s: no PEM certificate in %s", k, v)
		}
	}
	for _, pre := range []string{"OTEL_EXPORTER_OTLP_TRACES_", "OTEL_EXPORTER_OTLP_"} {
		certFile, keyFile := strings.TrimSpace(getenv(pre+"CLIENT_CERTIFICATE")), strings.TrimSpace(getenv(pre+"CLIENT_KEY"))
		if certFile == "" || keyFile == "" {
			continue
		}
		certPEM, err := readFile(certFile)
		if err != nil {
			return s, fmt.Errorf("%sCLIENT_CERTIFICATE: %w", pre, err)
		}
		keyPEM, err := readFile(keyFile)
		if err != nil {
			return s, fmt.Errorf("%sCLIENT_KEY: %w", pre, err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return s, fmt.Errorf("%sCLIENT_CERTIFICATE: %w", pre, err)
		}
		t.Certificates = []tls.Certificate{c}
		break
	}
	if t.RootCAs != nil || t.Certificates != nil {
		s.tls = &t
	}
	return s, nil
}

// validHeaderName is an HTTP token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// newHTTPExporter is an exporter to endpoint (the traces URL; http://
// means no TLS, and then no TLS settings are allowed).
func newHTTPExporter(endpoint string, s httpSettings, userAgent string, enc *spanEncoder) (*httpExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" && s.tls != nil {
		return nil, fmt.Errorf("%s: an http:// endpoint takes no TLS certificate settings", endpoint)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone() // proxy from the environment, as the standard exporter
	if s.tls != nil {
		tr.TLSClientConfig = s.tls
	}
	h := http.Header{}
	for k, v := range s.headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", userAgent)
	}
	if s.gzip {
		h.Set("Content-Encoding", "gzip")
	}
	stop, stopNow := context.WithCancel(context.Background())
	return &httpExporter{
		url:     endpoint,
		client:  &http.Client{Transport: tr, Timeout: s.timeout},
		headers: h,
		gzip:    s.gzip,
		retry:   defaultRetry,
		stop:    stop,
		stopNow: stopNow,
		enc:     enc,
	}, nil
}

// export sends the traces' spans in one request, retrying while the
// collector throttles, until ctx ends or the exporter shuts down. A
// partial success the collector answers is not read: the spans it
// rejected are not sent again either way.
func (x *httpExporter) export(ctx context.Context, traces []*Trace) error {
	if len(traces) == 0 {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return errors.New("otlp exporter: shut down")
	}
	body := x.enc.encode(traces)
	if len(body) > maxRequestBytes {
		return fmt.Errorf("otlp exporter: request of %d bytes is over the %d limit: %d traces dropped", len(body), maxRequestBytes, len(traces))
	}
	if x.gzip {
		x.zbuf.Reset()
		if x.zw == nil {
			x.zw = gzip.NewWriter(&x.zbuf)
		} else {
			x.zw.Reset(&x.zbuf)
		}
		if _, err := x.zw.Write(body); err != nil {
			return err
		}
		if err := x.zw.Close(); err != nil {
			return err
		}
		body = x.zbuf.Bytes()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(x.stop, cancel)()

	start := time.Now()
	backoff := x.retry.initial
	for {
		throttle, err := x.post(ctx, body)
		if err == nil || throttle < 0 {
			return err
		}
		wait := backoff/2 + rand.N(backoff+1) // ±50%
		backoff = min(backoff*3/2, x.retry.maxDelay)
		wait = min(wait, x.retry.maxDelay)
		wait = max(wait, throttle)
		if time.Since(start)+wait > x.retry.maxElapsed {
			return fmt.Errorf("otlp exporter: gave up retrying: %w", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("otlp exporter: %w: %w", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// post sends one request. A failure worth retrying has throttle >= 0
// (what Retry-After asks, or 0); any other, -1.
func (x *httpExporter) post(ctx context.Context, body []byte) (throttle time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(body))
	if err != nil {
		return -1, err
	}
	for k, v := range x.headers {
		req.Header[k] = v
	}
	res, err := x.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && ue.Temporary() && ctx.Err() == nil {
			return 0, err
		}
		return -1, err
	}
	defer res.Body.Close()
	if res.StatusCode >= 200 && res.StatusCode <= 299 {
		io.Copy(io.Discard, io.LimitReader(res.Body, maxResponseBytes))
		return 0, nil
	}
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
	err = fmt.Errorf("otlp exporter: %s: %s: %s", x.url, res.Status, bytes.TrimSpace(msg))
	switch res.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retryAfter(res.Header.Get("Retry-After"), time.Now()), err
	}
	return -1, err
}

// retryAfter is the wait a Retry-After header asks (seconds, or an HTTP
// date), 0 when it asks none.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0
		}
		if s > int64(time.Hour*24/time.Second) {
			s = int64(time.Hour * 24 / time.Second) // past any retry budget: give up
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// shutdown stops exporting: an export in flight gives up, later ones
// fail.
func (x *httpExporter) shutdown(ctx context.Context) error {
	x.stopNow()
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	x.client.CloseIdleConnections()
	return ctx.Err()
}
