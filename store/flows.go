package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maitred-dev/maitred/admission"
)

// FlowsTTL is how long a model's flows' service stays in the store after
// the last sync of any replica: a model that left every replica's config
// leaves the store too.
const FlowsTTL = 24 * time.Hour

// flowsKey is the hash of a model's flows' service under fairness tokens:
// flow (an API key's name; "" for none) -> its weighted token service over
// every replica, a float.
func flowsKey(model string) string { return prefix + "f:" + model }

var _ admission.FlowSync = (*Store)(nil)

// SyncFlows implements admission.FlowSync: it adds this replica's deltas
// to the model's totals and reads every flow's total back, in one
// transaction (MULTI: HINCRBYFLOAT each delta, EXPIRE, HGETALL), one
// round trip. While the store is down it answers admission.ErrStoreDown
// at once; the pool keeps its deltas for the next sync.
func (s *Store) SyncFlows(ctx context.Context, model string, deltas map[string]float64) (map[string]float64, error) {
	if !s.State().Up {
		return nil, admission.ErrStoreDown
	}
	key := flowsKey(model)
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
	defer cancel()
	var all *redis.MapStringStringCmd
	_, err := s.rdb.TxPipelined(c, func(p redis.Pipeliner) error {
		for flow, d := range deltas {
			p.HIncrByFloat(c, key, flow, d)
		}
		p.Expire(c, key, FlowsTTL)
		all = p.HGetAll(c, key)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.fail(err)
		return nil, errors.Join(admission.ErrStoreDown, err)
	}
	totals := make(map[string]float64, len(all.Val()))
	for flow, v := range all.Val() {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			totals[flow] = f
		}
	}
	return totals, nil
}
