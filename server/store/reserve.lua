-- Reservations and leases (reserve.h, RLS_XOP_*): one script for every kind,
-- sent by store/reserve.c through the store's command() as EVAL, one call per
-- operation, outside batches. Every key it touches is in KEYS and shares
-- the op key's hash tag, so a Cluster master runs it as one slot.
--
-- ARGV[1] is the kind (1 settle, 2 acquire, 3 release, 4 renew), ARGV[2]
-- now in ms (the server's estimate of the store's clock: the script never
-- reads Redis's own, so that the server's replay agrees with it).
--
-- Settle: KEYS[1] the caller's settled set "<key>:x" (member: the
-- reservation's id, score: its end in ms), KEYS[2] its floor "<key>:xf",
-- KEYS[2 + j] the key of window j. ARGV[3] the reservation's end, ARGV[4]
-- delta, ARGV[5] when the reservation was decided, ARGV[6] the number of
-- windows nw, then three per window (below), then the id and the ids the
-- set keeps (cap; cap + cap / 16 at most, between trims); KEYS[3 + nw],
-- when given, the marker "<key>:x<id>" that a server before the settled
-- set wrote (a version 1 handle's). A settle is refused (result 0) when
-- its id is in the set, or that marker exists, or its end is at or
-- before now or at or before the floor: the set drops its earliest ends
-- past its bound and the floor keeps the latest end it dropped, so an id
-- not in the set but no later than the floor may have been settled and is
-- never applied again. The window arguments: "f" 0 0 (a fixed window's
-- counter, adjusted only when above 0: a batch may remove a counter at 0,
-- so 0 is no counter), "s" index 0 (a sliding-window-counter's state
-- "<index>:<count>:<previous>": the count of the window index charged,
-- when the state still holds it and it is above 0, kept with its expiry),
-- "g" interval_us grace_ms (a gcra's TAT in us) or "l" window_ms
-- expiry_ms (a sliding window's log, store.h's RLS_SWL_* layout).
-- Everything is read and checked before
-- anything is written, so an error reply leaves the store as it was.
--
-- Acquire, release, renew: KEYS[1] the lease set "<key>:c" (member: the
-- lease's id, score: its end in ms); ARGV[3] the id, ARGV[4] the new end,
-- ARGV[5] the leases allowed alive. Leases whose end is at or before now
-- are dropped first; the set then expires at its latest end. An acquire
-- may name the caller's stored quotas (KEYS[2], "<tag>:q", field ARGV[6],
-- scale ARGV[7]): a quota that is one "N/S" sets the leases allowed to N
-- scaled (at least 1); anything else there is ignored.
--
-- The reply: {result, count, earliest_ms, quota}, four integers (quota:
-- the stored quota's limit that applied, or 0).
--
-- Where store.h leaves a choice, every store (memory.c too) makes the same
-- one: a gcra's refund stops at now (used 0); a sliding window's excess
-- entry is at max(now, its newest entry), and the log then expires at the
-- window's expire_at_ms (the batch's: decided_at + W + grace) moved on by
-- now - decided_at; a refund leaves an entry at cost 0 rather than cut it
-- out (the readers in redis_script.lua, the module and memory.c take
-- it); acquiring a lease that is alive renews it (result 1, its new end);
-- a count past 2^53 (Lua's exact doubles) fails the settle whole.

local rcall, tonumber, ssub, sfind, sfmt = redis.call, tonumber,
    string.sub, string.find, string.format
local kind, now = ARGV[1], tonumber(ARGV[2])
local MAXN = 9007199254740991
local BAD = 'ERR not a sliding-window log'
local NOTINT = 'ERR value is not an integer or out of range'
local OVER = 'ERR increment or decrement would overflow'

-- v + delta, never below 0; nil past MAXN.
local function adj(v, delta)
    local nv = v + delta
    if nv < 0 then nv = 0 end
    if nv > MAXN then return nil end
    return nv
end

if kind == '1' then
    local delta, dec, nw = tonumber(ARGV[4]), tonumber(ARGV[5]),
        tonumber(ARGV[6])
    local til, id, cap = tonumber(ARGV[3]), ARGV[7 + 3 * nw],
        tonumber(ARGV[8 + 3 * nw])
    local floor = rcall('GET', KEYS[2])
    if til <= now or (floor and til <= tonumber(floor)) or
        rcall('ZSCORE', KEYS[1], id) or
        (KEYS[3 + nw] and rcall('EXISTS', KEYS[3 + nw]) == 1) then
        return {0, 0, 0, 0}
    end
    local plan, nowus = {}, now * 1000
    for j = 1, nw do
        local key, a = KEYS[j + 2], ARGV[4 + 3 * j]
        local x, y = tonumber(ARGV[5 + 3 * j]), tonumber(ARGV[6 + 3 * j])
        if a == 's' then
            local v = rcall('GET', key)
            if v then
                local S, c1, c2 = string.match(v, '^(%d+):(%-?%d+):(%-?%d+)$')
                S, c1, c2 = tonumber(S), tonumber(c1), tonumber(c2)
                if not c2 then return redis.error_reply(NOTINT) end
                local n1, n2 = c1, c2
                if S == x and c1 > 0 then n1 = adj(c1, delta)
                elseif S == x + 1 and c2 > 0 then n2 = adj(c2, delta) end
                if not n1 or not n2 then return redis.error_reply(OVER) end
                if n1 ~= c1 or n2 ~= c2 then
                    plan[#plan + 1] = {'s', key,
                        sfmt('%.0f:%.0f:%.0f', S, n1, n2)}
                end
            end
        elseif a == 'f' or a == 'g' then
            local v = rcall('GET', key)
            if v then
                v = tonumber(v)
                if not v then
                    return redis.error_reply(
                        'ERR value is not an integer or out of range')
                end
            end
            if a == 'f' and v and v > 0 and delta ~= 0 then
                local nv = v + delta
                if nv < 0 then nv = 0 end
                if nv > MAXN then
                    return redis.error_reply(
                        'ERR increment or decrement would overflow')
                end
                if nv ~= v then plan[#plan + 1] = {'f', key, nv - v} end
            elseif a == 'g' then
                local nt = nil
                if delta > 0 then
                    nt = ((v and v > nowus) and v or nowus) + delta * x
                    if nt > MAXN then
                        return redis.error_reply(
                            'ERR increment or decrement would overflow')
                    end
                elseif delta < 0 and v and v > nowus then
                    nt = v + delta * x
                    if nt < nowus then nt = nowus end
                end
                if nt then plan[#plan + 1] = {'g', key, nt, y} end
            end
        elseif a == 'l' then
            local h = rcall('GETRANGE', key, 0, 31)
            local sum, pos, len = 0, 32, 0
            if h ~= '' then
                if #h ~= 32 or not sfind(h, '^%d+$') then
                    return redis.error_reply(BAD)
                end
                sum, pos = tonumber(ssub(h, 1, 20)), tonumber(ssub(h, 21, 32))
                len = rcall('STRLEN', key)
                if pos < 32 or pos > len or (len - pos) % 24 ~= 0 then
                    return redis.error_reply(BAD)
                end
            end
            if delta > 0 then
                local t = now
                if len > pos then
                    local nt = rcall('GETRANGE', key, len - 24, len - 11)
                    if not sfind(nt, '^%d+$') then
                        return redis.error_reply(BAD)
                    end
                    nt = tonumber(nt)
                    if nt > t then t = nt end
                end
                plan[#plan + 1] = {'la', key, sum + delta, pos, len, t, y}
            elseif delta < 0 and len > pos and dec + x > now then
                local want, at, takes, taken = -delta, len - 24, {}, 0
                while at >= pos and want > 0 do
                    local lo = at - 24 * 15
                    if lo < pos then lo = pos end
                    local chunk = rcall('GETRANGE', key, lo, at + 23)
                    local stop = false
                    for e = at, lo, -24 do
                        local s = ssub(chunk, e - lo + 1, e - lo + 24)
                        if #s ~= 24 or not sfind(s, '^%d+$') then
                            return redis.error_reply(BAD)
                        end
                        local t, c = tonumber(ssub(s, 1, 14)),
                            tonumber(ssub(s, 15, 24))
                        if t < dec then stop = true; break end
                        if t == dec and c > 0 then
                            local tk = c < want and c or want
                            takes[#takes + 1] = {e, c - tk}
                            want, taken = want - tk, taken + tk
                            if want == 0 then stop = true; break end
                        end
                    end
                    if stop then break end
                    at = lo - 24
                end
                if taken > 0 then
                    local ns = sum - taken
                    if ns < 0 then ns = 0 end
                    plan[#plan + 1] = {'lr', key, takes, ns, pos}
                end
            end
        else
            return redis.error_reply('ERR unknown limit kind')
        end
    end
    -- Past the bound and a sixteenth (so that the trimming's four calls
    -- are paid once per cap / 16 settlements, not each time) the earliest
    -- ends go, down to the bound, and the floor rises to the latest of
    -- them, expiring when now passes it. Ids whose end passed are the
    -- earliest, so they go first (their settlement is refused by its end
    -- anyway); nothing else removes them, as in memory.c.
    local xs = KEYS[1]
    rcall('ZADD', xs, ARGV[3], id)
    local n = rcall('ZCARD', xs)
    if cap < 1 then cap = 1 end
    if n > cap + math.floor(cap / 16) then
        local gone = rcall('ZRANGE', xs, n - cap - 1, n - cap - 1,
            'WITHSCORES')
        rcall('ZREMRANGEBYRANK', xs, 0, n - cap - 1)
        rcall('SET', KEYS[2], gone[2])
        rcall('PEXPIREAT', KEYS[2], gone[2])
    end
    if rcall('PTTL', xs) < til - now then rcall('PEXPIREAT', xs, ARGV[3]) end
    for i = 1, #plan do
        local p = plan[i]
        if p[1] == 'f' then
            rcall('INCRBY', p[2], sfmt('%.0f', p[3]))
        elseif p[1] == 's' then
            if redis.REDIS_VERSION_NUM then
                rcall('SET', p[2], p[3], 'KEEPTTL')
            else
                local t = rcall('PTTL', p[2])
                rcall('SET', p[2], p[3])
                if t > 0 then rcall('PEXPIRE', p[2], t) end
            end
        elseif p[1] == 'g' then
            rcall('SET', p[2], sfmt('%.0f', p[3]))
            rcall('PEXPIREAT', p[2], sfmt('%.0f', math.ceil(p[3] / 1000) + p[4]))
        elseif p[1] == 'la' then
            local e = sfmt('%014d%010d', p[6], delta)
            if p[5] == 0 or p[4] >= p[5] then
                rcall('SET', p[2], sfmt('%020d%012d', delta, 32) .. e)
            else
                rcall('APPEND', p[2], e)
                rcall('SETRANGE', p[2], 0, sfmt('%020d%012d', p[3], p[4]))
            end
            rcall('PEXPIREAT', p[2], sfmt('%.0f', p[7]))
        else
            for k = 1, #p[3] do
                rcall('SETRANGE', p[2], p[3][k][1] + 14,
                    sfmt('%010d', p[3][k][2]))
            end
            rcall('SETRANGE', p[2], 0, sfmt('%020d%012d', p[4], p[5]))
        end
    end
    return {1, 0, 0, 0}
end

local key, id = KEYS[1], ARGV[3]
rcall('ZREMRANGEBYSCORE', key, '-inf', now)
-- Redis's cost here is its calls: an acquire that fits asks no ZSCORE
-- and counts from ZADD's answer; an op that changed nothing leaves the
-- expiry, already at the latest end (only ended leases went, and none of
-- them was the latest).
local res, n, earliest, qlim = 0, nil, 0, 0
if kind == '2' then
    local lim
    n, lim = rcall('ZCARD', key), tonumber(ARGV[5])
    if KEYS[2] then
        local q = rcall('HGET', KEYS[2], ARGV[6])
        local l = q and string.match(q, '^%s*(%d+)/%d+%s*$')
        if l then
            l = math.floor(tonumber(l) * tonumber(ARGV[7]))
            if l < 1 then l = 1 end
            if l < MAXN then lim, qlim = l, l end
        end
    end
    if n < lim or rcall('ZSCORE', key, id) then
        n = n + rcall('ZADD', key, ARGV[4], id)
        res = 1
    else
        local f = rcall('ZRANGE', key, 0, 0, 'WITHSCORES')
        if f[2] then earliest = tonumber(f[2]) end
    end
elseif kind == '3' then
    res = rcall('ZREM', key, id)
elseif kind == '4' then
    if rcall('ZSCORE', key, id) then
        rcall('ZADD', key, ARGV[4], id)
        res = 1
    end
else
    return redis.error_reply('ERR unknown xop kind')
end
n = n or rcall('ZCARD', key)
if res == 0 then return {res, n, earliest, qlim} end
if n > 0 then
    local l = rcall('ZRANGE', key, -1, -1, 'WITHSCORES')
    rcall('PEXPIREAT', key, sfmt('%.0f', tonumber(l[2])))
end
return {res, n, earliest, qlim}
