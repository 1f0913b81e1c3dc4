-- RLQS's fleet-wide step for one participant (an Envoy's stream of one
-- bucket) of one budget (server/rlqs/fleet.c): its usage added to the
-- window's counter, its demand and the time recorded, the participants
-- silent past stale_ms dropped, and what every instance divides the
-- budget by returned, in one atomic call. KEYS: the budget's
-- participant hash, then its usage counter of the current window (one
-- hash tag: one slot). ARGV: the participant, its demand (requests per
-- unit), requests allowed since its last step, the store's clock (ms),
-- stale_ms, the counter's time to live (ms), 1 to leave (the stream went
-- or the bucket was abandoned: only the HDEL). The reply: the window's
-- usage after the step, the live participants, the sum of their demands.
local h, now, stale = KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5])
if ARGV[7] == '1' then
    redis.call('HDEL', h, ARGV[1])
    return {0, 0, 0}
end
local used = redis.call('INCRBY', KEYS[2], ARGV[3])
if redis.call('PTTL', KEYS[2]) < 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
redis.call('HSET', h, ARGV[1], ARGV[2] .. ':' .. ARGV[4])
redis.call('PEXPIRE', h, stale * 4)
local all = redis.call('HGETALL', h)
local n, sum = 0, 0
for i = 1, #all, 2 do
    local d, t = string.match(all[i + 1], '^(%d+):(%d+)$')
    if d == nil or now - tonumber(t) > stale then
        redis.call('HDEL', h, all[i])
    else
        n = n + 1
        sum = sum + tonumber(d)
    end
end
return {used, n, sum}
