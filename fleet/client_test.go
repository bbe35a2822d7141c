package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestScrapeMatchesNetHTTP: a scrape through the fleet's transport
// (internal/upstream for plain-http backends) reads every answer as one
// through net/http's Transport does, the reference it replaces: the same
// gauges from a real simulator's page, a chunked page and one that closes
// its connection, and the same verdict (failed or not, answered or not)
// for an error status, a page that is not vLLM's exposition, and a body
// cut short. Each answer is scraped twice over the kept connection, so
// that what the first left on it shows in the second.
func TestScrapeMatchesNetHTTP(t *testing.T) {
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 2048, OutputTokens: 2}, zap.NewNop())
	t.Cleanup(s.Close)
	page := func() string {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}()
	if !strings.Contains(page, "vllm:num_requests_running") {
		t.Fatalf("the simulator's page has no vLLM gauges:\n%.300s", page)
	}
	cases := []struct {
		name    string
		handler http.Handler
		fail    bool
	}{
		{"simulator", s.Handler(), false},
		{"chunked", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			half := len(page) / 2
			w.Write([]byte(page[:half]))
			w.(http.Flusher).Flush()
			w.Write([]byte(page[half:]))
		}), false},
		{"connection close", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			w.Write([]byte(page))
		}), false},
		{"error status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "engine dead", http.StatusServiceUnavailable)
		}), true},
		{"not an exposition", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("vllm:num_requests_running{model_name=\"m\" 3\n"))
		}), true},
		{"body cut short", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(page)+100))
			w.Write([]byte(page))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			f, b := scrapeFleet(t, srv.URL)
			ref := NewTransport(5 * time.Second).NetHTTP()
			t.Cleanup(ref.CloseIdleConnections)
			fr, br := scrapeFleetOver(t, srv.URL, ref)
			for round := range 2 {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				want, werr := fr.Scrape(ctx, br)
				got, gerr := f.Scrape(ctx, b)
				cancel()
				if (werr != nil) != tc.fail || (gerr != nil) != tc.fail {
					t.Fatalf("round %d: net/http err %v, fleet err %v; want failed=%v", round, werr, gerr, tc.fail)
				}
				if tc.fail {
					var we, ge *ScrapeError
					if !errors.As(werr, &we) || !errors.As(gerr, &ge) || we.Answered != ge.Answered {
						t.Fatalf("round %d: net/http %#v, fleet %#v: want the same ScrapeError kind", round, werr, gerr)
					}
					continue
				}
				want.At, got.At = time.Time{}, time.Time{}
				if fmt.Sprint(want) != fmt.Sprint(got) {
					t.Fatalf("round %d: the fleet read %+v, net/http %+v", round, got, want)
				}
			}
		})
	}
}

// scrapeFleet is a fleet of one model with one backend at url, scraped
// through the fleet's transport.
func scrapeFleet(t *testing.T, url string) (*Fleet, *Backend) {
	t.Helper()
	tr := NewTransport(5 * time.Second)
	t.Cleanup(tr.CloseIdleConnections)
	return scrapeFleetOver(t, url, tr)
}

// scrapeFleetOver is scrapeFleet through rt.
func scrapeFleetOver(t *testing.T, url string, rt http.RoundTripper) (*Fleet, *Backend) {
	t.Helper()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: url}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg.Fleet(), &http.Client{Transport: rt}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, f.Models()[0].Backends()[0]
}
