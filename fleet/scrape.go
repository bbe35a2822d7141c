package fleet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Gauges are a backend's vLLM gauges, read from its /metrics.
type Gauges struct {
	Running, Waiting, KVUsage float64
	Preemptions               float64 // vllm:num_preemptions_total, a counter
	// Generated is vllm:generation_tokens_total, a counter: that it rises
	// between two scrapes shows the engine producing tokens.
	Generated float64
	// KVCapacity is num_gpu_blocks x block_size from vllm:cache_config_info
	// (0 when not exported).
	KVCapacity int
	// Info holds the labels of vllm:cache_config_info (block_size,
	// num_gpu_blocks, cache_dtype, ...).
	Info map[string]string
	At   time.Time
	// Every is the interval the backend was being scraped at (RunScraper:
	// scrape_interval, or longer past scrape_budget; 0 from Scrape alone):
	// how old the next scrape will find these gauges.
	Every time.Duration
}

// MaxMetricsBytes bounds a /metrics page. vLLM's own is tens of KB; one
// with many adapters or histograms can reach a few MB. A larger page is a
// failed scrape (ScrapeError with Answered set), and reading stops there.
const MaxMetricsBytes = 16 << 20

// ScrapeError is a failed scrape. Answered tells a backend that answered
// with a page that cannot be read (an error status, not vLLM's exposition,
// over MaxMetricsBytes) from one that did not answer in time or at all:
// the first does not go away by waiting, the second may be load.
type ScrapeError struct {
	Answered bool
	Err      error
}

func (e *ScrapeError) Error() string { return e.Err.Error() }
func (e *ScrapeError) Unwrap() error { return e.Err }

// ErrNotReady is passed by RunScraper for a backend it did not scrape
// because it is not ready, so that its state is still sampled.
var ErrNotReady = errors.New("not ready: not scraped")

// Scrape reads b's /metrics once, keeping the series of b's served model.
func (f *Fleet) Scrape(ctx context.Context, b *Backend) (Gauges, error) {
	res, err := f.do(ctx, b, http.MethodGet, "/metrics", nil)
	if err != nil {
		return Gauges{}, &ScrapeError{Err: errors.New("/metrics: " + describeDialError(err))}
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
		return Gauges{}, &ScrapeError{Answered: true, Err: fmt.Errorf("/metrics answered %d", res.StatusCode)}
	}
	return f.parseBody(res.Body, b)
}

// parseBody reads a 200 answer's page of b's gauges, stamped with the
// time it was read.
func (f *Fleet) parseBody(body io.Reader, b *Backend) (Gauges, error) {
	// The line buffer is kept for the next scrape: with hundreds of
	// backends scraped four times a second, a fresh 32 KB each was most
	// of the scraper's garbage.
	br, _ := f.lineBufs.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(nil, maxLine)
	}
	g, err := parseMetricsBuf(br, body, b.Served, MaxMetricsBytes)
	br.Reset(nil)
	f.lineBufs.Put(br)
	if err != nil {
		var se *ScrapeError
		if !errors.As(err, &se) {
			// The body stopped arriving: like no answer.
			err = &ScrapeError{Err: fmt.Errorf("/metrics: %w", err)}
		}
		return Gauges{}, err
	}
	g.At = f.now()
	return g, nil
}

// The families Scrape reads; every other line of the page is skipped after
// a look at its first bytes.
const (
	famRunning     = "vllm:num_requests_running"
	famWaiting     = "vllm:num_requests_waiting"
	famKVUsage     = "vllm:kv_cache_usage_perc"
	famPreemptions = "vllm:num_preemptions_total"
	famCacheInfo   = "vllm:cache_config_info"
	famGenerated   = "vllm:generation_tokens_total"
)

// parseMetrics reads a Prometheus text exposition line by line, keeping
// only the samples of the families above for served (series without a
// model_name label count for every model), and at most limit bytes. It
// allocates only for the labels of cache_config_info: a 13 MB page of
// histograms costs a scan, not a parse. A malformed line of a kept family
// fails the scrape; other lines are not validated. A page without
// vllm:num_requests_running or vllm:num_requests_waiting is not vLLM's.
func parseMetrics(r io.Reader, served string, limit int64) (Gauges, error) {
	return parseMetricsBuf(bufio.NewReaderSize(nil, maxLine), r, served, limit)
}

// maxLine is the longest line parseMetrics reads whole (the size of its
// line buffer).
const maxLine = 32 << 10

// parseMetricsBuf is parseMetrics reading through br (of size maxLine),
// reset onto r.
func parseMetricsBuf(br *bufio.Reader, r io.Reader, served string, limit int64) (Gauges, error) {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	br.Reset(lr)
	var g Gauges
	seen := false
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line over 32 KB: no kept family has one.
			if isKept(line) {
				return Gauges{}, unreadable("line %d of %s is over 32 KB", n, name(line))
			}
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			line = nil
		}
		if lr.N <= 0 {
			return Gauges{}, unreadable("/metrics is over %d MiB", limit>>20)
		}
		if len(line) > 0 {
			if perr := g.addLine(line, served, &seen); perr != nil {
				return Gauges{}, unreadable("/metrics line %d: %v", n, perr)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Gauges{}, err
		}
	}
	if !seen {
		return Gauges{}, unreadable("/metrics has no %s or %s: not vLLM's", famRunning, famWaiting)
	}
	return g, nil
}

func unreadable(format string, args ...any) error {
	return &ScrapeError{Answered: true, Err: fmt.Errorf(format, args...)}
}

var vllmPrefix = []byte("vllm:")

