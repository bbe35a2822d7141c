package store

import "github.com/redis/go-redis/v9"

// The quota scripts keep package quota's windows in hashes whose fields
// are expiry instants (ms on the store's clock, rounded up to the window's
// granularity, never down) and whose values are the amounts that expire
// then: requests (req), settled tokens per minute (tok) and per day (day).
// A key's reservations in flight are the fields "replica/seq" of its fl
// hash, valued "tokens:day" (day 1: reserved under a day limit). Their
// figures match quota.Local's (local.go): the same checks in the same
// order, the same RetryAfter and Status.

// quotaLua defines the helpers. It expects KEYS[1..5] = req, tok, day, fl,
// replicas and the locals span, gran, dspan, dgran.
const quotaLua = `
local function expAt(t, sp, gr)
  local e = t + sp
  local r = e % gr
  if r ~= 0 then e = e + gr - r end
  return e
end
-- inflight counts the live reservations; those of dead replicas settle
-- now as reserved.
local function inflight()
  local all = redis.call('HGETALL', KEYS[4])
  local n, t, dt = 0, 0, 0
  for i = 1, #all, 2 do
    local tok, day = string.match(all[i + 1], '^(%d+):(%d)$')
    tok = tonumber(tok) or 0
    if alive(string.match(all[i], '^(.+)/%d+$')) then
      n = n + 1
      t = t + tok
      if day == '1' then dt = dt + tok end
    else
      redis.call('HDEL', KEYS[4], all[i])
      if tok > 0 then
        redis.call('HINCRBY', KEYS[2], expAt(now, span, gran), tok)
        redis.call('PEXPIRE', KEYS[2], span + gran + 1000)
        if day == '1' then
          redis.call('HINCRBY', KEYS[3], expAt(now, dspan, dgran), tok)
          redis.call('PEXPIRE', KEYS[3], dspan + dgran + 1000)
        end
      end
    end
  end
  return n, t, dt
end
-- load drops a window's expired buckets and returns the live ones in
-- order of expiry, and their sum.
local function load(key)
  local all = redis.call('HGETALL', key)
  local b, sum = {}, 0
  for i = 1, #all, 2 do
    local e, n = tonumber(all[i]), tonumber(all[i + 1])
    if e <= now then
      redis.call('HDEL', key, all[i])
    else
      b[#b + 1] = {e, n}
      sum = sum + n
    end
  end
  table.sort(b, function(x, y) return x[1] < y[1] end)
  return b, sum
end
local function freeAt(b, need)
  if need <= 0 then return nil end
  local acc = 0
  for i = 1, #b do
    acc = acc + b[i][2]
    if acc >= need then return b[i][1] end
  end
  return nil
end
local function lastExp(b)
  if #b == 0 then return now end
  return b[#b][1]
end
local function retryAfter(b, sum, infl, asked, limit)
  local need = sum + infl + asked - limit
  local at = freeAt(b, need)
  if at then return at - now, 0 end
  local after = 1000
  local at2 = freeAt(b, need - infl)
  if at2 then after = math.max(after, at2 - now) end
  return after, 1
end
local function status(rpm, tpm, reqB, reqSum, tokB, tokSum, ft)
  local s = {0, 0, 0, 0, 0, 0}
  if rpm > 0 then
    s[1], s[2], s[3] = rpm, math.max(0, rpm - reqSum), lastExp(reqB) - now
  end
  if tpm > 0 then
    local reset = lastExp(tokB)
    if ft > 0 then reset = math.max(reset, expAt(now, span, gran)) end
    s[4], s[5], s[6] = tpm, math.max(0, tpm - ft - tokSum), reset - now
  end
  return s
end
`

