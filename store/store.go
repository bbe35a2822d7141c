package store

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
)

// prefix starts every key. The braces are a Redis Cluster hash tag: all of
// maitred's keys live in one slot, so each script's keys are co-located.
// One fleet per database (the store URL's /db).
const prefix = "{maitred}:"

const (
	replicasKey = prefix + "replicas" // sorted set: replica -> lease end (ms, the store's clock)
	epochKey    = prefix + "epoch"    // a random value set once: a new one means the store lost its data
	beatsKey    = prefix + "beats"    // hash: replica -> its last heartbeat (ms, the store's clock)
	versionKey  = prefix + "version"  // a counter of takes and releases: orders their answers
	freedChan   = prefix + "freed"    // pub/sub: a backend's name when room was freed on it
)

// backendKey is the hash of a backend's holdings: "replica/seq" -> tokens.
func backendKey(backend string) string { return prefix + "b:" + backend }

// Options configure a Store.
type Options struct {
	Config config.StoreConfig
	// Replica names this process in the store; empty: the host name (the
	// pod's, under Kubernetes) and a random suffix, so that a restarted
	// process never inherits its predecessor's holdings.
	Replica string
	Logger  *zap.Logger
	// QuotaMinute scales the keys' quota windows: the "minute" of
	// requests_per_minute and tokens_per_minute (and the day, 1440 of
	// them). Zero: a minute. Tests shorten it; the store's clock runs as
	// it does.
	QuotaMinute time.Duration
}

// Store is the shared store of a fleet's replicas on Redis 7 or Valkey. It
// implements admission.Shared (backend budgets). Safe for concurrent use;
// Run must be running for its lease to be renewed.
type Store struct {
	cfg     config.StoreConfig
	rdb     *redis.Client
	log     *zap.Logger
	replica string
	leaseMs int64

	state atomic.Pointer[admission.SharedState]
	// settling: the store came back (at settleFrom, its clock in ms), and
	// until every live replica has beaten since (writing back what it took
	// while the store was down) its counts may be short of them; the pool
	// keeps to its down-time allowance until then (SharedState.Settling).
	settling   atomic.Bool
	settleFrom int64 // under mu

	mu     sync.Mutex
	holds  map[uint64]*hold
	hashes map[string]hashInfo // every hash this replica has held in
	seq    uint64
	// epoch is the store's epoch as the last heartbeat saw it.
	// writeBack: the store failed since; the next heartbeat that reaches
	// it writes every holding back. downs counts the failures, so that a
	// heartbeat that overlapped one does not clear writeBack.
	epoch     string
	writeBack bool
	downs     uint64
	// unsettled are quota settlements the store could not take yet.
	unsettled []unsettled
	watchers  []func(backend string)
	// seen is, per backend, the holdings the store counted at its last
	// answer about it while up and settled (Seen).
	seen map[string]seenCount

	// minute is the length of the keys' per-minute windows (a minute;
	// shorter in tests, see Options.QuotaMinute).
	minute time.Duration
}

// seenCount is a backend's holdings as the store last counted them, at
// version (the store's counter of takes and releases).
type seenCount struct {
	mine, others int
	version      int64
}

// hashInfo is what the heartbeat needs to know of a hash of holdings.
type hashInfo struct {
	kind     string // "b": a backend's; "q": a key's quota reservations
	announce string // the backend's name, published when room is freed there
}

var _ admission.Shared = (*Store)(nil)

