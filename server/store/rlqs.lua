-- RLQS's fleet-wide step for one participant (an Envoy's stream of one
-- bucket) of one budget (server/rlqs/fleet.c), in one atomic call: its
-- usage added to the window's counter, its demand and the time recorded,
-- and what every instance divides the budget by returned. KEYS: the
-- budget's participant hash (member -> "demand:last_ms"), its usage
-- counter of the current window (expiring after two windows and a
-- second), its summary hash (n, sum, sweep); one
-- hash tag, so one slot. ARGV: the participant, its demand (requests per
-- unit), requests allowed since its last step, the store's clock (ms),
-- stale_ms, the counter's time to live (ms), 1 to leave (the stream went
-- or the bucket was abandoned). The reply: the window's usage after the
-- step, the live participants, the sum of their demands.
-- The count and the sum are kept in the summary and moved by each step,
-- so a step costs the same however many share the budget; every stale_ms
-- / 2 one step reads the hash whole, drops the participants silent past
-- stale_ms and counts again (as does any step that finds the summary
-- gone wrong: a count or sum below 0), and sets the keys to expire
-- after 4 stale_ms: a budget no one reports goes.
local d, u, s = KEYS[1], KEYS[2], KEYS[3]
local now, stale = tonumber(ARGV[4]), tonumber(ARGV[5])
local sm = redis.call('HMGET', s, 'n', 'sum', 'sweep')
local n, sum, sweep = tonumber(sm[1]) or 0, tonumber(sm[2]) or 0, tonumber(sm[3]) or 0
local old = redis.call('HGET', d, ARGV[1])
local used = 0
if old then
    local od = tonumber(string.match(old, '^(%d+):'))
    if od then
        n = n - 1
        sum = sum - od
    end
end
if ARGV[7] == '1' then
    if old then
        redis.call('HDEL', d, ARGV[1])
    end
else
    used = redis.call('INCRBY', u, ARGV[3])
    if used == tonumber(ARGV[3]) then
        redis.call('PEXPIRE', u, ARGV[6])
    end
    redis.call('HSET', d, ARGV[1], ARGV[2] .. ':' .. ARGV[4])
    n = n + 1
    sum = sum + tonumber(ARGV[2])
end
if now >= sweep or n < 0 or sum < 0 then
    local all = redis.call('HGETALL', d)
    n, sum = 0, 0
    for i = 1, #all, 2 do
        local x, t = string.match(all[i + 1], '^(%d+):(%d+)$')
        if x == nil or now - tonumber(t) > stale then
            redis.call('HDEL', d, all[i])
        else
            n = n + 1
            sum = sum + tonumber(x)
        end
    end
    sweep = now + math.floor(stale / 2)
    redis.call('HSET', s, 'n', n, 'sum', sum, 'sweep', sweep)
    redis.call('PEXPIRE', d, stale * 4)
    redis.call('PEXPIRE', s, stale * 4)
else
    redis.call('HSET', s, 'n', n, 'sum', sum)
end
return {used, n, sum}
