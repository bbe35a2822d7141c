package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/quota"
)

// Quotas is the keys' quota store shared by the replicas: quota.Store on
// the same server, with quota.Local's semantics (see package quota: sliding
// windows of settled usage by expiry, in-flight reservations, debt, the
// same denials and Status), on the store's clock. A reservation is a
// holding under its replica's lease: a replica that dies does not keep its
// reservations in flight for ever; when its lease has ended, the next
// reserve on the key counts them as used (their tokens settle at that
// moment, as reserved). While the store is down, reservations are made in
// a quota.Local on this replica's share of each limit (on_store_error
// local), or refused with admission.ErrStoreDown (reject); what they use is
// not written to the store when it is back.
type Quotas struct {
	s     *Store
	local *quota.Local
}

var _ quota.Store = (*Quotas)(nil)

// Quotas returns the keys' quota store on s.
func (s *Store) Quotas() *Quotas { return &Quotas{s: s, local: quota.NewLocal(time.Now)} }

func quotaKey(key, window string) string { return prefix + "q:" + key + ":" + window }

// spans are the windows' lengths and granularities in ms: the minute
// windows in buckets of a 60th, the day (1440 minutes) by the minute.
func (s *Store) spans() (span, gran, dspan, dgran int64) {
	m := s.minute.Milliseconds()
	return m, max(m/60, 1), 1440 * m, m
}

// quotaTTL is how long a key's hash of reservations in flight outlives its
// last write: past its replicas' leases and a window.
func (s *Store) quotaTTL() int64 { return 3*s.leaseMs + s.minute.Milliseconds() }

func (q *Quotas) Reserve(ctx context.Context, key string, lim quota.Limits, tokens int64) (quota.Reservation, error) {
	s := q.s
	tokens = max(tokens, 0)
	if !s.State().Up {
		return q.fallback(ctx, key, lim, tokens)
	}
	day := "0"
	if lim.TokensPerDay > 0 {
		day = "1"
	}
	h := s.newHold(quotaKey(key, "fl"), hashInfo{kind: "q"}, strconv.FormatInt(tokens, 10)+":"+day)
	span, gran, dspan, dgran := s.spans()
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
	ans, err := reserveScript.Run(c, s.rdb,
		[]string{quotaKey(key, "req"), quotaKey(key, "tok"), quotaKey(key, "day"), quotaKey(key, "fl"), replicasKey, epochKey},
		h.field(), tokens, day, lim.RequestsPerMinute, lim.TokensPerMinute, lim.TokensPerDay, lim.MaxConcurrent,
		s.replica, s.leaseMs, span, gran, dspan, dgran, s.quotaTTL(), newEpoch()).Slice()
	cancel()
	res := s.withEpoch(ans)
	if err != nil {
		s.forget(h)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.fail(err)
		return q.fallback(ctx, key, lim, tokens)
	}
	if len(res) < 7 {
		s.forget(h)
		s.fail(fmt.Errorf("reserve: unexpected answer %v", ans))
		return q.fallback(ctx, key, lim, tokens)
	}
	if res[0] == 0 {
		s.forget(h)
		d := &quota.Denied{Kind: kinds[res[1]], Limit: res[2], InUse: res[3], Asked: res[4],
			RetryAfter: time.Duration(res[5]) * time.Millisecond, Estimated: res[6] == 1, Never: res[7] == 1, Status: statusOf(res[8:])}
		return nil, d
	}
	return &reservation{q: q, h: h, key: key, status: statusOf(res[1:])}, nil
}

var kinds = map[int64]quota.Kind{1: quota.Tokens, 2: quota.Requests, 3: quota.TokensPerDay, 4: quota.Concurrent}

func statusOf(v []int64) quota.Status {
	if len(v) < 6 {
		return quota.Status{}
	}
	return quota.Status{LimitRequests: v[0], RemainingRequests: v[1], ResetRequests: time.Duration(v[2]) * time.Millisecond,
		LimitTokens: v[3], RemainingTokens: v[4], ResetTokens: time.Duration(v[5]) * time.Millisecond}
}

// fallback reserves while the store is down: on this replica's share of
// each limit in its own quota.Local, or not at all under reject.
func (q *Quotas) fallback(ctx context.Context, key string, lim quota.Limits, tokens int64) (quota.Reservation, error) {
	if q.s.cfg.OnError == config.StoreErrorReject {
		return nil, admission.ErrStoreDown
	}
	n := int64(q.s.State().Replicas)
	part := func(v int64) int64 {
		if v <= 0 || n <= 1 {
			return v
		}
		return max(1, v/n)
	}
	lim = quota.Limits{RequestsPerMinute: part(lim.RequestsPerMinute), TokensPerMinute: part(lim.TokensPerMinute),
		TokensPerDay: part(lim.TokensPerDay), MaxConcurrent: part(lim.MaxConcurrent)}
	return q.local.Reserve(ctx, key, lim, tokens)
}

// Status reports the key's window in the store (the local share's while
// the store is down).
func (q *Quotas) Status(key string, lim quota.Limits) quota.Status {
	s := q.s
	if !s.State().Up {
		return q.local.Status(key, lim)
	}
	span, gran, dspan, dgran := s.spans()
	c, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout.D())
	defer cancel()
	res, err := statusScript.Run(c, s.rdb,
		[]string{quotaKey(key, "req"), quotaKey(key, "tok"), quotaKey(key, "day"), quotaKey(key, "fl"), replicasKey},
		lim.RequestsPerMinute, lim.TokensPerMinute, span, gran, dspan, dgran).Int64Slice()
	if err != nil {
		s.fail(err)
		return q.local.Status(key, lim)
	}
	return statusOf(res)
}

type reservation struct {
	q      *Quotas
	h      *hold
	key    string
	status quota.Status
}

func (r *reservation) Status() quota.Status { return r.status }

// Settle ends the reservation in the store with its usage. When the store
// cannot take it, the reservation stays in flight (written back by the
// heartbeats, so it keeps counting) and the settlement is retried after
// each heartbeat that reaches the store.
func (r *reservation) Settle(used int64) {
	h := r.h
	if !h.done.CompareAndSwap(false, true) {
		return
	}
	s := r.q.s
	if err := s.settle(h, r.key, used); err != nil {
		s.mu.Lock()
		s.unsettled = append(s.unsettled, unsettled{h: h, key: r.key, used: used})
		s.mu.Unlock()
		return
	}
	s.forget(h)
}

type unsettled struct {
	h    *hold
	key  string
	used int64
}

func (s *Store) settle(h *hold, key string, used int64) error {
	if !s.State().Up {
		return errors.New("store down")
	}
	span, gran, dspan, dgran := s.spans()
	c, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout.D())
	defer cancel()
	err := settleScript.Run(c, s.rdb, []string{quotaKey(key, "tok"), quotaKey(key, "day"), quotaKey(key, "fl")},
		h.field(), used, span, gran, dspan, dgran).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		s.fail(err)
		return err
	}
	return nil
}

// retrySettles settles what could not be settled while the store was down
// (after a heartbeat wrote those reservations back).
func (s *Store) retrySettles() {
	s.mu.Lock()
	todo := s.unsettled
	s.unsettled = nil
	s.mu.Unlock()
	for i, u := range todo {
		if err := s.settle(u.h, u.key, u.used); err != nil {
			s.mu.Lock()
			s.unsettled = append(s.unsettled, todo[i:]...)
			s.mu.Unlock()
			return
		}
		s.forget(u.h)
	}
}
