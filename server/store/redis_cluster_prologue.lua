#!lua flags=allow-cross-slot-keys
-- The cluster script's prologue (redis_cluster.c sends it followed by
-- redis_script.lua, as one script; redis_script.c joins them).
--
-- The same script, flagged to touch keys of several slots, so that one call
-- can carry every op a master serves. Redis refuses a call whose declared
-- KEYS span slots (CROSSSLOT), flag or not, so such a call declares none:
-- numkeys is 0, ARGV[1] is the number of keys and the keys follow; the
-- prologue puts them back into KEYS and the rest into ARGV. A call that
-- declares its keys (one slot, after a redirection) runs as is. A key this
-- master does not serve (the map was stale, or its slot is migrating) fails
-- its op alone with eNONLOCAL, before that op wrote anything (all of an
-- op's keys share a slot).
local KEYS, ARGV = KEYS, ARGV
if #KEYS == 0 then
    local K, A, nk = {}, {}, tonumber(ARGV[1])
    for i = 1, nk do K[i] = ARGV[i + 1] end
    for i = nk + 2, #ARGV do A[i - nk - 1] = ARGV[i] end
    KEYS, ARGV = K, A
end
