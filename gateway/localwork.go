package gateway

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maitred-dev/maitred/triage"
)

// Local work is what the gateway computes itself for a request instead of
// a backend: POST /tokenize and /detokenize, the render endpoints and
// Anthropic's count_tokens. It holds no KV and never queues for a
// backend, but it costs this process CPU and memory, so it is bounded
// three ways:
//
//   - per request, by the door's rules: a prompt is counted against
//     max_model_len with counting's early stop and byte bounds before any
//     id list is built (/tokenize refuses a prompt over the context, as
//     vLLM's does), and /detokenize takes at most max_model_len ids;
//   - per key, by the key's request limits (reserveLocal, limits.go);
//   - at once, by localGate: at most one request computing per core
//     (GOMAXPROCS), a few more waiting for a slot with their body read,
//     and 429 queue_full with Retry-After beyond that.
//
// A request the gateway passes on to a backend (a prompt it cannot
// reproduce exactly) gives its slot back before it is forwarded.

// localWaitPerSlot is how many requests may wait per slot.
const localWaitPerSlot = 4

// localGate bounds the local work running at once.
type localGate struct {
	slots   chan struct{}
	waiting atomic.Int64
	maxWait int64
}

func newLocalGate(slots int) *localGate {
	slots = max(slots, 1)
	return &localGate{slots: make(chan struct{}, slots), maxWait: int64(localWaitPerSlot * slots)}
}

// localSlot is a request's hold on the gate; release is idempotent.
type localSlot struct {
	once sync.Once
	g    *localGate
}

func (s *localSlot) release() {
	if s != nil {
		s.once.Do(func() { <-s.g.slots })
	}
}

// localWork takes a slot for x's local work, waiting while every slot is
// taken (until one frees or the client leaves), or refuses with 429 when
// the waiting room is full too. The caller releases the slot when the
// work is done (serve's end at the latest).
func (g *Gateway) localWork(x *exchange) (*localSlot, error) {
	lg := g.local
	select {
	case lg.slots <- struct{}{}:
		return &localSlot{g: lg}, nil
	default:
	}
	if lg.waiting.Add(1) > lg.maxWait {
		lg.waiting.Add(-1)
		return nil, &Error{Status: http.StatusTooManyRequests, Type: typeServer, Code: codeQueueFull, Layer: triage.LayerQueue, RetryAfter: time.Second,
			Message: fmt.Sprintf("The gateway's local work (tokenize, detokenize, render, count_tokens) is at capacity: %d running, %d waiting. Retry after 1 s.",
				cap(lg.slots), lg.maxWait)}
	}
	defer lg.waiting.Add(-1)
	select {
	case lg.slots <- struct{}{}:
		return &localSlot{g: lg}, nil
	case <-x.clientCtx.Done():
		return nil, errClientGone
	}
}
