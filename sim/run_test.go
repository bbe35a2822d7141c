package sim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/maitred-dev/maitred/internal/memnet"
)

// bubbleEnv runs a simulator with Run on an in-memory network inside a
// synctest bubble, so time is virtual and exact.
type bubbleEnv struct {
	sim     *Server
	client  *http.Client
	tr      *http.Transport
	cancel  context.CancelFunc
	runErr  chan error
	readyAt chan time.Duration
}

func startBubble(t *testing.T, cfg Config) *bubbleEnv {
	mn := &memnet.Network{}
	s := New(cfg, nil)
	s.listen = func(_, addr string) (net.Listener, error) { return mn.Listen(addr) }
	tr := &http.Transport{DialContext: mn.Dial}
	ctx, cancel := context.WithCancel(context.Background())
	b := &bubbleEnv{sim: s, client: &http.Client{Transport: tr}, tr: tr, cancel: cancel,
		runErr: make(chan error, 1), readyAt: make(chan time.Duration, 1)}
	start := time.Now()
	go func() {
		b.runErr <- s.Run(ctx, "sim:8000", func(net.Addr) { b.readyAt <- time.Since(start) })
	}()
	return b
}

func (b *bubbleEnv) stop(t *testing.T) {
	t.Helper()
	b.tr.CloseIdleConnections()
	b.cancel()
	if err := <-b.runErr; err != nil {
		t.Errorf("Run = %v", err)
	}
	b.tr.CloseIdleConnections()
}

func (b *bubbleEnv) post(t *testing.T, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, "http://sim:8000/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return b.client.Do(req)
}

func TestRunLoadTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, Config{LoadTime: 30 * time.Second})
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if _, err := b.client.Get("http://sim:8000/health"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("during load: err = %v, want connection refused", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case d := <-b.readyAt:
			if d != 30*time.Second {
				t.Errorf("ready after %v, want 30s", d)
			}
		default:
			t.Fatal("ready not called after LoadTime")
		}
		resp, err := b.client.Get("http://sim:8000/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("health = %d", resp.StatusCode)
		}
		b.stop(t)
		if _, err := b.client.Get("http://sim:8000/health"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("after shutdown: err = %v, want connection refused", err)
		}
	})
}

func TestRunCancelledDuringLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, Config{LoadTime: time.Hour})
		time.Sleep(time.Minute)
		b.cancel()
		if err := <-b.runErr; err != nil {
			t.Errorf("Run = %v", err)
		}
		select {
		case <-b.readyAt:
			t.Error("ready called although loading was cancelled")
		default:
		}
	})
}

// TestStreamTimeline checks TTFT and ITL on a virtual clock: every frame's
// arrival time is exact.
func TestStreamTimeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, Config{TTFT: time.Second, ITL: 100 * time.Millisecond, OutputTokens: 3})
		synctest.Wait()
		start := time.Now()
		resp, err := b.post(t, chatStreamBody)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("headers after %v, want at once", d)
		}
		r := &sseReader{br: newBufReader(resp.Body)}
		ms := time.Millisecond
		for i, want := range []time.Duration{1000 * ms, 1000 * ms, 1100 * ms, 1200 * ms, 1200 * ms, 1200 * ms} {
			f, err := r.next()
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if got := time.Since(start); got != want {
				t.Errorf("frame %d (%.40s) at %v, want %v", i, f, got, want)
			}
		}
		resp.Body.Close()
		synctest.Wait() // the handler counts the completion after its last write
		st := b.sim.Stats()
		if st.Completed != 1 {
			t.Errorf("stats = %+v", st)
		}
		b.stop(t)
		// Histograms: TTFT 1 s, two ITL samples of 100 ms.
		h := b.sim.m
		ttft := histSum(t, h.ttft.WithLabelValues("demo", "0"))
		itl := histSum(t, h.itl.WithLabelValues("demo", "0"))
		if ttft != 1 || itl < 0.2-1e-9 || itl > 0.2+1e-9 {
			t.Errorf("ttft sum %v, itl sum %v", ttft, itl)
		}
	})
}

// TestShutdownTimeout: in-flight requests may finish within
// ShutdownTimeout; the rest are aborted with vLLM's in-band error.
func TestShutdownTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, Config{ITL: time.Second, OutputTokens: 10, ShutdownTimeout: 3 * time.Second})
		synctest.Wait()
		resp, err := b.post(t, chatStreamBody)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := &sseReader{br: newBufReader(resp.Body)}
		for range 2 { // role + token 0 at t=0
			if _, err := r.next(); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		b.cancel()
		var frames []string
		for {
			f, err := r.next()
			if err != nil {
				break
			}
			frames = append(frames, f)
		}
		// Tokens 1, 2, 3 at +1 s, +2 s, +3 s? The abort fires at +3 s, when
		// token 3 is due; which wins is unspecified, so accept 2 or 3.
		n := len(frames)
		if n < 4 || frames[n-1] != "[DONE]" || !strings.HasPrefix(frames[n-2], `{"error":{"message":"Internal server error"`) {
			t.Fatalf("frames after cancel = %q", frames)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("aborted after %v, want 3s", d)
		}
		if err := <-b.runErr; err != nil {
			t.Errorf("Run = %v", err)
		}
		b.tr.CloseIdleConnections()
		if st := b.sim.Stats(); st.Failed != 1 || st.Running != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestRunRealNetwork(t *testing.T) {
	s := New(Config{LoadTime: 10 * time.Millisecond, OutputTokens: 1}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-runErr:
		t.Fatalf("Run = %v", err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	resp, err := c.Get("http://" + addr.String() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health = %d", resp.StatusCode)
	}
	tr.CloseIdleConnections()
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := s.Run(context.Background(), "127.0.0.1:0", nil); err == nil {
		t.Error("second Run succeeded")
	}
}