// New builds a store client; it does not connect until used. The store is
// taken as up until an operation fails.
func New(o Options) (*Store, error) {
	addr, err := o.Config.Addr()
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Replica == "" {
		o.Replica = defaultReplica()
	}
	o.Replica = strings.Map(func(r rune) rune {
		if r == '/' || r <= ' ' {
			return '-'
		}
		return r
	}, o.Replica)
	timeout := o.Config.Timeout.D()
	opt := &redis.Options{
		Addr:     addr.Addr,
		Username: addr.User,
		Password: o.Config.Password(),
		DB:       addr.DB,
		Protocol: 2,
		// A store slower than store_timeout counts as down: no long
		// retries on the request path (one, for a pooled connection the
		// server closed).
		DialTimeout:     timeout,
		ReadTimeout:     timeout,
		WriteTimeout:    timeout,
		MaxRetries:      1,
		MinRetryBackoff: time.Millisecond,
		MaxRetryBackoff: 5 * time.Millisecond,
		PoolSize:        64,
		DisableIdentity: true,

		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if addr.TLS {
		host := addr.Addr
		if i := strings.LastIndexByte(host, ':'); i >= 0 {
			host = host[:i]
		}
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	s := &Store{
		cfg: o.Config, rdb: redis.NewClient(opt), log: o.Logger.Named("store"), replica: o.Replica,
		leaseMs: o.Config.Lease.D().Milliseconds(), holds: map[uint64]*hold{}, hashes: map[string]hashInfo{}, seen: map[string]seenCount{},
		minute: o.QuotaMinute,
	}
	if s.minute <= 0 {
		s.minute = time.Minute
	}
	s.state.Store(&admission.SharedState{Up: true, Replicas: 1, Replica: o.Replica, Since: time.Now()})
	return s, nil
}

// quietRedis drops the client library's own log lines (plain text on
// stderr, such as each failed dial while the store is down): the store
// logs its transitions itself, once each, in the process's log.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

// withEpoch reads a script's answer whose last element is the store's
// epoch: it becomes the replica's when it has seen none yet (a heartbeat
// that then finds another writes its holdings back), and the integers
// before it are returned.
func (s *Store) withEpoch(ans []any) []int64 {
	if len(ans) == 0 {
		return nil
	}
	if e, ok := ans[len(ans)-1].(string); ok && e != "" {
		s.mu.Lock()
		if s.epoch == "" {
			s.epoch = e
		}
		s.mu.Unlock()
		ans = ans[:len(ans)-1]
	}
	res := make([]int64, len(ans))
	for i, v := range ans {
		res[i], _ = v.(int64)
	}
	return res
}

func newEpoch() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func defaultReplica() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "maitred"
	}
	b := make([]byte, 4)
	rand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}

// State is the store's standing as last seen.
func (s *Store) State() admission.SharedState {
	st := *s.state.Load()
	st.Settling = st.Up && s.settling.Load()
	return st
}

// Seen implements admission.Shared: the backend's holdings, this
// replica's and the others', as the store counted them in its last answer
// about the backend (a take or a release) while it was up and settled.
func (s *Store) Seen(backend string) (mine, others int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.seen[backend]
	return c.mine, c.others, ok
}

// see records a backend's holdings from an answer of the store, unless the
// store is down or settling (its counts are then short of what replicas
// took while it was down).
func (s *Store) see(backend string, total, mine, version int64) {
	if st := s.State(); !st.Up || st.Settling {
		return
	}
	s.mu.Lock()
	if s.seen[backend].version < version {
		s.seen[backend] = seenCount{mine: int(mine), others: int(max(total-mine, 0)), version: version}
	}
	s.mu.Unlock()
}

// Replica is this process's name in the store.
func (s *Store) Replica() string { return s.replica }

// Watch registers f to hear of freed room: a backend's name when another
// replica released a holding on it, "" when every backend should be looked
// at again (each heartbeat, as a safety net for holdings freed by a lease
// that ended; and when the store goes down or comes back). f must not
// block.
func (s *Store) Watch(f func(backend string)) {
	s.mu.Lock()
	s.watchers = append(s.watchers, f)
	s.mu.Unlock()
}

func (s *Store) notify(backend string) {
	s.mu.Lock()
	ws := s.watchers
	s.mu.Unlock()
	for _, f := range ws {
		f(backend)
	}
}

// fail records a failed operation: the store is down from now until a
// heartbeat reaches it again.
func (s *Store) fail(err error) {
	for {
		old := s.state.Load()
		if !old.Up {
			if old.Err == err.Error() {
				return
			}
			st := *old
			st.Err = err.Error()
			if s.state.CompareAndSwap(old, &st) {
				return
			}
			continue
		}
		st := *old
		st.Up, st.Since, st.Err = false, time.Now(), err.Error()
		if !s.state.CompareAndSwap(old, &st) {
			continue
		}
		// Holdings taken from now on are not in the store: the first
		// heartbeat that reaches it again writes them all back.
		s.mu.Lock()
		s.writeBack = true
		s.downs++
		s.mu.Unlock()
		if s.cfg.OnError == config.StoreErrorReject {
			s.log.Error("shared store unavailable: requests get 503 (on_store_error: reject) until it is back",
				zap.Error(err), zap.String("replica", s.replica))
		} else {
			s.log.Warn("shared store unavailable: admitting on this replica's share of each limit (on_store_error: local) until it is back",
				zap.Error(err), zap.Int("replicas_last_seen", st.Replicas), zap.String("replica", s.replica))
		}
		s.notify("")
		return
	}
}

