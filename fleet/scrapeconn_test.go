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

// TestScrapeConnMatchesClient: the scraper's own connection (scrapeConn)
// reads every answer as the fleet's net/http client does (Scrape), the
// reference it replaces for plain-http backends: the same gauges from a
// real simulator's page, a chunked page and one that closes its
// connection, and the same verdict (failed or not, answered or not) for
// an error status, a page that is not vLLM's exposition, and a body cut
// short. Each answer is scraped twice over the kept connection, so that
// what the first left on it shows in the second.
func TestScrapeConnMatchesClient(t *testing.T) {
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
			sc := f.newScrapeConn(b)
			if sc == nil {
				t.Fatal("a plain-http backend got no scrape connection")
			}
			t.Cleanup(sc.close)
			for round := range 2 {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				want, werr := f.Scrape(ctx, b)
				got, gerr := f.scrapeConn(ctx, sc, b, 5*time.Second)
				cancel()
				if (werr != nil) != tc.fail || (gerr != nil) != tc.fail {
					t.Fatalf("round %d: client err %v, conn err %v; want failed=%v", round, werr, gerr, tc.fail)
				}
				if tc.fail {
					var we, ge *ScrapeError
					if !errors.As(werr, &we) || !errors.As(gerr, &ge) || we.Answered != ge.Answered {
						t.Fatalf("round %d: client %#v, conn %#v: want the same ScrapeError kind", round, werr, gerr)
					}
					continue
				}
				want.At, got.At = time.Time{}, time.Time{}
				if fmt.Sprint(want) != fmt.Sprint(got) {
					t.Fatalf("round %d: conn read %+v, client %+v", round, got, want)
				}
			}
		})
	}
}

// scrapeFleet is a fleet of one model with one backend at url, scraped
// through the fleet's transport.
func scrapeFleet(t *testing.T, url string) (*Fleet, *Backend) {
	t.Helper()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: url}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(5 * time.Second)
	t.Cleanup(tr.CloseIdleConnections)
	f, err := New(cfg.Fleet(), &http.Client{Transport: tr}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, f.Models()[0].Backends()[0]
}
