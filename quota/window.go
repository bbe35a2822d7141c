package quota

// A window holds amounts that expire: each bucket is the sum of the amounts
// whose expiry, rounded up to the window's granularity, is exp. Buckets are
// kept in order of expiry from head; an amount whose expiry is not after the
// last bucket's is merged into it, which can only move its expiry later
// (never earlier), so a window never forgets anything too soon.
//
// Live buckets have distinct expiries in (now, now+span+gran], so a window
// never holds more than span/gran+1 of them; the slice is compacted only
// when full, so its capacity stays within twice that.
type window struct {
	b    []bucket
	head int
	sum  int64
}

type bucket struct {
	exp int64 // nanoseconds on the store's timeline; live while now < exp
	n   int64
}

// expireAt rounds t+span up to a multiple of gran: the first instant at
// which an amount added at t no longer counts.
func expireAt(t, span, gran int64) int64 {
	e := t + span
	if r := e % gran; r != 0 {
		if r < 0 {
			r += gran
		}
		e += gran - r
	}
	return e
}

// expire drops the buckets whose expiry has come.
func (w *window) expire(now int64) {
	for w.head < len(w.b) && w.b[w.head].exp <= now {
		w.sum -= w.b[w.head].n
		w.head++
	}
	if w.head == len(w.b) {
		w.b = w.b[:0]
		w.head = 0
		w.sum = 0
	}
}

// add counts n until exp.
func (w *window) add(exp, n int64) {
	if n <= 0 {
		return
	}
	w.sum += n
	if last := len(w.b) - 1; last >= w.head && w.b[last].exp >= exp {
		w.b[last].n += n
		return
	}
	if w.head > 0 && len(w.b) == cap(w.b) {
		m := copy(w.b, w.b[w.head:])
		w.b = w.b[:m]
		w.head = 0
	}
	w.b = append(w.b, bucket{exp: exp, n: n})
}

// empty reports whether nothing counts.
func (w *window) empty() bool { return w.head == len(w.b) }

// lastExp is when the window will be empty if nothing is added (now if it
// already is).
func (w *window) lastExp(now int64) int64 {
	if w.empty() {
		return now
	}
	return w.b[len(w.b)-1].exp
}

// freeAt is the first instant at which at least need has expired, and
// false when the window holds less than need.
func (w *window) freeAt(need int64) (int64, bool) {
	if need <= 0 {
		return 0, false
	}
	var acc int64
	for i := w.head; i < len(w.b); i++ {
		acc += w.b[i].n
		if acc >= need {
			return w.b[i].exp, true
		}
	}
	return 0, false
}