// reached records a heartbeat that reached the store and counted replicas.
func (s *Store) reached(replicas int) {
	replicas = max(replicas, 1)
	for {
		old := s.state.Load()
		if old.Up && old.Replicas == replicas {
			return
		}
		st := *old
		st.Replicas = replicas
		if !old.Up {
			st.Up, st.Since, st.Err = true, time.Now(), ""
		}
		if !s.state.CompareAndSwap(old, &st) {
			continue
		}
		if !old.Up {
			s.log.Info("shared store reachable again: shared accounting resumes", zap.Int("replicas", replicas),
				zap.Duration("down_for", st.Since.Sub(old.Since)), zap.String("replica", s.replica))
		} else {
			s.log.Info("live replicas changed", zap.Int("replicas", replicas), zap.Int("was", old.Replicas))
		}
		s.notify("")
		return
	}
}

// Run renews this replica's lease every store_heartbeat (more often while
// the store is down, to notice its return), counts the live replicas, and
// listens for freed room, until ctx ends. It then releases nothing: the
// holdings of requests still running end with them, and the lease runs out.
func (s *Store) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.listen(ctx) })
	for {
		s.beat(ctx)
		s.notify("")
		next := s.cfg.Heartbeat.D()
		if st := s.State(); !st.Up || st.Settling {
			next = min(next, time.Second)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			wg.Wait()
			return
		case <-t.C:
		}
	}
}

// Close closes the client's connections (after Run has returned).
func (s *Store) Close() error { return s.rdb.Close() }

// listen hears freed room on the pub/sub channel and tells the watchers.
// The subscription reconnects by itself; messages sent while it was away
// are lost, which the heartbeat's re-check covers.
func (s *Store) listen(ctx context.Context) {
	ps := s.rdb.Subscribe(ctx, freedChan)
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t := time.NewTimer(min(s.cfg.Heartbeat.D(), 500*time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		s.notify(msg.Payload)
	}
}

// beat renews the lease and writes this replica's holdings as they are
// (see beatScript), and counts the live replicas.
func (s *Store) beat(ctx context.Context) {
	s.mu.Lock()
	maxSeq, downs := s.seq, s.downs
	byHash := map[string][]*hold{}
	for _, h := range s.holds {
		byHash[h.hkey] = append(byHash[h.hkey], h)
	}
	keys := []string{replicasKey, epochKey, beatsKey}
	force := "0"
	if s.writeBack {
		force = "1"
	}
	seen := s.epoch
	// Sent while the store is taken as up, this heartbeat's snapshot has
	// every holding taken while it was down (none is added locally
	// since): only such a one ends a write-back, and only its time tells
	// the other replicas this one's holdings are whole.
	up := s.State().Up
	complete := "0"
	if up {
		complete = "1"
	}
	args := []any{s.replica, s.leaseMs, maxSeq, freedChan, s.quotaTTL(), seen, newEpoch(), force, complete}
	for k, info := range s.hashes {
		hs := byHash[k]
		keys = append(keys, k)
		args = append(args, info.announce, info.kind, len(hs))
		for _, h := range hs {
			args = append(args, h.seq, h.value)
		}
	}
	s.mu.Unlock()
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
	res, err := beatScript.Run(c, s.rdb, keys, args...).Slice()
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("heartbeat: unexpected answer %v", res)
	}
	if err != nil {
		s.fail(err)
		return
	}
	n, _ := res[0].(int64)
	now, _ := res[1].(int64)
	oldest, _ := res[2].(int64)
	epoch, _ := res[3].(string)
	s.settleBack(now, oldest)
	s.mu.Lock()
	if s.downs == downs && up {
		s.writeBack = false
	}
	if seen == "" && s.epoch != "" && s.epoch != epoch {
		// A take during this heartbeat saw an epoch the heartbeat did
		// not compare with: the store restarted between them, and the
		// holdings taken before must be written back.
		s.writeBack = true
	}
	s.epoch = epoch
	s.mu.Unlock()
	s.reached(int(n))
	s.retrySettles()
}

