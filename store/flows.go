package store

import (
	"context"
	"encoding/json"
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

// FlowClaimsTTL is how long a replica's claims (its active flows and
// their counters) count after its last sync, on the store's clock: a
// replica syncs many times in it, and one that died claims nothing past
// it.
const FlowClaimsTTL = 500 * time.Millisecond

// flowsKey is the hash of a model's flows' service under fairness tokens:
// flow (an API key's name; "" for none) -> its weighted token service over
// every replica, a float.
func flowsKey(model string) string { return prefix + "f:" + model }

// claimsKey is the hash of a model's replicas' claims: replica -> "E J",
// E the claims' end (ms, the store's clock) and J the claims as JSON
// (wireClaim).
func claimsKey(model string) string { return prefix + "fc:" + model }

// wireClaim is an admission.FlowClaim in the store.
type wireClaim struct {
	Flow    string        `json:"f"`
	Counter float64       `json:"c"`
	Class   int           `json:"k,omitempty"`
	Waiting bool          `json:"w,omitempty"`
	Seen    float64       `json:"s,omitempty"`
	Waited  time.Duration `json:"a,omitempty"`
}

// syncFlowsScript adds the deltas to the totals, puts this replica's
// claims (or deletes them: none), drops the claims that ended, and
// answers the totals and the other replicas' live claims, on the store's
// clock, in one round trip.
// KEYS: totals, claims. ARGV: replica, claims TTL ms, totals TTL s, the
// claims' JSON ("" for none), then flow, delta pairs.
var syncFlowsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 5, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[2], ARGV[1], (now + tonumber(ARGV[2])) .. ' ' .. ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
local others = {}
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if all[i] ~= ARGV[1] then
    local v = all[i + 1]
    local sp = string.find(v, ' ', 1, true)
    if sp == nil or tonumber(string.sub(v, 1, sp - 1)) < now then
      redis.call('HDEL', KEYS[2], all[i])
    else
      others[#others + 1] = all[i]
      others[#others + 1] = string.sub(v, sp + 1)
    end
  end
end
return {redis.call('HGETALL', KEYS[1]), others}
`)

var _ admission.FlowSync = (*Store)(nil)

// SyncFlows implements admission.FlowSync: it adds this replica's deltas
// to the model's totals, replaces this replica's claims (they count for
// FlowClaimsTTL), and reads every flow's total and the other replicas'
// live claims back, in one script (syncFlowsScript), one round trip.
// While the store is down it answers admission.ErrStoreDown at once; the
// pool keeps its deltas for the next sync.
func (s *Store) SyncFlows(ctx context.Context, model string, deltas map[string]float64, claims []admission.FlowClaim) (admission.FlowView, error) {
	if !s.State().Up {
		return admission.FlowView{}, admission.ErrStoreDown
	}
	var js string
	if len(claims) > 0 {
		w := make([]wireClaim, len(claims))
		for i, c := range claims {
			w[i] = wireClaim(c)
		}
		b, err := json.Marshal(w)
		if err != nil {
			return admission.FlowView{}, err
		}
		js = string(b)
	}
	args := make([]any, 0, 4+2*len(deltas))
	args = append(args, s.replica, FlowClaimsTTL.Milliseconds(), int64(FlowsTTL/time.Second), js)
	for flow, d := range deltas {
		args = append(args, flow, strconv.FormatFloat(d, 'g', -1, 64))
	}
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
	defer cancel()
	ans, err := syncFlowsScript.Run(c, s.rdb, []string{flowsKey(model), claimsKey(model)}, args...).Slice()
	if err != nil {
		if ctx.Err() != nil {
			return admission.FlowView{}, ctx.Err()
		}
		s.fail(err)
		return admission.FlowView{}, errors.Join(admission.ErrStoreDown, err)
	}
	return flowView(ans), nil
}

// flowView reads syncFlowsScript's answer: {totals as field, value
// pairs, others' claims as replica, JSON pairs}. A value it cannot read
// is left out.
func flowView(ans []any) admission.FlowView {
	v := admission.FlowView{Totals: map[string]float64{}}
	pairs := func(i int, fn func(k, v string)) {
		if i >= len(ans) {
			return
		}
		a, _ := ans[i].([]any)
		for j := 0; j+1 < len(a); j += 2 {
			k, _ := a[j].(string)
			val, _ := a[j+1].(string)
			fn(k, val)
		}
	}
	pairs(0, func(flow, val string) {
		if f, err := strconv.ParseFloat(val, 64); err == nil {
			v.Totals[flow] = f
		}
	})
	pairs(1, func(replica, js string) {
		var w []wireClaim
		if json.Unmarshal([]byte(js), &w) != nil || len(w) == 0 {
			return
		}
		if v.Others == nil {
			v.Others = map[string][]admission.FlowClaim{}
		}
		cs := make([]admission.FlowClaim, len(w))
		for i, c := range w {
			cs[i] = admission.FlowClaim(c)
		}
		v.Others[replica] = cs
	})
	return v
}
