package prefixindex

import (
	"context"
	"encoding/binary"
	"math"
	"sync"
	"testing"

	"github.com/go-zeromq/zmq4"
)

// testPub is a KV-events publisher as vLLM runs one: a PUB socket sending
// [topic, seq, payload] and a ROUTER answering replay requests
// [id, "", start] with [id, "", seq, payload] per buffered batch and
// [id, "", -1, ""] at the end. Batches are written with mp (msgpack,
// array_like form).
type testPub struct {
	t      *testing.T
	topic  string
	pub    zmq4.Socket
	router zmq4.Socket
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	next int64
	buf  map[int64][]byte
}

func seqBytes(s int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(s))
	return b[:]
}

// startPub listens on pubAddr and replayAddr ("tcp://127.0.0.1:0" for
// free ports).
func startPub(t *testing.T, pubAddr, replayAddr, topic string) *testPub {
	ctx, cancel := context.WithCancel(context.Background())
	p := &testPub{t: t, topic: topic, cancel: cancel, done: make(chan struct{}), buf: map[int64][]byte{},
		pub: zmq4.NewPub(ctx), router: zmq4.NewRouter(ctx)}
	if err := p.pub.Listen(pubAddr); err != nil {
		t.Fatal(err)
	}
	if err := p.router.Listen(replayAddr); err != nil {
		t.Fatal(err)
	}
	go p.serveReplay()
	return p
}

func (p *testPub) endpoints() (string, string) {
	return "tcp://" + p.pub.Addr().String(), "tcp://" + p.router.Addr().String()
}

func (p *testPub) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 {
			continue
		}
		id, start := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[2]))
		p.mu.Lock()
		var seqs []int64
		for s := start; s < p.next; s++ {
			if _, ok := p.buf[s]; ok {
				seqs = append(seqs, s)
			}
		}
		bufs := make([][]byte, len(seqs))
		for i, s := range seqs {
			bufs[i] = p.buf[s]
		}
		p.mu.Unlock()
		// A client gone mid-answer (it stopped reading once it knew
		// the buffer did not reach back far enough) is not an error of
		// the publisher's: a ROUTER drops what it cannot route.
		for i, s := range seqs {
			if p.router.Send(zmq4.NewMsgFrom(id, []byte{}, seqBytes(s), bufs[i])) != nil {
				break
			}
		}
		p.router.Send(zmq4.NewMsgFrom(id, []byte{}, seqBytes(-1), []byte{}))
	}
}

// publish gives payload the next seq, keeps it for replay and sends it
// unless drop.
func (p *testPub) publish(payload []byte, drop bool) int64 {
	p.mu.Lock()
	seq := p.next
	p.next++
	p.buf[seq] = payload
	p.mu.Unlock()
	if !drop {
		if err := p.pub.Send(zmq4.NewMsgFrom([]byte(p.topic), seqBytes(seq), payload)); err != nil {
			p.t.Errorf("publish: %v", err)
		}
	}
	return seq
}

// forget drops seq from the replay buffer (older than it holds).
func (p *testPub) forget(seq int64) {
	p.mu.Lock()
	delete(p.buf, seq)
	p.mu.Unlock()
}

func (p *testPub) close() {
	p.pub.Close()
	p.router.Close()
	p.cancel()
	<-p.done
}

// mp writes msgpack, as vLLM's msgspec does for an array_like batch.
type mp []byte

func (m mp) arr(n int) mp {
	if n < 16 {
		return append(m, 0x90|byte(n))
	}
	return append(m, 0xdc, byte(n>>8), byte(n))
}

func (m mp) str(s string) mp { return append(append(m, 0xa0|byte(len(s))), s...) }

func (m mp) uint(v uint64) mp {
	if v < 128 {
		return append(m, byte(v))
	}
	return append(m, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func (m mp) nil() mp { return append(m, 0xc0) }

func (m mp) float(f float64) mp {
	b := math.Float64bits(f)
	return append(m, 0xcb, byte(b>>56), byte(b>>48), byte(b>>40), byte(b>>32), byte(b>>24), byte(b>>16), byte(b>>8), byte(b))
}

// evStored is BlockStored of hashes (ids: the blocks' tokens), parent 0
// meaning none.
type ev func(mp) mp

func evStored(parent uint64, hashes []uint64, ids []int) ev {
	return func(m mp) mp {
		m = m.arr(7).str("BlockStored").arr(len(hashes))
		for _, h := range hashes {
			m = m.uint(h)
		}
		if parent == 0 {
			m = m.nil()
		} else {
			m = m.uint(parent)
		}
		m = m.arr(len(ids))
		for _, id := range ids {
			m = m.uint(uint64(id))
		}
		return m.uint(bs).nil().nil()
	}
}

func evCleared() ev { return func(m mp) mp { return m.arr(1).str("AllBlocksCleared") } }

func payload(evs ...ev) []byte {
	m := mp{}.arr(3).float(1).arr(len(evs))
	for _, e := range evs {
		m = e(m)
	}
	return m.nil()
}