// settleBack follows the store's return: the heartbeat that finds it back
// (at now, the store's clock) starts settling, and a later one that finds
// every live replica's last beat (oldest) more than store_timeout after
// that ends it (a beat sent before and answered late does not count: it
// ran within store_timeout of the return).
func (s *Store) settleBack(now, oldest int64) {
	if !s.State().Up {
		s.mu.Lock()
		s.settleFrom = now
		s.mu.Unlock()
		s.settling.Store(true)
		return
	}
	if !s.settling.Load() {
		return
	}
	s.mu.Lock()
	done := oldest > s.settleFrom+s.cfg.Timeout.D().Milliseconds()
	s.mu.Unlock()
	if done {
		s.settling.Store(false)
		s.notify("") // the pools look again: the counts are whole
	}
}

// hold is one request's holding: a field of a hash of holdings (a
// backend's, or a key's quota reservations in flight).
type hold struct {
	s     *Store
	hkey  string // the hash
	seq   uint64
	value string // the field's value: tokens ("tokens:day" for a quota)
	// backend is the backend's name ("" for a quota reservation).
	backend string
	done    atomic.Bool
}

func (h *hold) field() string { return h.s.replica + "/" + strconv.FormatUint(h.seq, 10) }

// newHold registers a holding before it is asked for, so that a heartbeat
// running meanwhile writes it rather than deletes it.
func (s *Store) newHold(hkey string, info hashInfo, value string) *hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	h := &hold{s: s, hkey: hkey, seq: s.seq, value: value, backend: info.announce}
	s.holds[h.seq] = h
	s.hashes[hkey] = info
	return h
}

func (s *Store) forget(h *hold) {
	s.mu.Lock()
	delete(s.holds, h.seq)
	s.mu.Unlock()
}

// Take implements admission.Shared: one round trip (takeScript).
func (s *Store) Take(ctx context.Context, backend string, maxInFlight, budget, tokens int) (admission.Hold, error) {
	h := s.newHold(backendKey(backend), hashInfo{kind: "b", announce: backend}, strconv.Itoa(tokens))
	if !s.State().Up {
		return h, admission.ErrStoreDown
	}
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
	ans, err := takeScript.Run(c, s.rdb, []string{backendKey(backend), replicasKey, epochKey, versionKey},
		h.field(), tokens, maxInFlight, budget, s.replica, s.leaseMs, newEpoch()).Slice()
	cancel()
	res := s.withEpoch(ans)
	switch {
	case ctx.Err() != nil:
		return h, ctx.Err() // the caller releases h: the script may have run
	case err != nil:
		s.fail(err)
		return h, errors.Join(admission.ErrStoreDown, err)
	}
	if len(res) >= 5 {
		s.see(backend, res[1], res[3], res[4])
	}
	if len(res) == 0 || res[0] == 0 {
		s.forget(h)
		return nil, admission.ErrHeldElsewhere
	}
	return h, nil
}

// Release gives the holding back: one round trip that deletes it and
// announces the freed room. While the store is down only the local record
// goes; the next heartbeat that reaches the store removes it there.
func (h *hold) Release() {
	if !h.done.CompareAndSwap(false, true) {
		return
	}
	s := h.s
	s.forget(h)
	if !s.State().Up {
		return
	}
	c, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout.D())
	ans, err := releaseScript.Run(c, s.rdb, []string{backendKey(h.backend), versionKey}, h.field(), freedChan, h.backend, s.replica).Int64Slice()
	cancel()
	if err != nil {
		s.fail(err)
		return
	}
	if len(ans) == 3 {
		s.see(h.backend, ans[0], ans[1], ans[2])
	}
}

// Holds is the number of holdings this replica has (confirmed, asked for,
// or taken while the store was down), for /debug.
func (s *Store) Holds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.holds)
}
