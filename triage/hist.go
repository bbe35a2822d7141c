package triage

import (
	"math/bits"
	"time"
)

// The latency histograms are log-linear: every power of two between
// 2^histMinExp ns (~131 µs) and 2^histMaxExp ns (~275 s) is split into
// histSub equal bins, so a bin is at most 12.5% wide. Values below the range
// fall into bin 0 and values above it into the last bin. Quantiles are
// interpolated inside a bin and clamped to the exact observed min and max,
// so a window where every request took the same time reports that time
// exactly.
const (
	histMinExp  = 17
	histMaxExp  = 38
	histSubBits = 3
	histSub     = 1 << histSubBits
	histBins    = 1 + (histMaxExp-histMinExp)*histSub + 1
)

type hist struct {
	n        uint32
	min, max int64 // ns, valid when n > 0
	c        [histBins]uint32
}

func histIndex(v int64) int {
	if v < 1<<histMinExp {
		return 0
	}
	oct := bits.Len64(uint64(v)) - 1
	if oct >= histMaxExp {
		return histBins - 1
	}
	sub := int(v>>(oct-histSubBits)) & (histSub - 1)
	return 1 + (oct-histMinExp)*histSub + sub
}

// histBounds returns the [lo, hi) range of bin i in ns.
func histBounds(i int) (lo, hi float64) {
	switch {
	case i <= 0:
		return 0, 1 << histMinExp
	case i >= histBins-1:
		return 1 << histMaxExp, 1 << histMaxExp
	}
	oct := histMinExp + (i-1)/histSub
	sub := (i - 1) % histSub
	step := float64(int64(1) << (oct - histSubBits))
	return float64(histSub+sub) * step, float64(histSub+sub+1) * step
}

func (h *hist) add(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if h.n == 0 || v > h.max {
		h.max = v
	}
	h.n++
	h.c[histIndex(v)]++
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.n == 0 || o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	for i := range h.c {
		h.c[i] += o.c[i]
	}
}

// quantile returns the q-quantile (0 < q <= 1) in ns, or 0 when empty.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	target := q * float64(h.n)
	if target < 1 {
		target = 1
	}
	var cum float64
	for i, c := range h.c {
		if c == 0 {
			continue
		}
		fc := float64(c)
		if cum+fc >= target {
			lo, hi := histBounds(i)
			v := lo + (hi-lo)*((target-cum-0.5)/fc)
			if v < lo {
				v = lo
			}
			if v < float64(h.min) {
				v = float64(h.min)
			}
			if v > float64(h.max) {
				v = float64(h.max)
			}
			return v
		}
		cum += fc
	}
	return float64(h.max)
}
