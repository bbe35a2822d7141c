package store

import "github.com/redis/go-redis/v9"

// The scripts run atomically in the store, on the store's clock (TIME), so
// that replicas' clocks never have to agree. A holding is a field
// "replica/seq" of its backend's hash, valued with its tokens; it counts
// while its replica is live: a member of the replicas set whose lease end
// has not passed. A replica renews its lease with every heartbeat, so one
// that dies frees all it held when its lease ends, without anyone
// releasing anything.

// The store's epoch is a random value set by whichever script finds none:
// a new one means the store lost its data. Takes and reservations return
// it, so that a replica knows the epoch its first holdings went into even
// when the store restarts before its first heartbeat.

// livenessLua defines alive(replica), memoised per script run.
const livenessLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = {}
local function alive(r)
  if r == nil then return false end
  local ok = seen[r]
  if ok == nil then
    local sc = redis.call('ZSCORE', KEYS_REPLICAS, r)
    ok = (sc and tonumber(sc) >= now) or false
    seen[r] = ok
  end
  return ok
end
`

// takeScript holds one request on a backend if it fits, in one round trip.
// KEYS: the backend's hash, the replicas set, the epoch. ARGV: field,
// tokens, max_in_flight, budget (0: none), replica, lease (ms), a fresh
// epoch. It renews the
// caller's own lease (a replica that takes is alive), drops holdings of
// dead replicas, and counts the others against the limits. An idle backend
// takes a request over its budget, as the pool does. Returns {1 or 0, n,
// tokens, mine, version, epoch} after the decision (see epochLua): n live
// holdings in all, mine of them the caller's; version (KEYS[4], a counter
// of takes and releases) orders answers that arrive out of order.
var takeScript = redis.NewScript(`local KEYS_REPLICAS = KEYS[2]` + livenessLua + `
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  epoch = ARGV[7]
  redis.call('SET', KEYS[3], epoch)
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[6]), ARGV[5])
local field, tokens, maxIn, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local own = ARGV[5] .. '/'
local all = redis.call('HGETALL', KEYS[1])
local n, sum, mine = 0, 0, 0
for i = 1, #all, 2 do
  local f = all[i]
  if f ~= field then
    if alive(string.match(f, '^(.+)/%d+$')) then
      n = n + 1
      sum = sum + (tonumber(all[i + 1]) or 0)
      if string.sub(f, 1, #own) == own then
        mine = mine + 1
      end
    else
      redis.call('HDEL', KEYS[1], f)
    end
  end
end
if (maxIn > 0 and n >= maxIn) or (budget > 0 and n > 0 and sum + tokens > budget) then
  redis.call('HDEL', KEYS[1], field)
  return {0, n, sum, mine, redis.call('INCR', KEYS[4]), epoch}
end
redis.call('HSET', KEYS[1], field, tokens)
return {1, n + 1, sum + tokens, mine + 1, redis.call('INCR', KEYS[4]), epoch}
`)

// releaseScript drops a holding and, when it was there, announces the
// freed room. KEYS: the backend's hash, the version counter. ARGV: field,
// channel, backend, replica. Returns {holdings left, the replica's among
// them, version} (every field counted, a dead replica's too: the count
// errs high).
var releaseScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
local own = ARGV[4] .. '/'
local keys = redis.call('HKEYS', KEYS[1])
local mine = 0
for _, f in ipairs(keys) do
  if string.sub(f, 1, #own) == own then
    mine = mine + 1
  end
end
return {#keys, mine, redis.call('INCR', KEYS[2])}
`)

// beatScript renews a replica's lease and keeps its holdings as the
// replica knows them, in every hash it has held in. Its fields that it does
// not list are deleted when their seq is at most the snapshot's (a later
// one is a take the snapshot did not see yet). The holdings it lists are
// written back only when the store's epoch is not the one the replica last
// saw (the store restarted empty, or the replica was cut off from it and
// took holdings meanwhile), or when this heartbeat found no epoch at all:
// takes set it too, so no holding was taken in this store before, and the
// replica's are written (this also covers a heartbeat that go-redis
// retried on the restarted store after it ran on the old one, with the
// same fresh epoch). Each counts once, by its own field. An
// ordinary heartbeat writes nothing back, so it cannot revive a holding
// released while it ran. In a backend's hash ("b") holdings of dead
// replicas are dropped, and a backend that lost holdings is announced as
// freed; a key's reservations ("q") of dead replicas are left to its next
// reserve, which counts them as used, and the hash is given the quota TTL.
// A heartbeat sent while the replica took the store as up (so every
// holding it has is in the store after it) records its time (the store's
// clock, ms) in the beats hash, so that a replica that came back from an
// outage can tell when every live replica's holdings are whole again.
// KEYS: the replicas set, the epoch, the beats hash, then the hashes. ARGV: replica, lease
// (ms), the snapshot's highest seq, the channel, the quota TTL (ms), the
// epoch the replica last saw ("" for none yet), a fresh epoch (used when
// the store has none), "1" to write back whatever the epoch (the replica
// was cut off from the store), "1" when the replica took the store as up
// when it sent this (its time is recorded), then per hash its backend's
// name, its kind, the count
// of holdings and that many (seq, value) pairs. Returns {live replicas,
// the store's time, the oldest last beat of the live replicas, epoch}.
var beatScript = redis.NewScript(`local KEYS_REPLICAS = KEYS[1]` + livenessLua + `
local replica, maxSeq, channel, qttl = ARGV[1], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local epoch = redis.call('GET', KEYS[2])
local created = false
if not epoch then
  epoch = ARGV[7]
  redis.call('SET', KEYS[2], epoch)
  created = true
end
local writeBack = ARGV[8] == '1' or created or (ARGV[6] ~= '' and epoch ~= ARGV[6])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), replica)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
if ARGV[9] == '1' then
  redis.call('HSET', KEYS[3], replica, now)
end
local oldest = now
for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')) do
  local b = tonumber(redis.call('HGET', KEYS[3], r) or '0')
  if b < oldest then oldest = b end
end
local a = 10
for k = 4, #KEYS do
  local name, kind, c = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local mine = {}
  for j = 1, c do
    mine[ARGV[a]] = ARGV[a + 1]
    a = a + 2
  end
  local freed = false
  local all = redis.call('HGETALL', KEYS[k])
  for i = 1, #all, 2 do
    local f = all[i]
    local r, seq = string.match(f, '^(.+)/(%d+)$')
    if r == replica then
      if mine[seq] == nil and tonumber(seq) <= maxSeq then
        redis.call('HDEL', KEYS[k], f)
        freed = true
      end
    elseif kind == 'b' and not alive(r) then
      redis.call('HDEL', KEYS[k], f)
      freed = true
    end
  end
  if writeBack then
    for seq, v in pairs(mine) do
      redis.call('HSET', KEYS[k], replica .. '/' .. seq, v)
    end
  end
  if kind == 'q' then
    if redis.call('EXISTS', KEYS[k]) == 1 then redis.call('PEXPIRE', KEYS[k], qttl) end
  elseif freed then
    redis.call('PUBLISH', channel, name)
  end
end
return {redis.call('ZCOUNT', KEYS[1], now, '+inf'), now, oldest, epoch}
`)