// reserveScript is quota.Local.Reserve. KEYS: req, tok, day, fl, replicas,
// epoch. ARGV: field, tokens, day (0/1), rpm, tpm, tpd, max concurrent,
// replica, lease, span, gran, dspan, dgran, fl TTL (ms), a fresh epoch.
// Returns {1, status..., epoch} or {0, kind, limit, in use, asked, retry
// ms, estimated, never, status..., epoch} (kinds: 1 tokens, 2 requests, 3
// tokens per day, 4 concurrent).
var reserveScript = redis.NewScript(`local KEYS_REPLICAS = KEYS[5]` + livenessLua + `
local span, gran, dspan, dgran = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
` + quotaLua + `
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[9]), ARGV[8])
local field, tokens, day = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rpm, tpm, tpd, conc = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local epoch = redis.call('GET', KEYS[6])
if not epoch then
  epoch = ARGV[15]
  redis.call('SET', KEYS[6], epoch)
end
redis.call('HDEL', KEYS[4], field) -- a heartbeat may have written it early
local n, ft, fdt = inflight()
local reqB, reqSum = load(KEYS[1])
local tokB, tokSum = load(KEYS[2])
local dayB, daySum = load(KEYS[3])
local function deny(kind, limit, inuse, asked, after, est, never)
  local out = {0, kind, limit, inuse, asked, after, est, never}
  for _, v in ipairs(status(rpm, tpm, reqB, reqSum, tokB, tokSum, ft)) do out[#out + 1] = v end
  out[#out + 1] = epoch
  return out
end
if tpm > 0 and tokens > tpm then return deny(1, tpm, ft + tokSum, tokens, 0, 0, 1) end
if tpd > 0 and tokens > tpd then return deny(3, tpd, fdt + daySum, tokens, 0, 0, 1) end
local d = nil
local function refuse(c)
  if d == nil or c[6] > d[6] then d = c end
end
if tpm > 0 and ft + tokSum + tokens > tpm then
  local a, e = retryAfter(tokB, tokSum, ft, tokens, tpm)
  refuse({0, 1, tpm, ft + tokSum, tokens, a, e, 0})
end
if rpm > 0 and reqSum + 1 > rpm then
  local a, e = retryAfter(reqB, reqSum, 0, 1, rpm)
  refuse({0, 2, rpm, reqSum, 1, a, e, 0})
end
if tpd > 0 and fdt + daySum + tokens > tpd then
  local a, e = retryAfter(dayB, daySum, fdt, tokens, tpd)
  refuse({0, 3, tpd, fdt + daySum, tokens, a, e, 0})
end
if conc > 0 and n >= conc then
  refuse({0, 4, conc, n, 1, 1000, 1, 0})
end
if d ~= nil then
  return deny(d[2], d[3], d[4], d[5], d[6], d[7], d[8])
end
local rexp = expAt(now, span, gran)
redis.call('HINCRBY', KEYS[1], rexp, 1)
redis.call('PEXPIRE', KEYS[1], span + gran + 1000)
redis.call('HSET', KEYS[4], field, tokens .. ':' .. day)
redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[14]))
if #reqB == 0 or reqB[#reqB][1] < rexp then reqB[#reqB + 1] = {rexp, 1} end
local out = {1}
for _, v in ipairs(status(rpm, tpm, reqB, reqSum + 1, tokB, tokSum, ft + tokens)) do out[#out + 1] = v end
out[#out + 1] = epoch
return out
`)

// statusScript is quota.Local.Status. KEYS as reserveScript. ARGV: rpm,
// tpm, span, gran, dspan, dgran. Returns the status.
var statusScript = redis.NewScript(`local KEYS_REPLICAS = KEYS[5]` + livenessLua + `
local span, gran, dspan, dgran = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
` + quotaLua + `
local n, ft, fdt = inflight()
local reqB, reqSum = load(KEYS[1])
local tokB, tokSum = load(KEYS[2])
return status(tonumber(ARGV[1]), tonumber(ARGV[2]), reqB, reqSum, tokB, tokSum, ft)
`)

// settleScript is quota's Settle. KEYS: tok, day, fl. ARGV: field, used
// (< 0: as reserved), span, gran, dspan, dgran. A reservation already gone
// (settled, or counted as used after its replica's lease ended) is left
// alone.
var settleScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function expAt(t, sp, gr)
  local e = t + sp
  local r = e % gr
  if r ~= 0 then e = e + gr - r end
  return e
end
local span, gran, dspan, dgran = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not v then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
local tok, day = string.match(v, '^(%d+):(%d)$')
local used = tonumber(ARGV[2])
if used < 0 then used = tonumber(tok) or 0 end
if used > 0 then
  redis.call('HINCRBY', KEYS[1], expAt(now, span, gran), used)
  redis.call('PEXPIRE', KEYS[1], span + gran + 1000)
  if day == '1' then
    redis.call('HINCRBY', KEYS[2], expAt(now, dspan, dgran), used)
    redis.call('PEXPIRE', KEYS[2], dspan + dgran + 1000)
  end
end
return 1
`)
