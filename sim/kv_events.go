package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/zap"
)

// Defaults of KVEventsConfig (vLLM's).
const (
	DefaultKVEventsEndpoint = "tcp://*:5557"
	defaultKVBufferSteps    = 10000
	defaultKVHWM            = 100000
)

// kvEndSeq is the replay end marker's sequence frame: -1 as 8 signed
// big-endian bytes.
var kvEndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// kvBatch is one published batch, kept for replay.
type kvBatch struct {
	seq     uint64
	payload []byte
}

// kvPublisher is vLLM's ZmqEventPublisher: batches numbered from 0 are
// sent as [topic, seq (8 bytes big-endian), payload] on a PUB socket and
// kept (the last BufferSteps) for a ROUTER socket that replays them.
// Batches published before Start are numbered and buffered but not sent.
// publish is called with Server.mu held, so batches go out in the order the
// cache changed.
type kvPublisher struct {
	cfg   KVEventsConfig
	enc   kvEncoder
	clock func() time.Time
	log   *zap.Logger

	mu      sync.Mutex
	next    uint64
	ring    []kvBatch // oldest at ring[head] once full
	head    int
	pub     zmq4.Socket
	router  zmq4.Socket
	pubEP   string
	replEP  string
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{} // the replay loop has returned
}

func newKVPublisher(cfg KVEventsConfig, clock func() time.Time, log *zap.Logger) (*kvPublisher, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultKVEventsEndpoint
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = defaultKVBufferSteps
	}
	if cfg.HWM <= 0 {
		cfg.HWM = defaultKVHWM
	}
	var enc kvEncoder
	switch cfg.Encoding {
	case "", "map":
	case "array":
		enc.array = true
	default:
		return nil, fmt.Errorf("kv_events.encoding: want map or array, got %q", cfg.Encoding)
	}
	switch cfg.Hash {
	case "", "bytes":
	case "int":
		enc.intHash = true
	default:
		return nil, fmt.Errorf("kv_events.hash: want bytes or int, got %q", cfg.Hash)
	}
	if cfg.DataParallelRank < 0 {
		return nil, fmt.Errorf("kv_events.data_parallel_rank: must be >= 0, got %d", cfg.DataParallelRank)
	}
	var err error
	if cfg.Endpoint, err = offsetEndpoint(cfg.Endpoint, cfg.DataParallelRank); err != nil {
		return nil, err
	}
	if cfg.ReplayEndpoint, err = offsetEndpoint(cfg.ReplayEndpoint, cfg.DataParallelRank); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = time.Now
	}
	return &kvPublisher{cfg: cfg, enc: enc, clock: clock, log: log}, nil
}

// offsetEndpoint adds a data-parallel rank to an endpoint as vLLM does: the
// port + rank for tcp, "_dp<rank>" appended for inproc.
func offsetEndpoint(ep string, rank int) (string, error) {
	if ep == "" || rank == 0 {
		return ep, nil
	}
	if strings.Contains(ep, "inproc") {
		return ep + "_dp" + strconv.Itoa(rank), nil
	}
	if !strings.Contains(ep, "tcp") {
		return "", fmt.Errorf("kv_events: endpoint %q: a data-parallel rank needs tcp or inproc", ep)
	}
	i := strings.LastIndexByte(ep, ':')
	port, err := strconv.Atoi(ep[i+1:])
	if i < 0 || err != nil {
		return "", fmt.Errorf("kv_events: endpoint %q has no port", ep)
	}
	if port == 0 {
		return ep, nil
	}
	return ep[:i+1] + strconv.Itoa(port+rank), nil
}

// bindsPub is vLLM's heuristic: bind when the endpoint has a wildcard or is
// local, connect otherwise.
func bindsPub(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") ||
		strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}

// start opens the sockets (once).
func (p *kvPublisher) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("sim: kv events publisher closed")
	}
	if p.started {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	pub := zmq4.NewPub(ctx)
	if err := pub.SetOption(zmq4.OptionHWM, p.cfg.HWM); err != nil {
		cancel()
		return fmt.Errorf("sim: kv events: %w", err)
	}
	var err error
	if bindsPub(p.cfg.Endpoint) {
		err = pub.Listen(p.cfg.Endpoint)
		p.pubEP = boundEndpoint(p.cfg.Endpoint, pub.Addr())
	} else {
		err = pub.Dial(p.cfg.Endpoint)
		p.pubEP = p.cfg.Endpoint
	}
	if err != nil {
		_ = pub.Close()
		cancel()
		return fmt.Errorf("sim: kv events endpoint: %w", err)
	}
	p.pub = pub
	p.done = make(chan struct{})
	if p.cfg.ReplayEndpoint != "" {
		router := zmq4.NewRouter(ctx)
		if err := router.Listen(p.cfg.ReplayEndpoint); err != nil {
			_ = router.Close()
			_ = pub.Close()
			cancel()
			return fmt.Errorf("sim: kv events replay endpoint: %w", err)
		}
		p.router = router
		p.replEP = boundEndpoint(p.cfg.ReplayEndpoint, router.Addr())
		go p.serveReplay(ctx, router)
	} else {
		close(p.done)
	}
	p.cancel = cancel
	p.started = true
	p.log.Info("sim publishing kv events", zap.String("endpoint", p.pubEP), zap.String("replay_endpoint", p.replEP))
	return nil
}

