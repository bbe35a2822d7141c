package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/internal/upstream"
)

// NewTransport returns the transport for the fleet's own requests to the
// backends (probes, scrapes, warm-ups, model lists): maitred's own
// HTTP/1.1 client (internal/upstream) for http:// backends, each request
// written and its answer read on its caller's goroutine, with net/http's
// Transport for https ones (NetHTTP, made from the same settings).
// net/http's client hands every request to a write loop and its answer
// from a read loop: at hundreds of backends probed every second and
// scraped four times a second, those hand-offs were most of the fleet's
// CPU beside the syscalls.
//
// Keep-alive connections are kept idle between rounds, two a backend (its
// prober's and its scraper's, which may be in flight at once), with no cap
// on the total: a cap of 100 (net/http's default) or 1,024 (the gateway's)
// would close some past 50 or 512 backends every round and dial again, a
// TCP handshake each (TestIdleConnsKeptFor600Backends). The idle timeout is
// longer than any probe or scrape interval, so a connection in use every
// round is never closed as idle. Connections read through 16 KiB. No
// transparent compression: the pages are read as they come.
func NewTransport(dialTimeout time.Duration) *upstream.Transport {
	return &upstream.Transport{
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        -1, // no cap: two a backend
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
		// A /metrics page (tens of KB, in 2 KiB chunks) in a few reads.
		ReadBufferSize: 16 << 10,
	}
}

type modelCard struct {
	Created     int64 `json:"created"`
	MaxModelLen int   `json:"max_model_len"`
	// Root and Parent: a LoRA adapter's card names its path and its base
	// model; a base model's parent is null.
	Root   string  `json:"root"`
	Parent *string `json:"parent"`
}

func (f *Fleet) listModels(ctx context.Context, b *Backend) (map[string]modelCard, error) {
	res, err := f.do(ctx, b, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return nil, errors.New(describeDialError(err))
	}
	defer release(res)
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %d", res.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
			modelCard
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("unreadable answer: %v", err)
	}
	out := make(map[string]modelCard, len(list.Data))
	for _, d := range list.Data {
		out[d.ID] = d.modelCard
	}
	return out, nil
}

func (f *Fleet) version(ctx context.Context, b *Backend) (string, error) {
	res, err := f.do(ctx, b, http.MethodGet, "/version", nil)
	if err != nil {
		return "", err
	}
	defer release(res)
	var v struct {
		Version string `json:"version"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, 4096)).Decode(&v) != nil {
		return "", errors.New("no version")
	}
	return v.Version, nil
}

func (f *Fleet) postJSON(ctx context.Context, b *Backend, path string, v any) (int, []byte, error) {
	body, _ := json.Marshal(v)
	res, err := f.do(ctx, b, http.MethodPost, path, body)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, ans, err
}

func (f *Fleet) do(ctx context.Context, b *Backend, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.URL.String()+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Probes say what they are, so that backend logs and tests can tell
	// them from client traffic.
	req.Header.Set("User-Agent", "maitred-probe")
	req.Header.Set(ProbeHeader, strings.TrimPrefix(path, "/"))
	if b.Key != "" {
		req.Header.Set("Authorization", "Bearer "+b.Key)
	}
	return f.client.Do(req)
}

// release reads what is left of res's body (up to 64 KB) and closes it.
// The transport keeps a connection for the next request only when its
// answer was read to the end, and a JSON decoder stops at the end of its
// value: a trailing newline, or a chunked answer's last chunk, left
// unread would cost the next probe a new connection.
func release(res *http.Response) {
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
}

func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