func isKept(line []byte) bool {
	switch string(name(line)) {
	case famRunning, famWaiting, famKVUsage, famPreemptions, famCacheInfo, famGenerated:
		return true
	}
	return false
}

// name is the metric name a sample line starts with. A loop rather than
// bytes.IndexAny, which builds its set of bytes at every call: this runs
// for every vllm: line of every scrape (a tenth of the scraper's CPU at
// 512 backends went to IndexAny).
func name(line []byte) []byte {
	for i, c := range line {
		switch c {
		case '{', ' ', '\t', '\r', '\n':
			return line[:i]
		}
	}
	return line
}

// addLine adds one line of the page to g when it is a sample of a kept
// family.
func (g *Gauges) addLine(line []byte, served string, seen *bool) error {
	if !bytes.HasPrefix(line, vllmPrefix) {
		return nil // comments, blank lines and every other family
	}
	fam := name(line)
	var dst *float64
	switch string(fam) {
	case famRunning:
		dst, *seen = &g.Running, true
	case famWaiting:
		dst, *seen = &g.Waiting, true
	case famKVUsage:
		dst = &g.KVUsage
	case famPreemptions:
		dst = &g.Preemptions
	case famGenerated:
		dst = &g.Generated
	case famCacheInfo:
		if g.Info != nil {
			return nil // the first series, as vLLM exports one
		}
	default:
		return nil
	}
	rest := line[len(fam):]
	model, hasModel := "", false
	var info map[string]string
	if dst == nil {
		info = map[string]string{}
	}
	if len(rest) > 0 && rest[0] == '{' {
		var err error
		rest, err = labels(rest[1:], func(k, v []byte) {
			if string(k) == "model_name" {
				model, hasModel = string(v), true
			}
			if info != nil {
				info[string(k)] = string(v)
			}
		})
		if err != nil {
			return err
		}
	}
	rest = bytes.TrimLeft(rest, " \t")
	end := bytes.IndexAny(rest, " \t\r\n")
	if end < 0 {
		end = len(rest)
	}
	v, err := strconv.ParseFloat(string(rest[:end]), 64)
	if err != nil {
		return fmt.Errorf("%s: value %q is not a number", fam, rest[:end])
	}
	if hasModel && model != served {
		return nil
	}
	if dst != nil {
		*dst += v
		return nil
	}
	g.Info = info
	blocks, _ := strconv.Atoi(info["num_gpu_blocks"])
	size, _ := strconv.Atoi(info["block_size"])
	g.KVCapacity = blocks * size
	return nil
}

// labels reads `name="value",...}` (the text format's escapes \\, \" and
// \n in values), calling fn for each pair, and returns what follows the
// closing brace. fn's arguments are only valid during the call.
func labels(b []byte, fn func(k, v []byte)) ([]byte, error) {
	var buf []byte
	for {
		b = bytes.TrimLeft(b, " \t")
		if len(b) > 0 && b[0] == '}' {
			return b[1:], nil
		}
		eq := bytes.IndexByte(b, '=')
		if eq <= 0 {
			return nil, errors.New("malformed labels")
		}
		k := bytes.TrimRight(b[:eq], " \t")
		b = bytes.TrimLeft(b[eq+1:], " \t")
		if len(b) == 0 || b[0] != '"' {
			return nil, fmt.Errorf("label %s: value is not quoted", k)
		}
		b = b[1:]
		buf = buf[:0]
		i := 0
		for ; i < len(b) && b[i] != '"'; i++ {
			c := b[i]
			if c == '\n' {
				return nil, fmt.Errorf("label %s: unterminated value", k)
			}
			if c == '\\' && i+1 < len(b) {
				i++
				switch b[i] {
				case 'n':
					c = '\n'
				default:
					c = b[i]
				}
			}
			buf = append(buf, c)
		}
		if i == len(b) {
			return nil, fmt.Errorf("label %s: unterminated value", k)
		}
		fn(k, buf)
		b = bytes.TrimLeft(b[i+1:], " \t")
		if len(b) > 0 && b[0] == ',' {
			b = b[1:]
		}
	}
}

// RunScraper scrapes every ready backend every interval (ScrapeEvery:
// longer past scrape_budget) until ctx is done,
// passing each result (or the failure, a *ScrapeError) to fn; a backend
// that is not ready is passed with ErrNotReady instead, so that its state
// is still sampled. Gauges go stale on their own when scrapes fail; fn
// decides what stale means. Every backend's scrape of a round starts at
// the same beat (beat.go), the first within one interval of its start.
func (f *Fleet) RunScraper(ctx context.Context, interval time.Duration, fn func(m *Model, b *Backend, g Gauges, err error)) {
	bt := newBeat()
	var wg sync.WaitGroup
	defer wg.Wait()
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	every := func() time.Duration { return f.ScrapeEvery(interval) }
	wg.Go(func() { bt.run(bctx, every) })
	f.each(ctx, func(ctx context.Context, m *Model, b *Backend) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-bt.next():
			}
			if !b.Ready() {
				fn(m, b, Gauges{}, ErrNotReady)
				continue
			}
			iv := every()
			sctx, cancel := context.WithTimeout(ctx, max(iv, time.Second))
			g, err := f.Scrape(sctx, b)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				g.Every = iv
				b.mu.Lock()
				b.gauges = g
				b.mu.Unlock()
				if idx := m.Index(); idx != nil {
					idx.SetCapacity(b.URL.Host, capacityBlocks(g, idx.BlockSize()))
				}
			}
			fn(m, b, g, err)
		}
	}, nil)
}

// LastGauges returns the last successful scrape.
func (b *Backend) LastGauges() Gauges {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gauges
}