// boundEndpoint is a dialable form of a bound endpoint: tcp with the
// listener's port, the wildcard host replaced by the loopback address.
func boundEndpoint(ep string, addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !strings.HasPrefix(ep, "tcp://") {
		return ep
	}
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = "127.0.0.1"
		if ta.IP.To4() == nil && strings.Contains(ep, "::") {
			host = "::1"
		}
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(ta.Port))
}

func (p *kvPublisher) close() {
	p.mu.Lock()
	p.closed = true
	started := p.started
	p.mu.Unlock()
	if !started {
		return
	}
	p.cancel()
	if p.router != nil {
		_ = p.router.Close()
	}
	_ = p.pub.Close()
	<-p.done
}

// publish numbers, encodes, sends and buffers one batch.
func (p *kvPublisher) publish(events []kvEvent) {
	ts := float64(p.clock().UnixNano()) / 1e9
	payload := p.enc.batch(ts, p.cfg.DataParallelRank, events)
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.next
	p.next++
	b := kvBatch{seq: seq, payload: payload}
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, b)
	} else {
		p.ring[p.head] = b
		p.head = (p.head + 1) % len(p.ring)
	}
	if p.pub != nil && !p.closed {
		msg := zmq4.NewMsgFrom([]byte(p.cfg.Topic), binary.BigEndian.AppendUint64(nil, seq), payload)
		if err := p.pub.SendMulti(msg); err != nil {
			p.log.Warn("sim kv events: publish failed", zap.Error(err))
		}
	}
}

// since returns the buffered batches with seq >= start, oldest first.
func (p *kvPublisher) since(start uint64) []kvBatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []kvBatch
	for i := range p.ring {
		b := p.ring[(p.head+i)%len(p.ring)]
		if b.seq >= start {
			out = append(out, b)
		}
	}
	return out
}

// serveReplay answers replay requests [identity, "", start_seq] with one
// [identity, "", seq, payload] per buffered batch from start_seq on, then
// [identity, "", -1, ""], as vLLM's _service_replay does.
func (p *kvPublisher) serveReplay(ctx context.Context, router zmq4.Socket) {
	defer close(p.done)
	for {
		msg, err := router.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) > 8 {
			p.log.Warn("sim kv events: invalid replay request", zap.Int("frames", len(msg.Frames)))
			continue
		}
		id := msg.Frames[0]
		var start uint64
		for _, c := range msg.Frames[2] {
			start = start<<8 | uint64(c)
		}
		for _, b := range p.since(start) {
			seq := binary.BigEndian.AppendUint64(nil, b.seq)
			if err := router.Send(zmq4.NewMsgFrom(id, nil, seq, b.payload)); err != nil {
				break
			}
		}
		_ = router.Send(zmq4.NewMsgFrom(id, nil, kvEndSeq, nil))
	}
}

// publishLocked publishes events as one batch, if there are any and KV
// events are configured. The caller holds s.mu.
func (s *Server) publishLocked(events []kvEvent) {
	if s.kv == nil || len(events) == 0 {
		return
	}
	s.kv.publish(events)
}

// StartKVEvents opens the KV events sockets configured by Config.KVEvents
// (Run does it before it listens; a test serving Handler itself calls it).
// It is idempotent, and a no-op without KVEvents.
func (s *Server) StartKVEvents() error {
	if s.kv == nil {
		return s.kvErr
	}
	return s.kv.start()
}

// KVEventsEndpoints returns the dialable addresses of the KV events PUB and
// replay sockets once StartKVEvents (or Run) opened them: a bound tcp
// endpoint carries its real port (so a config may ask for port 0) and the
// loopback address for a wildcard host. Empty strings before the start,
// without KVEvents, or (replay) without a ReplayEndpoint.
func (s *Server) KVEventsEndpoints() (pub, replay string) {
	if s.kv == nil {
		return "", ""
	}
	s.kv.mu.Lock()
	defer s.kv.mu.Unlock()
	return s.kv.pubEP, s.kv.replEP
}
