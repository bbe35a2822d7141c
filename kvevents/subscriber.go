package kvevents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Sink receives what one subscription learns about one backend's cache
// (one data-parallel rank's stream: Rank). Its methods are called from
// the subscriber's goroutine, one at a time.
type Sink interface {
	// Apply: a batch, in sequence.
	Apply(rank int, b Batch)
	// Clear: what the backend holds is unknown (AllBlocksCleared is
	// applied as an event, this is for the subscriber's own reasons: a
	// gap it could not replay, a publisher restart).
	Clear(rank int, reason string)
	// State: the stream is in sequence (live) or not, and why not.
	State(rank int, live bool, reason string)
	// Noted counts a gap, a replay or a decode error.
	Noted(rank int, what Noted)
}

// Noted names a counted condition of a stream.
type Noted uint8

const (
	Gap         Noted = iota // seq skipped a batch
	Replayed                 // a gap was filled from the replay socket
	DecodeError              // a message could not be read
)

// Subscriber follows one vLLM KV-events publisher (one data-parallel
// rank): a SUB socket on Endpoint filtered by Topic, and, when
// ReplayEndpoint is set, a DEALER to its ROUTER to fill gaps. It
// reconnects with exponential backoff (MinBackoff to MaxBackoff) until
// its context ends.
type Subscriber struct {
	Endpoint       string
	ReplayEndpoint string
	Topic          string
	Rank           int
	Sink           Sink
	// MinBackoff and MaxBackoff bound the wait before a reconnection
	// (defaults 100ms and 5s); ReplayTimeout bounds one replay (5s).
	MinBackoff, MaxBackoff, ReplayTimeout time.Duration

	// next is the seq expected next (0 before the first batch).
	next int64
	// seen: a batch was applied since the subscriber started.
	seen bool
}

// Run follows the publisher until ctx ends; it returns when every socket
// it opened is closed.
func (s *Subscriber) Run(ctx context.Context) {
	lo, hi := s.MinBackoff, s.MaxBackoff
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi < lo {
		hi = max(5*time.Second, lo)
	}
	if s.ReplayTimeout <= 0 {
		s.ReplayTimeout = 5 * time.Second
	}
	wait := lo
	for ctx.Err() == nil {
		applied, err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		s.Sink.State(s.Rank, false, err.Error())
		if applied {
			wait = lo // it worked for a while: come back quickly
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, hi)
	}
}

// session connects and reads until the connection fails; applied reports
// whether any batch was applied.
func (s *Subscriber) session(ctx context.Context) (applied bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(5*time.Second))
	defer closeDrained(sub)
	if err := sub.Dial(s.Endpoint); err != nil {
		return false, fmt.Errorf("events endpoint unreachable: %w", err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, s.Topic); err != nil {
		return false, err
	}
	if !s.seen {
		// Nothing was indexed from this publisher yet, so nothing in the
		// index can be stale: an idle backend is usable (holding nothing
		// known) before its first batch. After a reconnection the index
		// may miss what happened meanwhile: it is live again only once a
		// batch showed where the sequence is.
		s.Sink.State(s.Rank, true, "")
	}
	for {
		msg, err := sub.Recv()
		if err != nil {
			return applied, fmt.Errorf("events connection lost: %w", err)
		}
		if len(msg.Frames) != 3 {
			s.garbage(fmt.Sprintf("a message of %d frames, want 3", len(msg.Frames)))
			continue
		}
		seq, err := ParseSeq(msg.Frames[1])
		if err != nil || seq < 0 {
			s.garbage("a bad seq frame")
			continue
		}
		if s.receive(ctx, seq, msg.Frames[2]) {
			applied = true
		}
	}
}

// garbage: a message that cannot be read. The batch it carried is lost, so
// the backend's state is unknown: its index is cleared and routing falls
// back until a batch is read again.
func (s *Subscriber) garbage(why string) {
	s.Sink.Noted(s.Rank, DecodeError)
	s.Sink.Clear(s.Rank, "undecodable event message: "+why)
	s.Sink.State(s.Rank, false, "undecodable event message: "+why)
}

// receive handles batch seq: a publisher restart (seq went back), a gap
// (replayed from the first missing seq when it can be, else the index is
// cleared), then the batch itself. It reports whether it applied it.
func (s *Subscriber) receive(ctx context.Context, seq int64, payload []byte) bool {
	restarted := s.seen && seq < s.next
	if restarted {
		// A new process counts from 0: what the old one held is gone,
		// and the new one's batches before seq are asked for below.
		s.Sink.Clear(s.Rank, fmt.Sprintf("publisher restarted (seq %d after %d)", seq, s.next-1))
		s.next = 0
	}
	if seq > s.next {
		if s.seen && !restarted {
			s.Sink.Noted(s.Rank, Gap)
		}
		if !s.replay(ctx, seq) {
			s.Sink.Clear(s.Rank, fmt.Sprintf("batches %d to %d lost and not replayable", s.next, seq-1))
		}
	}
	b, err := Decode(payload)
	s.next, s.seen = seq+1, true
	if err != nil {
		s.garbage(err.Error())
		return false
	}
	s.Sink.Apply(s.Rank, b)
	s.Sink.State(s.Rank, true, "")
	return true
}

// replay asks the replay socket for the batches from s.next up to (not
// including) until and applies them; false when it could not get all.
func (s *Subscriber) replay(ctx context.Context, until int64) bool {
	if s.ReplayEndpoint == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(s.ReplayTimeout))
	defer closeDrained(d)
	if d.Dial(s.ReplayEndpoint) != nil {
		return false
	}
	if d.Send(zmq4.NewMsgFrom([]byte{}, seqFrame(s.next))) != nil {
		return false
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			return false
		}
		f := msg.Frames
		if len(f) == 3 && len(f[0]) == 0 { // the ROUTER's empty delimiter
			f = f[1:]
		}
		if len(f) != 2 {
			return false
		}
		seq, err := ParseSeq(f[0])
		switch {
		case err != nil || seq == -1: // the end marker, before the gap was filled
			return false
		case seq < s.next:
			continue // already applied
		case seq > s.next:
			return false // the buffer no longer reaches back to the gap
		}
		b, err := Decode(f[1])
		if err != nil {
			s.Sink.Noted(s.Rank, DecodeError)
			return false
		}
		s.Sink.Apply(s.Rank, b)
		if s.next = seq + 1; s.next == until {
			s.Sink.Noted(s.Rank, Replayed)
			return true
		}
	}
}

// closeDrained closes a socket and takes what its connections' readers
// still hold. zmq4 (v0.17.0) reads each connection into a queue of 10
// messages; a reader blocked on a full queue when the socket closes would
// wait for ever. Once closed, Recv picks at random between the closed
// context and a queued message: each message taken lets a blocked reader
// see the close and end, and 64 misses in a row mean none is left (a
// chance of 2^-64 otherwise).
func closeDrained(s zmq4.Socket) {
	s.Close()
	for misses, n := 0, 0; misses < 64 && n < 4096; n++ {
		if _, err := s.Recv(); errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			misses++
		} else {
			misses = 0
		}
	}
}
