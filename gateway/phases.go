package gateway

import (
	"strconv"
	"time"

	"go.uber.org/zap/zapcore"
)

// phases partition a request's time, so that they add up to its total:
//
//	read     arrival -> body read
//	door     parse, validate, render, count
//	queue    waiting for a backend slot (and failed connection attempts)
//	connect  request sent -> response headers (non-streaming: the whole generation)
//	prefill  headers -> first event (streams: vLLM's queue + prefill)
//	decode   first event -> last event
//	tail     the rest: writing a non-streaming body, or an error answer
//
// A phase a request never reached is zero.
type phases struct {
	read, door, queue, connect, prefill, decode, tail time.Duration
}

var phaseNames = []string{"read", "door", "queue", "connect", "prefill", "decode", "tail"}

func (p phases) list() []time.Duration {
	return []time.Duration{p.read, p.door, p.queue, p.connect, p.prefill, p.decode, p.tail}
}

// MarshalLogObject writes the phases in milliseconds into the access log.
func (p phases) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	for i, d := range p.list() {
		if d > 0 {
			enc.AddFloat64(phaseNames[i]+"_ms", float64(d.Microseconds())/1000)
		}
	}
	return nil
}

// phases cuts [start, end] at each stamp the request reached: its own
// (read, door) and its last attempt's (sent, headers, first and last
// event); the queue phase thus holds the earlier attempts too.
func (x *exchange) phases(end time.Time) phases {
	stamps := [6]time.Time{x.readDone, x.doorDone}
	if a := x.att; a != nil {
		stamps[2], stamps[3], stamps[4], stamps[5] = a.sentAt, a.headersAt, a.firstEventAt, a.lastEventAt
	}
	var out [7]time.Duration
	prev := x.start
	for i, t := range stamps {
		if t.IsZero() || t.Before(prev) {
			continue
		}
		out[i] = t.Sub(prev)
		prev = t
	}
	out[6] = end.Sub(prev)
	return phases{out[0], out[1], out[2], out[3], out[4], out[5], out[6]}
}

// serverTimingValue is the Server-Timing value of attempt a's response,
// whose headers just came: door, queue and backend durations in
// milliseconds.
func serverTimingValue(x *exchange, a *attempt) string {
	b := make([]byte, 0, 64)
	b = append(b, "door;dur="...)
	b = strconv.AppendFloat(b, ms(x.doorDone.Sub(x.readDone)), 'f', 3, 64)
	b = append(b, ", queue;dur="...)
	b = strconv.AppendFloat(b, ms(a.sentAt.Sub(x.doorDone)), 'f', 3, 64)
	b = append(b, ", backend;dur="...)
	b = strconv.AppendFloat(b, ms(a.headersAt.Sub(a.sentAt)), 'f', 3, 64)
	return string(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
