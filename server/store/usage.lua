-- The admin endpoint's step on one caller's keys (store/usage.c): one
-- call, so the quota read, the leases counted and the keys cleared are
-- one atomic view of them. KEYS: the keys to clear, then the lease set
-- when ARGV[4] is 1, then the quota hash when ARGV[5] is 1 (all of one
-- tag, so one slot). ARGV: 1 to clear (else only read), the store's
-- clock (ms), the quota's field, the two flags. The reply: the quota (or
-- nil), the leases alive (score after now), the keys cleared.
local n, now = #KEYS, ARGV[2]
local q, lk, alive, cleared = false, nil, 0, 0
if ARGV[5] == '1' then
    q = redis.call('HGET', KEYS[n], ARGV[3])
    n = n - 1
end
if ARGV[4] == '1' then
    lk = KEYS[n]
    alive = redis.call('ZCOUNT', lk, '(' .. now, '+inf')
    n = n - 1
end
if ARGV[1] == '1' then
    for i = 1, n do cleared = cleared + redis.call('DEL', KEYS[i]) end
    if lk then cleared = cleared + redis.call('DEL', lk) end
end
return {q, alive, cleared}
