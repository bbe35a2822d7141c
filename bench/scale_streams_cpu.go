package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// streamsCPUWindow is how long a streams point reads the processes' CPU
// with every stream open (cut short so that no stream ends inside it).
var streamsCPUWindow = flag.Duration("scale-streams-cpu-window", 10*time.Second, "scale: how long a streams point reads the CPU of maitred, the simulator and the clients with every stream open (with -pprof, maitred's CPU profile is taken over the same window); it ends before the first stream does")

// streamsCPU is what a streams point reads the CPU of: the simulator's
// process, maitred's (0: direct) and this one (the clients); with
// pprof set (maitred's profile address), maitred's CPU profile over the
// window is saved to profileOut.
type streamsCPU struct {
	simPID, maitredPID int
	pprof, profileOut  string
	metrics            string // maitred's /metrics URL ("": direct)
}

// cpuWindow is the CPU each process used over a window in which every
// stream was open; perEvent divides it by the events read in it.
type cpuWindow struct {
	from, to             time.Time
	maitred, sim, client time.Duration
	// maitred's Go heap allocations (bytes) and collections over the
	// window, from its /metrics: what the events cost its collector.
	allocBytes, gcCycles float64
	ok                   bool
}

// cpuPerEvent is a point's CPU per relayed event, in µs: maitred's
// (0 direct), the simulator's and the clients'; events is how many the
// clients read in the window.
type cpuPerEvent struct {
	maitred, sim, client float64
	events               int
	// maitred's heap bytes allocated per event, and its collections
	// over the window.
	allocBytes, gcCycles float64
}

func (c cpuPerEvent) total() float64 { return c.maitred + c.sim + c.client }

// measure reads the processes' CPU over the window, starting now and
// ending by last (when the first stream would end, less a margin).
func (s streamsCPU) measure(last time.Time) cpuWindow {
	d := min(*streamsCPUWindow, time.Until(last))
	if d < time.Second {
		fmt.Fprintf(os.Stderr, "  CPU per event not read: the streams end %s after they are all open (raise -scale-streams-tokens)\n", time.Until(last).Round(time.Millisecond))
		return cpuWindow{}
	}
	var profile chan struct{}
	if s.pprof != "" && s.profileOut != "" {
		profile = make(chan struct{})
		go func() {
			defer close(profile)
			s.saveProfile(d)
		}()
	}
	w := cpuWindow{from: time.Now(), ok: true}
	a0, g0 := s.heapStats()
	m0, s0, c0 := s.read()
	time.Sleep(d)
	m1, s1, c1 := s.read()
	a1, g1 := s.heapStats()
	w.to = time.Now()
	w.maitred, w.sim, w.client = m1-m0, s1-s0, c1-c0
	w.allocBytes, w.gcCycles = a1-a0, g1-g0
	if profile != nil {
		<-profile
	}
	return w
}

// read is the CPU maitred, the simulator and this process have used.
func (s streamsCPU) read() (maitred, sim, client time.Duration) {
	if s.maitredPID != 0 {
		maitred, _ = procCPU(s.maitredPID)
	}
	sim, _ = procCPU(s.simPID)
	return maitred, sim, processCPU()
}

// heapStats is maitred's heap bytes allocated so far and its
// collections, from its /metrics (0 direct, or when not read).
func (s streamsCPU) heapStats() (alloc, cycles float64) {
	if s.metrics == "" {
		return 0, 0
	}
	v := make([]float64, 2)
	scrapeMetrics(s.metrics, []string{"go_memstats_alloc_bytes_total", "go_gc_duration_seconds_count"}, v)
	return v[0], v[1]
}

// saveProfile writes maitred's CPU profile over d to profileOut (go
// tool pprof reads it).
func (s streamsCPU) saveProfile(d time.Duration) {
	saveURL("CPU profile", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.pprof, int(d.Seconds())), s.profileOut)
}

// saveURL writes the answer to a GET of url to the file out (its folder
// made), saying which on stderr under what.
func saveURL(what, url, out string) bool {
	fail := func(err error) bool {
		fmt.Fprintf(os.Stderr, "  %s: %v\n", what, err)
		return false
	}
	res, err := http.Get(url)
	if err != nil {
		return fail(err)
	}
	defer res.Body.Close()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fail(err)
	}
	f, err := os.Create(out)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, res.Body); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "  %s: %s\n", what, out)
	return true
}

// perEvent is the window's CPU per event the clients read in it.
func (w cpuWindow) perEvent(reads []streamReads) cpuPerEvent {
	if !w.ok {
		return cpuPerEvent{}
	}
	var c cpuPerEvent
	for _, r := range reads {
		for _, t := range r.recv {
			if !t.Before(w.from) && t.Before(w.to) {
				c.events++
			}
		}
	}
	if c.events == 0 {
		return c
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(c.events) }
	c.maitred, c.sim, c.client = us(w.maitred), us(w.sim), us(w.client)
	c.allocBytes, c.gcCycles = w.allocBytes/float64(c.events), w.gcCycles
	return c
}

func (c cpuPerEvent) String() string {
	s := fmt.Sprintf("%.1f µs: maitred %.1f, simulator %.1f, clients %.1f (%d events)", c.total(), c.maitred, c.sim, c.client, c.events)
	if c.allocBytes > 0 || c.gcCycles > 0 {
		s += fmt.Sprintf("; maitred allocated %.0f B per event, %.0f collections in the window", c.allocBytes, c.gcCycles)
	}
	return s
}
