package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
)

// fixedCounter counts every probe as n tokens, exactly.
type fixedCounter int

func (c fixedCounter) CountBody(bool, []byte) (int, bool) { return int(c), true }

// tokBackend is a vLLM stand-in whose /tokenize count is settable and that
// counts the warm-up generations it receives.
type tokBackend struct {
	*httptest.Server
	count   atomic.Int64 // what /tokenize answers
	health  atomic.Int64
	warmups atomic.Int64
	probes  atomic.Int64 // /tokenize requests
}

func newTokBackend(t *testing.T, count int) *tokBackend {
	tb := &tokBackend{}
	tb.count.Store(int64(count))
	tb.health.Store(200)
	tb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(int(tb.health.Load()))
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","created":1,"max_model_len":2048}]}`)
		case "/v1/completions":
			tb.warmups.Add(1)
			io.WriteString(w, `{"choices":[{"text":"x"}]}`)
		case "/tokenize":
			tb.probes.Add(1)
			fmt.Fprintf(w, `{"count":%d,"max_model_len":2048,"tokens":[]}`, tb.count.Load())
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(tb.Close)
	return tb
}

// fakeClock is the fleet's injected clock; probes advance it by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func tokFleet(t *testing.T, url, check string) (*Fleet, *Backend, *fakeClock) {
	t.Helper()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", TokenizerCheck: check, Backends: []config.BackendConfig{{URL: url}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	f, err := New(cfg.Fleet(), &http.Client{Transport: tr}, nil, map[string]PromptCounter{"m": fixedCounter(5)})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.now = clock.Now
	return f, f.models[0].Backends()[0], clock
}

// TestWarmupBacksOff: a backend whose tokenizer disagrees used to be warmed
// up again at every probe, one generation a second for ever. Over ten
// minutes of probes (an injected clock, one probe per interval, each a real
// HTTP round) the retries now back off up to warmup_backoff_max; fixing the
// backend makes it ready at the next retry, and a restart resets the
// backoff.
func TestWarmupBacksOff(t *testing.T) {
	tb := newTokBackend(t, 7)
	f, b, clock := tokFleet(t, tb.URL, "")
	ctx := context.Background()
	tick := func(n int) {
		for range n {
			f.ProbeAll(ctx)
			clock.Add(f.health.Interval.D())
		}
	}
	tick(600) // ten minutes at the default 1s interval
	st := b.Status()
	if st.State != Warming || !strings.HasPrefix(st.Reason, ReasonTokenizer) {
		t.Fatalf("state %s %q", st.State, st.Reason)
	}
	// 1+2+4+...+64 s, then every 120 s: 11 attempts in 600 s.
	if n := tb.warmups.Load(); n > 12 || n < 8 {
		t.Errorf("%d warm-up generations in ten minutes of probes, want about 11 (backoff up to 2m)", n)
	}
	if st.Mismatch == nil || st.Mismatch.Gateway != 5 || st.Mismatch.Backend != 7 || st.NextWarmup == nil || st.WarmupFailures < 8 {
		t.Errorf("status %+v", st)
	}
	before := tb.warmups.Load()
	tb.count.Store(5) // the operator fixed the backend's tokenizer
	tick(121)
	if st := b.Status(); st.State != Ready || st.Mismatch != nil || st.WarmupFailures != 0 {
		t.Fatalf("after the fix, within one backoff cap: %+v", st)
	}
	if tb.warmups.Load() != before+1 {
		t.Errorf("%d warm-ups to recover, want 1", tb.warmups.Load()-before)
	}
	tick(60)
	if tb.warmups.Load() != before+1 {
		t.Error("a ready backend is warmed up again")
	}

	// Broken again after a restart: the backoff starts over.
	tb.count.Store(7)
	tb.health.Store(503)
	tick(3) // unhealthy
	tb.health.Store(200)
	before = tb.warmups.Load()
	tick(1)
	if st := b.Status(); st.State != Warming || tb.warmups.Load() != before+1 || st.WarmupFailures != 1 {
		t.Errorf("after a restart: %+v, %d warm-ups", st, tb.warmups.Load()-before)
	}
}

func TestWarmupBackoffSchedule(t *testing.T) {
	f := &Fleet{health: config.HealthConfig{Interval: config.Duration(time.Second), WarmupBackoffMax: config.Duration(2 * time.Minute)}}
	var got []time.Duration
	for n := 1; n <= 10; n++ {
		got = append(got, f.warmupBackoff(n))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 120, 120, 120}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff %v", got)
		}
	}
}

// TestTokenizerCheckModes: warn makes a mismatching backend ready and
// records the mismatch as accepted; off sends no /tokenize probe at all.
func TestTokenizerCheckModes(t *testing.T) {
	for _, check := range []string{config.TokenizerWarn, config.TokenizerOff} {
		t.Run(check, func(t *testing.T) {
			tb := newTokBackend(t, 7)
			f, b, _ := tokFleet(t, tb.URL, check)
			f.ProbeAll(context.Background())
			st := b.Status()
			if st.State != Ready {
				t.Fatalf("state %s %q", st.State, st.Reason)
			}
			switch check {
			case config.TokenizerWarn:
				if mm := st.Mismatch; mm == nil || !mm.Accepted || mm.Check != CheckTokenizer || mm.Gateway != 5 || mm.Backend != 7 {
					t.Errorf("mismatch %+v", st.Mismatch)
				}
			case config.TokenizerOff:
				if st.Mismatch != nil || tb.probes.Load() != 0 {
					t.Errorf("mismatch %+v, %d /tokenize probes", st.Mismatch, tb.probes.Load())
				}
			}
		})
	}
}
