-- The Redis store's script: one call decides a batch (redis_script.c embeds
-- this file at build time; lua_embed.cmake says how it becomes the one line
-- Redis runs, whose SHA must not change with the layout of this file).
--
-- It decides every op of a batch as store.h says: per op, the admissions
-- in arrival order against every window (with equal costs in closed form,
-- else one by one; refusals consume nothing), the admitted cost added to
-- every window, PEXPIREAT on a counter it created. A refusal leaves no key
-- behind.
--
-- It adds first and corrects after: INCRBY of the op's whole cost gives
-- each window's count before the batch in one call, and only when some
-- request is refused does a DECRBY take the refused cost back (or a DEL
-- remove a counter that admitted nothing). The script is atomic, so nobody
-- sees the intermediate value (a counter found at 0, which this script
-- never leaves, may be removed: 0 counts as no counter), and with the
-- refusal cache (refusals.c) most refusals never reach Redis: the common
-- op is one INCRBY, the same call as a plain counter. An op that fails
-- halfway (Redis refused one window's INCRBY) has the windows it did
-- increment put back, so it fails whole.
--
-- KEYS are the ops' counter keys "<prefix>{<caller>}:r:<rule>:<w>:<index>"
-- (":i:" for an inline limit), built by the server, window after window
-- and op after op, each op's followed by its caller's quota hash
-- "<prefix>{<caller>}:q" when it names a quota: one hash slot per op.
-- ARGV: the batch's deadline and clock (ms, Redis clock), the counters'
-- grace, the number of ops, the number of profiles and the profiles (a
-- number of windows, then an expiry and a limit per window; or an "a"
-- profile: "a", a number of limits, then each limit's letter and
-- arguments, as an "a" op gives them, below); then per op:
-- its profile P when it has equal costs and no quota (P alone for one
-- request of cost 1, and for k >= 2 such ops in a row on one profile "r",
-- k and P once, which stands for all k; -P, the count and the cost
-- otherwise); or 0, nwin, the quota field ('' for none), per window its
-- expiry and limit, the scale only with a quota, and the costs: -k and one
-- cost for k equal costs, else k and the costs (redis_encode.c writes
-- them); or, for an op with any limit other than a plain fixed window,
-- "a", nwin, the quota field ('' for none) and, with one, its scale, per
-- limit "f" expiry limit (one key), "s" expiry limit weight index (a
-- sliding-window-counter: one key holding "<index>:<count>:<previous>",
-- the window index those counts are of, its count and the previous
-- window's), "g" burst interval_us (a gcra: its TAT in us as key) or "l"
-- expiry limit window_ms (a sliding window: its log as key, laid out as
-- store.h's RLS_SWL_* say), then the costs; or, for such an op with
-- equal costs and no quota whose limits are an "a" profile A: "A", A, k
-- and the cost, and for k >= 1 such ops in a row of one request of cost 1
-- "R", k and A once; such an op is decided as
-- lib/admit.c decides (rl_admit.h), its reply entry the admitted count and
-- per limit its state before (a count; the current and previous counts;
-- the TAT; a log's sum, newest time, m, and its m oldest entries' times
-- and costs).
--
-- The reply is an array, op after op: the admitted count and the count
-- before of each window, as integers (the common op); or one string for an
-- op out of the ordinary: "<admitted> q <window> <limit> <before>..." when
-- the caller's stored quota of fixed windows replaced the rule's windows,
-- "<admitted> A <letter> <window> <limit> <unit> <state>..." when one of
-- any algorithm did (atext), "<admitted> Q <state>..." when a stored
-- quota did not parse (the rule's limits applied), "e<KIND>" when Redis refused the op. When some op was refused,
-- one more string, the first refusal's text, ends the array. The whole
-- reply is the string "late" when Redis ran the batch after its deadline,
-- having counted nothing. Integers and not one string of digits because
-- Lua turns a number into text with sprintf, the costliest step of an op
-- after its INCRBY (BENCHMARKS.md, "Redis command strategy"); the store
-- reads the array without one allocation per integer (redis_reply_alloc.c)
-- and parses it in redis_parse.c.
--
-- A stored quota parses when it is 1 to 8 space-separated "N/S", each
-- maybe followed by an algorithm (qparse), N >= 1, S from 1 to 366 days,
-- no S twice under one algorithm (as rl-ctl writes it); anything else
-- ("1.5/60", "-5/60", a window twice, which would count twice in one
-- counter) is ignored whole and reported as Q. Quota limits are capped
-- below 2^63 (scaled in Lua's doubles). Counts reach Lua as doubles: exact
-- to 2^53, so are the before-counts it returns. The deadline check calls
-- TIME before any write, which needs script effects replication (Redis 5
-- and later).
--
-- Globals are read once into locals, and a profile is found by table
-- lookup rather than tonumber: every global a script reads is a lookup
-- through Redis's protected globals table.

local rcall, rpcall, type, floor, tonumber = redis.call, redis.pcall, type,
    math.floor, tonumber
local ssub = string.sub
-- Counts and times are whole numbers below 2^53, which '%d' (a long)
-- writes exactly; '%.0f' goes through glibc's multi-precision float
-- printing (its cost: BENCHMARKS.md, "Figures behind the code's choices").
local sfmt = string.format
local NOTINT = 'ERR value is not an integer or out of range'

-- Redis 7 names its version to scripts, and has had SET's PXAT and
-- KEEPTTL since 6.2: one call where older ones take two.
local SET1 = redis.REDIS_VERSION_NUM ~= nil

-- Sets key to v expiring at ex (ms, absolute).
local function setx(key, v, ex)
    if SET1 then return rcall('SET', key, v, 'PXAT', ex) end
    rcall('SET', key, v)
    rcall('PEXPIREAT', key, ex)
end

-- Sets key to v, keeping its expiry.
local function setk(key, v)
    if SET1 then return rcall('SET', key, v, 'KEEPTTL') end
    local t = rcall('PTTL', key)
    rcall('SET', key, v)
    if t > 0 then rcall('PEXPIRE', key, t) end
end

-- A sliding-window-counter's key v (nil when missing) read at window
-- index I, limit L: the current and previous counts, the index and the
-- two counts the key gets once cost is added (the counts of I, or of I + 1
-- when another instance's batch already moved the key on: then I's count
-- is that key's previous one), whether that keeps its expiry, and whether
-- it is written at all (not when the key is two windows or more ahead,
-- whose counts I's requests no longer touch). nil when v is not such a
-- state. A count the key no longer holds is taken as full (L): I - 1's
-- when the key is at I + 1, so that the share of I - 1 is never dropped
-- (a batch stamped in I's last milliseconds that reached Redis after one
-- stamped in I + 1 was admitted over the limit by that share); I's own
-- when the key is further ahead, so nothing is admitted that is not
-- counted.
-- i64: the decimal int64 s, which sread's pattern made an optional '-'
-- and digits, as Redis reads a counter (no leading zero, no "-0"), or nil;
-- a first byte looked at and no pattern for the common short one (what
-- patterns cost: BENCHMARKS.md, "Figures behind the code's choices").
local sbyte = string.byte
local function i64(s)
    if not s then return nil end
    local b = sbyte(s, 1)
    if b == 45 then b = sbyte(s, 2) end
    if b == 48 then return s == '0' and 0 or nil end
    if #s < 19 then return tonumber(s) end
    local neg, d = string.match(s, '^(%-?)(%d+)$')
    if #d > 19 or (#d == 19 and d > (neg == '' and '9223372036854775807' or
        '9223372036854775808')) then return nil end
    return tonumber(s)
end

local function sread(v, I, L)
    if not v then return 0, 0, I, 0, 0, false, true end
    local S, c1, c2 = string.match(v, '^(%d+):(%-?%d+):(%-?%d+)$')
    S, c1, c2 = i64(S), i64(c1), i64(c2)
    if not S or not c1 or not c2 then return nil end
    if S == I then return c1, c2, I, c1, c2, true, true end
    if S == I - 1 then return 0, c1, I, 0, c1, false, true end
    if S == I + 1 then return c2, L, S, c1, c2, true, true end
    if S > I then return L, 0, S, c1, c2, true, false end
    return 0, 0, I, 0, 0, false, true
end

-- A sliding window's log (store.h, RLS_SWL_*): a 32-byte header (the sum
-- in 20 digits, the offset of the first live entry in 12), then 24-byte
-- entries (a time in ms in 14 digits, a cost in 10), oldest first. lread
-- reads it at now: its sum once what left the window (at or before now -
-- W) is dropped, the offset of the first live entry, the string's length,
-- the newest entry's time (0 when none), the oldest live entries (times
-- and costs, at most 4) that cover max(sum - L, 0) + cmax (none when tot,
-- the op's whole cost, fits: then no request of the op is refused, nor
-- waits for this log when another limit refuses it), and the string when
-- it was read whole. One GETRANGE of the first LREAD bytes reads a log of
-- up to 64 entries whole; a longer one takes STRLEN, a GETRANGE of its
-- newest entry and GETRANGEs of 16 entries until what left the window and
-- a few more are read. An error text when the key is not such a log.
-- (Lua's pattern matching costs per byte: only the header and the entries
-- parsed are checked to be digits.)
local LREAD = 32 + 24 * 64
local LLAST = tostring(LREAD - 1)
local NONE = {}
local function lread(key, now, W, L, cmax, tot)
    local s = rpcall('GETRANGE', key, '0', LLAST)
    if type(s) == 'table' then return tostring(s.err) end
    if s == '' then return nil, 0, 32, 0, 0, NONE, NONE, s end
    local bad = 'ERR not a sliding-window log'
    local h = ssub(s, 1, 32)
    if #h ~= 32 or not string.find(h, '^%d+$') then return bad end
    local sum, pos = tonumber(ssub(h, 1, 20)), tonumber(ssub(h, 21, 32))
    local len, whole = #s, true
    if len == LREAD then
        len = rcall('STRLEN', key)
        whole = len == LREAD
    end
    if pos < 32 or pos > len or (len - pos) % 24 ~= 0 then return bad end
    local newest = 0
    if len > pos then
        local nt = whole and ssub(s, len - 23, len - 10) or
            rcall('GETRANGE', key, len - 24, len - 11)
        if not string.find(nt, '^%d+$') then return bad end
        newest = tonumber(nt)
    end
    -- b holds the log's bytes from offset bo on.
    local ot, oc, need, acc, at, b, bo = NONE, NONE, nil, 0, pos, s, 0
    while at < len do
        if at + 24 > bo + #b then
            b, bo = rcall('GETRANGE', key, at, at + 24 * 16 - 1), at
        end
        local e = ssub(b, at - bo + 1, at - bo + 24)
        if #e ~= 24 or not string.find(e, '^%d+$') then return bad end
        local t = tonumber(ssub(e, 1, 14))
        if need == nil and t + W <= now then
            sum, pos = sum - tonumber(ssub(e, 15, 24)), pos + 24
        else
            if need == nil then
                if sum + tot <= L then break end
                need = (sum > L and sum - L or 0) + cmax
                ot, oc = {}, {}
            end
            if acc >= need or #ot == 4 then break end
            local c = tonumber(ssub(e, 15, 24))
            ot[#ot + 1], oc[#oc + 1], acc = t, c, acc + c
        end
        at = at + 24
    end
    if pos >= len then newest = 0 end
    if sum < 0 then sum = 0 end
    return nil, sum, pos, len, newest, ot, oc, whole and s or nil
end

-- Appends (now, cost) to a log read by lread, with its new sum: APPEND,
-- SETRANGE of the header and PEXPIREAT (in Redis, cheaper than one SET of
-- the whole string); the string is rewritten without the entries that
-- left the window when they are half of it (from s when it was read
-- whole).
local function lwrite(key, sum, pos, len, now, cost, ex, s)
    local e = sfmt('%014d%010d', now, cost)
    if len == 0 or pos >= len then
        setx(key, sfmt('%020d%012d', sum, 32) .. e, ex)
    elseif pos - 32 >= (len - 32) / 2 then
        setx(key, sfmt('%020d%012d', sum, 32) ..
            (s and ssub(s, pos + 1) or rcall('GETRANGE', key, pos, -1)) ..
            e, ex)
    else
        rcall('APPEND', key, e)
        rcall('SETRANGE', key, '0', sfmt('%020d%012d', sum, pos))
        rcall('PEXPIREAT', key, ex)
    end
end

-- An op's error entry: "e" and the kind of Redis's error.
local function ekind(err)
    return 'e' .. (string.find(err, 'overflow', 1, true) and 'OVERFLOW' or
        string.find(err, 'non local key', 1, true) and 'NONLOCAL' or
        string.find(err, 'cluster is down', 1, true) and 'CLUSTERDOWN' or
        string.match(err, '^%u+') or '')
end

-- A batch that reaches Redis after its deadline was answered by timeout
-- already: it counts nothing.
local t = rcall('TIME')
local dl = tonumber(ARGV[1])
if dl > 0 and t[1] * 1000 + floor(t[2] / 1000) > dl then return 'late' end

-- The limits of an "a" op or profile from ARGV[p] on, n letters and
-- their arguments ("f" expiry limit, "s" expiry limit weight index, "g"
-- burst interval_us, "l" expiry limit window_ms), as adecide takes them,
-- and the index after them.
local function lparse(p, n)
    local kd, ix, ex, L, U, wt = {}, {}, {}, {}, {}, {}
    for j = 1, n do
        local t = ARGV[p]
        kd[j] = t
        if t == 'g' then
            L[j], U[j] = tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2])
            p = p + 3
        elseif t == 'l' then
            ex[j], L[j], U[j] = ARGV[p + 1], tonumber(ARGV[p + 2]), 1
            wt[j] = tonumber(ARGV[p + 3])
            p = p + 4
        else
            ex[j], L[j], U[j] = ARGV[p + 1], tonumber(ARGV[p + 2]), 1
            if t == 's' then
                wt[j], ix[j] = tonumber(ARGV[p + 3]), tonumber(ARGV[p + 4])
                p = p + 5
            else p = p + 3 end
        end
    end
    return kd, ix, ex, L, U, wt, p
end

-- The profiles: a number of windows, then an expiry and a limit each; or
-- an "a" profile, "a", a number of limits, then their letters and
-- arguments (ap[j]).
local now, grace = tonumber(ARGV[2]), tonumber(ARGV[3])
local pn, pe, pl, pid, np, q = {}, {}, {}, {}, tonumber(ARGV[5]), 6
local ap = {}
for j = 1, np do
    pid[tostring(j)] = j
    if ARGV[q] == 'a' then
        local n = tonumber(ARGV[q + 1])
        local kd, ix, ex, L, U, wt
        kd, ix, ex, L, U, wt, q = lparse(q + 2, n)
        ap[j] = {n, kd, ix, ex, L, U, wt}
    else
        local n = tonumber(ARGV[q])
        local E, L = {}, {}
        for w = 1, n do
            E[w], L[w] = ARGV[q + 2 * w - 1], tonumber(ARGV[q + 2 * w]) end
        pn[j], pe[j], pl[j] = n, E, L
        q = q + 1 + 2 * n
    end
end

-- Decides k requests (listed costs, or k of cost c) against limits given
-- as the "a" op gives them (kd the letters, ks the keys, ix a
-- sliding-window-counter's window index, ex the expiries, L the limits or
-- bursts, U the units, wt the weights or a log's window) as lib/admit.c decides them (rl_admit.h): reads their state,
-- admits in arrival order (refusals consume nothing), writes what was
-- admitted. Returns an error text or nil, the count admitted, and per
-- limit its state before (b1, b2: a count; the current and previous
-- counts; a TAT; a log's sum and newest entry, lg its oldest entries).
local function adecide(nw, kd, ks, ix, ex, L, U, wt, costs, k, c)
    -- The state: used and cap per limit, in its units (rl_admit.h).
    local err, b1, b2, used, cap, nowus = nil, {}, {}, {}, {}, now * 1000
    local lg, cmax, sw, tot = {}, c, {}, k * c
    if costs then
        tot = 0
        for j = 1, k do
            if costs[j] > cmax then cmax = costs[j] end
            tot = tot + costs[j]
        end
    end
    for j = 1, nw do
        if kd[j] == 'l' then
            local er, sm, pos, len, nw2, ot, oc, whole =
                lread(ks[j], now, wt[j], L[j], cmax, tot)
            if er then err = er; break end
            lg[j] = {pos, len, ot, oc, whole}
            b1[j], b2[j], used[j], cap[j] = sm, nw2, sm, L[j]
        else
            local v = rpcall('GET', ks[j])
            local v2 = 0
            if type(v) == 'table' then err = tostring(v.err); break end
            if kd[j] == 's' then
                local S, c1, c2, keep, wr
                v, v2, S, c1, c2, keep, wr = sread(v, ix[j], L[j])
                -- written back as S:c1:c2, the cost added to c1 (to c2
                -- when S is I + 1)
                sw[j] = {S, c1, c2, keep, wr}
            else
                v = tonumber(v or 0)
            end
            if not v then err = NOTINT; break end
            b1[j], b2[j] = v, v2
            if kd[j] == 'g' then
                used[j], cap[j] = v > nowus and v - nowus or 0, L[j] * U[j]
            else
                used[j], cap[j] = v > 0 and v or 0, L[j]
                if kd[j] == 's' then
                    local pv = v2 > 0 and v2 or 0
                    if pv > L[j] then pv = L[j] end
                    used[j] = used[j] + math.ceil(pv * wt[j] / 65536)
                end
            end
        end
    end
    local adm, sum = 0, 0
    if not err then
        local room = {}
        for j = 1, nw do
            room[j] = cap[j] - used[j]
            if room[j] < 0 then room[j] = 0 end
        end
        if costs == nil then
            adm = k
            for j = 1, nw do
                local f = floor(room[j] / (c * U[j]))
                if f < adm then adm = f end
            end
            sum = adm * c
        else
            for i = 1, k do
                local ci, ok = costs[i], true
                for j = 1, nw do
                    if ci * U[j] > room[j] then ok = false; break end
                end
                if ok then
                    for j = 1, nw do room[j] = room[j] - ci * U[j] end
                    adm, sum = adm + 1, sum + ci
                end
            end
        end
        for j = 1, nw do
            local at = b1[j]
            if kd[j] == 's' then
                at = sw[j][1] > ix[j] and sw[j][3] or sw[j][2]
            end
            if kd[j] ~= 'g' and sum > 0 and at + sum > 9007199254740991 then
                err = 'ERR increment or decrement would overflow'
            end
        end
    end
    if not err and sum > 0 then
        for j = 1, nw do
            if kd[j] == 'l' then
                lwrite(ks[j], b1[j] + sum, lg[j][1], lg[j][2], now, sum,
                    ex[j], lg[j][5])
            elseif kd[j] == 'g' then
                local nt = nowus + used[j] + sum * U[j]
                setx(ks[j], sfmt('%d', nt),
                    sfmt('%d', math.ceil(nt / 1000) + grace))
            elseif kd[j] == 's' then
                local st = sw[j]
                if st[5] then
                    -- S == I + 1 adds to the previous count (I's)
                    local v = st[1] > ix[j] and
                        sfmt('%d:%d:%d', st[1], st[2],
                            st[3] + sum) or
                        sfmt('%d:%d:%d', st[1], st[2] + sum,
                            st[3])
                    if st[4] then setk(ks[j], v) else setx(ks[j], v, ex[j]) end
                end
            else
                rcall('INCRBY', ks[j], sfmt('%d', sum))
                if b1[j] == 0 then rcall('PEXPIREAT', ks[j], ex[j]) end
            end
        end
    end
    return err, adm, b1, b2, lg
end

-- Puts a log's state into o after index no (its sum, newest time, the
-- number of oldest entries, then their times and costs); returns the new
-- end.
local function lput(o, no, sum, newest, ot, oc)
    o[no + 1], o[no + 2], o[no + 3] = sum, newest, #ot
    no = no + 3
    for h = 1, #ot do
        o[no + 1], o[no + 2] = ot[h], oc[h]
        no = no + 2
    end
    return no
end

-- Puts an "a" op's reply entry into o from no on (adecide's results);
-- returns the new end.
local function aput(o, no, nw, kd, adm, b1, b2, lg)
    no = no + 1; o[no] = adm
    for j = 1, nw do
        if kd[j] == 'l' then
            no = lput(o, no, b1[j], b2[j], lg[j][3], lg[j][4])
        end
        for h = 1, (kd[j] == 's' and 2 or kd[j] == 'l' and 0 or 1) do
            local b = h == 1 and b1[j] or b2[j]
            if b > 9e18 then b = 9e18 elseif b < -9e18 then b = -9e18 end
            no = no + 1; o[no] = b
        end
    end
    return no
end

-- One gcra limit alone, k requests of cost c (the common "R" op of a
-- gcra rule): adecide's arithmetic and writes without its tables. The
-- error text or nil, the count admitted and the TAT before.
local function g1(key, B, T, k, c)
    local v = rpcall('GET', key)
    if type(v) == 'table' then return tostring(v.err) end
    v = tonumber(v or 0)
    if not v then return NOTINT end
    local nowus = now * 1000
    local used = v > nowus and v - nowus or 0
    local room = B * T - used
    local adm = room > 0 and floor(room / (c * T)) or 0
    if adm > k then adm = k end
    if adm > 0 then
        local nt = nowus + used + adm * c * T
        setx(key, sfmt('%d', nt), sfmt('%d', math.ceil(nt / 1000) + grace))
    end
    return nil, adm, v
end

-- The same for one sliding-window-counter alone (limit L, weight wt,
-- window index I, expiry ex): the error text or nil, the count admitted,
-- the current and previous counts.
local function s1(key, L, wt, I, ex, k, c)
    local v = rpcall('GET', key)
    if type(v) == 'table' then return tostring(v.err) end
    local cur, prev, S, c1, c2, keep, wr = sread(v, I, L)
    if not cur then return NOTINT end
    local pv = prev > 0 and prev or 0
    if pv > L then pv = L end
    local room = L - (cur > 0 and cur or 0) - math.ceil(pv * wt / 65536)
    local adm = room > 0 and floor(room / c) or 0
    if adm > k then adm = k end
    local sum = adm * c
    if sum > 0 then
        if (S > I and c2 or c1) + sum > 9007199254740991 then
            return 'ERR increment or decrement would overflow'
        end
        if wr then
            local nv = S > I and sfmt('%d:%d:%d', S, c1, c2 + sum) or
                sfmt('%d:%d:%d', S, c1 + sum, c2)
            if keep then setk(key, nv) else setx(key, nv, ex) end
        end
    end
    return nil, adm, cur, prev
end

-- The same for one sliding window alone (limit L, window W in ms, expiry
-- ex): the error text or nil, the count admitted, the log's sum and
-- newest time before, and its oldest entries' times and costs.
local function l1(key, L, W, ex, k, c)
    local err, sm, pos, len, nw, ot, oc, s = lread(key, now, W, L, c, k * c)
    if err then return err end
    local room = L - sm
    local adm = room > 0 and floor(room / c) or 0
    if adm > k then adm = k end
    local sum = adm * c
    if sum > 0 then
        if sm + sum > 9007199254740991 then
            return 'ERR increment or decrement would overflow'
        end
        lwrite(key, sm + sum, pos, len, now, sum, ex, s)
    end
    return nil, adm, sm, nw, ot, oc
end

-- A stored quota q (rl-ctl's tokens "N/S[:ALGO][:burst=B]", ALGO
-- fixed-window, sliding-window-counter, sliding-window or gcra) for the op
-- whose first key is k1, its limits at scale sc: nil when it does not
-- parse, else the number of limits, whether any is not a fixed window,
-- and the limits as adecide takes them, with each one's window (ws).
-- Bounds as at load: 1 to 8 tokens, N >= 1, S 1 s to 366 days, no window
-- and algorithm twice, a burst >= 1; scaled limits within [1, 2^63 -
-- 1024], a sliding-window-counter's within 2^36, a sliding window's
-- within 10^6, a gcra's burst x interval within 366 days.
local function qparse(q, k1, sc)
    local base = string.match(k1, '^(.*):%d+:%a?%a?%d*$')
    local n, any, seen = 0, false, {}
    local kd, ks, ix, ex, L, U, wt, ws = {}, {}, {}, {}, {}, {}, {}, {}
    for tok in string.gmatch(q, '%S+') do
        local l, s, rest = string.match(tok, '^(%d+)/(%d+)(.*)$')
        n = n + 1
        l, s = tonumber(l), tonumber(s)
        if n > 8 or not l or l < 1 or s < 1 or s > 31622400 then return nil end
        local a, burst = 'f', nil
        if rest == '' or rest == ':fixed-window' then a = 'f'
        elseif rest == ':sliding-window-counter' then a = 's'
        elseif rest == ':sliding-window' then a = 'l'
        elseif rest == ':gcra' then a = 'g'
        else
            burst = tonumber(string.match(rest, '^:gcra:burst=(%d+)$'))
            if not burst or burst < 1 then return nil end
            a = 'g'
        end
        if seen[a .. s] then return nil end
        seen[a .. s] = true
        any = any or a ~= 'f'
        local lim = floor(l * sc)
        if lim < 1 then lim = 1 end
        if lim > 9223372036854774784 then lim = 9223372036854774784 end
        local W = s * 1000
        local idx = floor(now / W)
        kd[n], ws[n], U[n], L[n] = a, s, 1, lim
        if a == 'f' then
            ks[n], ex[n] = base .. ':' .. s .. ':' .. idx, (idx + 1) * W + grace
        elseif a == 's' then
            if lim > 68719476736 then L[n] = 68719476736 end
            ks[n], ix[n] = base .. ':' .. s .. ':s', idx
            ex[n] = (idx + 2) * W + grace
            wt[n] = math.ceil(((idx + 1) * W - now) * 65536 / W)
        elseif a == 'l' then
            if lim > 1000000 then L[n] = 1000000 end
            ks[n], ex[n], wt[n] = base .. ':' .. s .. ':l', now + W + grace, W
        else
            local T = math.ceil(s * 1000000 / lim)
            local B = burst and floor(burst * sc) or lim
            if B < 1 then B = 1 end
            if B * T > 31622400000000 then B = floor(31622400000000 / T) end
            ks[n], L[n], U[n] = base .. ':' .. s .. ':g', B, T
        end
    end
    if n == 0 then return nil end
    return n, any, kd, ks, ix, ex, L, U, wt, ws
end

-- An op's reply entry as text, for an op a stored quota concerns: tag
-- 'A' (the quota's limits decided: per limit its letter, window, limit
-- and unit, then its state) or 'Q' (a quota that did not parse: the
-- rule's limits decided, per limit its state alone); the state as aput
-- puts it. Digits, never exponents: a TAT passes 10^14.
local function atext(tag, nw, kd, ws, L, U, adm, b1, b2, lg)
    local t, m = {adm, ' ', tag}, 3
    local function put(v)
        t[m + 1], t[m + 2], m = ' ', string.format('%.0f', v), m + 2
    end
    for j = 1, nw do
        if tag == 'A' then
            t[m + 1], t[m + 2], m = ' ', kd[j], m + 2
            put(ws[j]); put(L[j]); put(U[j])
        end
        put(b1[j])
        if kd[j] == 's' or kd[j] == 'l' then put(b2[j]) end
        if kd[j] == 'l' then
            local ot, oc = lg[j][3], lg[j][4]
            put(#ot)
            for h = 1, #ot do put(ot[h]); put(oc[h]) end
        end
    end
    return table.concat(t)
end

-- The ops. o is the reply, p the next argument, kp the next key; run
-- counts down the ops of a run ("r", k, P, or "R", k, A) still to decide.
local o, no, e, p, kp, bef, run, rP = {}, 0, nil, q, 1, {}, 0, 0
for i = 1, tonumber(ARGV[4]) do
    local P, adv = rP, 0
    if run > 0 then run = run - 1
    else
        local a = ARGV[p]
        adv = 1
        if a == 'a' or a == 'A' then P = a
        elseif a == 'r' then
            run, P = tonumber(ARGV[p + 1]) - 1, pid[ARGV[p + 2]]
            rP, p = P, p + 2
        elseif a == 'R' then
            run, P = tonumber(ARGV[p + 1]) - 1, ap[pid[ARGV[p + 2]]]
            rP, p = P, p + 2
        else P = pid[a] or tonumber(a) end
    end

    if P == 'A' or type(P) == 'table' then
        -- An "a" op of a profile: "A", the profile, k and c; or, in a
        -- run, one request of cost 1.
        local pr, k, c = P, 1, 1
        if P == 'A' then
            pr, k, c = ap[pid[ARGV[p + 1]]], tonumber(ARGV[p + 2]),
                tonumber(ARGV[p + 3])
            p = p + 4
        else p = p + adv end
        local nw, kd = pr[1], pr[2]
        if nw == 1 and kd[1] ~= 'f' then
            local err, adm, b1, b2, ot, oc
            if kd[1] == 'g' then
                err, adm, b1 = g1(KEYS[kp], pr[5][1], pr[6][1], k, c)
            elseif kd[1] == 'l' then
                err, adm, b1, b2, ot, oc = l1(KEYS[kp], pr[5][1], pr[7][1],
                    pr[4][1], k, c)
            else
                err, adm, b1, b2 = s1(KEYS[kp], pr[5][1], pr[7][1],
                    pr[3][1], pr[4][1], k, c)
            end
            kp = kp + 1
            no = no + 1
            if err then
                e = e or err
                o[no] = ekind(err)
            elseif ot then
                o[no] = adm
                no = lput(o, no, b1, b2, ot, oc)
            else
                o[no] = adm
                if b1 > 9e18 then b1 = 9e18 elseif b1 < -9e18 then b1 = -9e18 end
                no = no + 1; o[no] = b1
                if b2 then
                    if b2 > 9e18 then b2 = 9e18
                    elseif b2 < -9e18 then b2 = -9e18 end
                    no = no + 1; o[no] = b2
                end
            end
        else
            local ks = {}
            for j = 1, nw do ks[j] = KEYS[kp + j - 1] end
            kp = kp + nw
            local err, adm, b1, b2, lg = adecide(nw, kd, ks, pr[3], pr[4],
                pr[5], pr[6], pr[7], nil, k, c)
            if err then
                e = e or err
                no = no + 1
                o[no] = ekind(err)
            else
                no = aput(o, no, nw, kd, adm, b1, b2, lg)
            end
        end
    elseif P == 'a' then
        -- Limits other than the plain fixed window, spelled out (lparse),
        -- then the costs. Read, decide, write: not the hot path of plain
        -- counters.
        local nw, qf, sc = tonumber(ARGV[p + 1]), ARGV[p + 2], 1
        p = p + 3
        if qf ~= '' then sc, p = tonumber(ARGV[p]), p + 1 end
        local kd, ks, ix, ex, L, U, wt
        kd, ix, ex, L, U, wt, p = lparse(p, nw)
        ks = {}
        for j = 1, nw do ks[j] = KEYS[kp + j - 1] end
        kp = kp + nw
        local nc = tonumber(ARGV[p])
        local costs, k, c = nil, nc, 0
        if nc < 0 then
            k, c = -nc, tonumber(ARGV[p + 1]); p = p + 2
        else
            costs = {}
            for j = 1, nc do costs[j] = tonumber(ARGV[p + j]) end
            p = p + nc + 1
        end
        -- The caller's stored quota, when the op names one, replaces
        -- the rule's limits.
        local tag, err, ws = '', nil, {}
        if qf ~= '' then
            local q = rpcall('HGET', KEYS[kp], qf)
            kp = kp + 1
            if type(q) == 'table' then err = tostring(q.err); q = nil end
            if q then
                local n2, _, kd2, ks2, ix2, ex2, L2, U2, wt2, ws2 =
                    qparse(q, ks[1], sc)
                if n2 then
                    nw, kd, ks, ix, ex, L, U, wt, ws, tag =
                        n2, kd2, ks2, ix2, ex2, L2, U2, wt2, ws2, 'A'
                else tag = 'Q' end
            end
        end
        local adm, b1, b2, lg = 0, nil, nil, nil
        if not err then
            err, adm, b1, b2, lg =
                adecide(nw, kd, ks, ix, ex, L, U, wt, costs, k, c)
        end
        if err then
            e = e or err
            no = no + 1
            o[no] = ekind(err)
        elseif tag ~= '' then
            no = no + 1
            o[no] = atext(tag, nw, kd, ws, L, U, adm, b1, b2, lg)
        else
            no = aput(o, no, nw, kd, adm, b1, b2, lg)
        end
    -- An op with a profile: k requests of cost c, no quota.
    elseif P ~= 0 then
        local k, c, ts = 1, 1, '1'
        if P < 0 then
            P, k, c = -P, tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2])
            p = p + 2
            ts = nil
        end
        local nw, E, L = pn[P], pe[P], pl[P]
        local total = k * c
        local got, err = 0, nil
        for j = 1, nw do
            local n = rpcall('INCRBY', KEYS[kp + j - 1], ts or total)
            if type(n) ~= 'number' then
                err = type(n) == 'table' and tostring(n.err) or '?'
                break
            end
            bef[j], got = n - total, j
        end
        local a, s = 0, 0
        if not err then
            local room = nil
            for j = 1, nw do
                local b = bef[j]
                local r = L[j] - (b > 0 and b or 0)
                if room == nil or r < room then room = r end
            end
            if room > 0 then
                a = floor(room / c)
                if a > k then a = k end
            end
            s = a * c
        end
        for j = 1, got do
            local key = KEYS[kp + j - 1]
            if s < total then
                if bef[j] == 0 and s == 0 then rcall('DEL', key)
                else rcall('DECRBY', key, total - s) end
            end
            if bef[j] == 0 and s > 0 then rcall('PEXPIREAT', key, E[j]) end
        end
        if err then
            e = e or err
            no = no + 1
            o[no] = ekind(err)
        else
            no = no + 1; o[no] = a
            for j = 1, nw do
                local b = bef[j]
                if b > 9e18 then b = 9e18 elseif b < -9e18 then b = -9e18 end
                no = no + 1; o[no] = b
            end
        end
        p, kp = p + adv, kp + nw
    else
        -- The general op: its own windows, maybe a quota, any costs.
        local nw, qf = tonumber(ARGV[p + 1]), ARGV[p + 2]
        p = p + 3
        local ks, ex, ls, ws = {}, {}, {}, nil
        for j = 1, nw do
            ks[j], ex[j], ls[j] = KEYS[kp], ARGV[p], tonumber(ARGV[p + 1])
            kp, p = kp + 1, p + 2
        end
        local tag, qerr, qa = '', nil, nil
        if qf ~= '' then
            local sc = tonumber(ARGV[p])
            local qk = KEYS[kp]
            p, kp = p + 1, kp + 1
            local q = rpcall('HGET', qk, qf)
            if type(q) == 'table' then qerr = tostring(q.err); q = nil end
            if q then
                local n2, any, kd2, ks2, ix2, ex2, L2, U2, wt2, ws2 =
                    qparse(q, ks[1], sc)
                if not n2 then tag = 'Q'
                elseif any then
                    -- Not only fixed windows: decided as an "a" op's.
                    qa = {n2, kd2, ks2, ix2, ex2, L2, U2, wt2, ws2}
                else
                    nw, ws, ks, ex, ls, tag = n2, ws2, ks2, ex2, L2, 'q'
                end
            end
        end

        -- The costs: -k and one cost, or k and each cost.
        local nc = tonumber(ARGV[p])
        local costs, k, c, total = nil, nc, 0, 0
        if nc < 0 then
            k, c = -nc, tonumber(ARGV[p + 1]); p = p + 2
            total = k * c
        else
            costs = {}
            for j = 1, nc do
                costs[j] = tonumber(ARGV[p + j]); total = total + costs[j]
            end
            p = p + nc + 1
        end

        if qa then
            local err, adm, b1, b2, lg = adecide(qa[1], qa[2], qa[3], qa[4],
                qa[5], qa[6], qa[7], qa[8], costs, k, c)
            no = no + 1
            if err then
                e = e or err
                o[no] = ekind(err)
            else
                o[no] = atext('A', qa[1], qa[2], qa[9], qa[6], qa[7], adm, b1,
                    b2, lg)
            end
        else

            -- Add first, correct after (see the top of this file).
            local bef, err, got = {}, qerr, 0
            for j = 1, (qerr and 0 or nw) do
                local n = rpcall('INCRBY', ks[j], total)
                if type(n) ~= 'number' then
                    err = type(n) == 'table' and tostring(n.err) or '?'
                    break
                end
                bef[j], got = n - total, j
            end
            local adm, sum = 0, 0
            if not err then
                local room = nil
                for j = 1, nw do
                    local b = bef[j]
                    if b < 0 then b = 0 end
                    local r = ls[j] - b
                    if r < 0 then r = 0 end
                    if room == nil or r < room then room = r end
                end
                if costs == nil then
                    adm = floor(room / c)
                    if adm > k then adm = k end
                    sum = adm * c
                else
                    for j = 1, k do
                        if costs[j] <= room then
                            adm, sum, room = adm + 1, sum + costs[j], room -
                                costs[j]
                        end
                    end
                end
            end
            for j = 1, got do
                if sum < total then
                    if bef[j] == 0 and sum == 0 then rcall('DEL', ks[j])
                    else rcall('DECRBY', ks[j], total - sum) end
                end
                if bef[j] == 0 and sum > 0 then rcall('PEXPIREAT', ks[j], ex[j]) end
            end
            if err then
                e = e or err
                no = no + 1
                o[no] = ekind(err)
            else
                if tag == '' then
                    no = no + 1; o[no] = adm
                    for j = 1, nw do
                        local b = bef[j]
                        if b > 9e18 then b = 9e18 elseif b < -9e18 then b = -9e18
                            end
                        no = no + 1; o[no] = b
                    end
                else
                    local t, m = {adm, ' ', tag}, 3
                    for j = 1, nw do
                        if tag == 'q' then
                            local l = ls[j]
                            if l >= 1e14 then l = string.format('%.0f', l) end
                            t[m + 1], t[m + 2], t[m + 3], t[m + 4] = ' ', ws[j],
                                ' ', l
                            m = m + 4
                        end
                        local b = bef[j]
                        if b >= 1e14
                            or b <= -1e14 then b = string.format('%.0f', b) end
                        t[m + 1], t[m + 2] = ' ', b
                        m = m + 2
                    end
                    no = no + 1; o[no] = table.concat(t)
                end
            end
        end
    end
end
if e then o[no + 1] = e end
return o
