package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

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
	defer res.Body.Close()
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
	defer res.Body.Close()
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

func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
