package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// zmq4 v0.17's PUB socket leaves its writer goroutine parked after
	// Close (nothing closes its queue): one per KV events publisher.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// testEnv is a simulator behind a real httptest server, with its own
// client transport (closed at cleanup, so no goroutine outlives the test).
type testEnv struct {
	t    *testing.T
	sim  *Server
	srv  *httptest.Server
	http *http.Client
}

func newEnv(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	s := New(cfg, nil)
	srv := httptest.NewServer(s.Handler())
	tr := &http.Transport{}
	e := &testEnv{t: t, sim: s, srv: srv, http: &http.Client{Transport: tr}}
	t.Cleanup(func() {
		s.Close() // release anything still blocked in the simulator
		tr.CloseIdleConnections()
		srv.Close()
	})
	return e
}

func (e *testEnv) openai(key string) openai.Client {
	opts := []option.RequestOption{
		option.WithBaseURL(e.srv.URL + "/v1/"),
		option.WithHTTPClient(e.http),
		option.WithMaxRetries(0),
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	} else {
		opts = append(opts, option.WithAPIKey("unused"))
	}
	return openai.NewClient(opts...)
}

// post sends a JSON body and returns status, headers and the full body.
func (e *testEnv) post(path, body string, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	return e.do(context.Background(), http.MethodPost, path, body, hdr...)
}

func (e *testEnv) get(path string, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	return e.do(context.Background(), http.MethodGet, path, "", hdr...)
}

func (e *testEnv) do(ctx context.Context, method, path, body string, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	resp, err := e.send(ctx, method, path, body, hdr...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

func (e *testEnv) send(ctx context.Context, method, path, body string, hdr ...string) (*http.Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.http.Do(req)
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sseReader reads "data: ..." frames of an event stream.
type sseReader struct {
	br *bufio.Reader
}

// next returns the data of the next frame; io.EOF at a clean end.
func (r *sseReader) next() (string, error) {
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return "", errors.New("unexpected SSE line " + line)
		}
		// The blank separator line.
		if sep, err := r.br.ReadString('\n'); err != nil || sep != "\n" {
			return "", errors.Join(errors.New("missing blank line after frame"), err)
		}
		return data, nil
	}
}

// readSSE reads a whole stream: the frames and the error that ended it
// (nil for a clean EOF).
func readSSE(body io.Reader) ([]string, error) {
	r := &sseReader{br: bufio.NewReader(body)}
	var out []string
	for {
		d, err := r.next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decoding %q: %v", s, err)
	}
	return v
}

// scrape fetches /metrics and parses it with expfmt.
func (e *testEnv) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	code, _, body := e.get("/metrics")
	if code != http.StatusOK {
		e.t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		e.t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// metricValue returns the value of the sample of family name whose labels
// include want (gauge, counter or histogram count), and whether it exists.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, lp := range m.Label {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func newBufReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

func histSum(t *testing.T, o prometheus.Observer) float64 {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleSum()
}
