#!/usr/bin/env bash
# rl-fit end to end on a log whose answer is known by construction:
# 1000 callers over two 5-minute periods; in the first, 990 make 3
# requests, 9 make 10 and one makes 30; in the second each makes 1.
# Even callers are logged-in users who all share one address (so keying on
# the address would merge them); odd ones have only their own address.
#   thresholds 3, 5, 10, 20, 30 -> callers refused 10, 10, 1, 1, 0;
#   caller-periods the same; requests refused 90, 70, 20, 10, 0 of 4090.
# The same log as combined, gzip and JSON lines must give the same table.
#   test_rl_fit.sh RL_FIT_BINARY
set -euo pipefail
fit=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

t0=1793491200 # 2026-11-01T00:00:00Z, a multiple of 300
awk -v t0=$t0 'BEGIN {
  split("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec", mon, " ")
  for (c = 0; c < 1000; c++) peak[c] = c == 0 ? 30 : (c <= 9 ? 10 : 3)
  for (p = 0; p < 2; p++)
    for (k = 0; k < 30; k++)
      for (c = 0; c < 1000; c++) {
        if (p == 0 && k >= peak[c]) continue
        if (p == 1 && k >= 1) continue
        t = t0 + 300 * p + k
        user = c % 2 == 0 ? "u" c : "-"
        addr = c % 2 == 0 ? "10.9.9.9" : "10.1." int(c / 256) "." c % 256
        # 2026-11-01 + seconds: only the minute and second change
        printf "%s - %s [01/Nov/2026:00:%02d:%02d +0000] \"GET /api HTTP/1.1\" 200 12 \"-\" \"t\"\n",
          addr, user, int((t - t0) / 60), (t - t0) % 60 > "/dev/stdout"
        iso = sprintf("2026-11-01T00:%02d:%02d.250Z", int((t - t0) / 60), (t - t0) % 60)
        uid = c % 2 == 0 ? "\"u" c "\"" : "null"
        printf "{\"ts\":\"%s\",\"user_id\":%s,\"client_ip\":\"%s\",\"tokens\":1,\"x\":{\"a\":[1,2,{\"b\":\"}\"}]}}\n",
          iso, uid, addr > "'"$dir"'/log.json"
      }
}' > "$dir/log"
# malformed lines: garbage, a bad date, an over-long line, bad JSON
{ echo 'garbage'; echo '1.2.3.4 - - [31/Feb/2026:00:00:00 +0000] "GET /"';
  head -c 20000 /dev/zero | tr '\0' a; echo; } >> "$dir/log"
{ echo '{"ts":"2026-11-01T00:09:00Z","user_id":"u1"'; echo '{"ts":1,}'; \
  echo '{"ts":"2026-11-01T00:09:00Z","client_ip":"1.1.1.1","tokens":-1}'; } >> "$dir/log.json"
gzip -c "$dir/log" > "$dir/log.gz"

args=(--thresholds 3,5,10,20,30)
check() { # name output
  local out=$2
  grep -q '^lines 4093  requests 4090  malformed 3  no-key 0  out-of-order 0  dropped 0$' <<<"$out" \
    || fail "$1: counts: $(head -1 <<<"$out")"
  grep -q '^callers 1000  caller-periods 2000 ' <<<"$out" || fail "$1: callers"
  grep -q '^peak use per caller per period: p99 3  p99.9 10  p99.99 30  max 30$' <<<"$out" \
    || fail "$1: peaks: $(grep peak <<<"$out")"
  local want="3 10 10 90
5 10 10 70
10 1 1 20
20 1 1 10
30 0 0 0"
  got=$(awk '$1 ~ /^[0-9]+$/ && NF == 7 { print $1, $2, $4, $6 }' <<<"$out")
  [ "$got" = "$want" ] || fail "$1: table:
$got"
  grep -q '^recommended 30 ' <<<"$out" || fail "$1: $(grep recommended <<<"$out")"
}
out=$("$fit" "${args[@]}" --svg "$dir/plot.svg" "$dir/log" 2>/dev/null)
check combined "$out"
grep -q '<polyline' "$dir/plot.svg" || fail "svg: no polyline"
check gzip "$("$fit" "${args[@]}" "$dir/log.gz" 2>/dev/null)"
json=$("$fit" "${args[@]}" --json-time ts --key 'user_id|client_ip' --json-cost tokens \
  "$dir/log.json" 2>/dev/null)
check json "$json"

# Looser targets move the recommendation to the lowest threshold meeting
# them: 1 of 2000 caller-periods is 0.05 %.
out=$("$fit" "${args[@]}" --target-periods 0.05 "$dir/log" 2>/dev/null)
grep -q '^recommended 10 ' <<<"$out" || fail "targets: $(grep recommended <<<"$out")"
out=$("$fit" "${args[@]}" --target-users 0 --target-periods 0 --thresholds 3,5 "$dir/log" 2>/dev/null)
grep -q '^recommended none ' <<<"$out" || fail "none: $(grep recommended <<<"$out")"

# Keying on the address alone merges the 500 users behind 10.9.9.9.
out=$("$fit" "${args[@]}" --key addr "$dir/log" 2>/dev/null)
grep -q '^callers 501 ' <<<"$out" || fail "addr key: $(grep ^callers <<<"$out")"

# Two windows: 3 per 300 s and 3 per 3600 s refuse every caller's
# second-period request too (1000 callers, 10 + 1000 periods).
out=$("$fit" --thresholds 3 --window 300 --window 3600:1 "$dir/log" 2>/dev/null)
awk '$1 == "3" && NF == 7 { exit !($2 == 1000 && $4 == 1010) }' <<<"$out" \
  || fail "two windows: $(grep '^ *3 ' <<<"$out")"
# The same with the exact sliding window: the 3600 s log still holds the
# first period's 3 entries at t0+300, so the same 1090 requests are refused.
out=$("$fit" --thresholds 3 --window 300 --window 3600:1 --algo sliding-window "$dir/log" 2>/dev/null)
awk '$1 == "3" && NF == 7 { exit !($2 == 1000 && $4 == 1010 && $6 == 1090) }' <<<"$out" \
  || fail "two windows, sliding-window: $(grep '^ *3 ' <<<"$out")"
# The sliding-window counter at 30: the 30-request caller's previous
# window weighs all 30 at 0 s into the next (weight 65536/65536), so its
# one request there is refused. A gcra of 30 per 300 s (10 s each, burst
# 30) refuses nothing: the caller's 30 at 1 s apart use 9 s each of its
# 300 s, and its TAT is 300 s when the next period starts.
out=$("$fit" "${args[@]}" --algo sliding-window-counter "$dir/log" 2>/dev/null)
awk '$1 == "30" && NF == 7 { exit !($2 == 1 && $6 == 1) }' <<<"$out" \
  || fail "swc at 30: $(grep '^ *30 ' <<<"$out")"
out=$("$fit" "${args[@]}" --algo gcra "$dir/log" 2>/dev/null)
awk '$1 == "30" && NF == 7 { exit !($2 == 0 && $6 == 0) }' <<<"$out" \
  || fail "gcra at 30: $(grep '^ *30 ' <<<"$out")"

# The exact sliding window on the same log refuses what the fixed window
# does: the second period's request at t0+300 finds the entry of t0+0 just
# left the window (t + 300 s <= now), so even the 30-request caller has
# 29 in it and room for one more at 30.
check sliding-window "$("$fit" "${args[@]}" --algo sliding-window "$dir/log" 2>/dev/null)"

# A burst straddling a window boundary, one caller, threshold 10 per 60 s
# (t0 is a multiple of 60): 10 requests at t0+50..59 (1 s apart), 10 at
# t0+60..69, one at t0+110.
#   fixed-window: 10 and 10 fit their windows; at 110 the window of 60..119
#     holds 10: refused 1.
#   sliding-window-counter: at e s into the window of 60, the previous 10
#     weigh ceil(10 x ceil((60 - e) x 65536 / 60) / 65536): 10 for e = 0..6
#     (at 6 the weight is 58983, 9.00002 -> 10), so those 7 are refused; 9
#     at e = 7, admitted (9 + 1 <= 10); 9 at e = 8, 9 with the current 1:
#     refused. At 110 (e = 50) 1 + ceil(10 x 10923 / 65536) = 3: admitted.
#     Refused 9.
#   sliding-window: at 60..69 the log holds the 10 of 50..59 (they leave at
#     110..119): all 10 refused; at 110 the entry of 50 has left, 9 + 1
#     fits. Refused 10.
for k in $(seq 50 69) 110; do
  printf '10.7.7.7 - - [01/Nov/2026:00:%02d:%02d +0000] "GET / HTTP/1.1" 200 1 "-" "t"\n' \
    $((k / 60)) $((k % 60))
done > "$dir/burst"
for a in fixed-window:1 sliding-window-counter:9 sliding-window:10; do
  out=$("$fit" --thresholds 10 --window 60 --algo "${a%%:*}" "$dir/burst" 2>/dev/null)
  awk -v want="${a##*:}" '$1 == "10" && NF == 7 { ok = $2 == 1 && $6 == want } END { exit !ok }' <<<"$out" \
    || fail "burst ${a%%:*}: want ${a##*:} refused: $(grep '^ *10 ' <<<"$out")"
done
# Within one millisecond the log merges entries (cost 3 then 7 at one
# time: one entry of 10), and an entry leaves whole: at t0+60 the 10 leave
# together, so 10 more fit and the 11th of that instant does not.
{ for i in 1 2; do echo '{"time":"2026-11-01T00:00:00.500Z","u":"a","c":'$((i * 4 - 1))'}'; done
  for i in $(seq 11); do echo '{"time":"2026-11-01T00:01:00.500Z","u":"a","c":1}'; done; } > "$dir/merge.json"
out=$("$fit" --thresholds 10 --window 60 --algo sliding-window --key u --json-cost c "$dir/merge.json" 2>/dev/null)
awk '$1 == "10" && NF == 7 { ok = $6 == 1 } END { exit !ok }' <<<"$out" \
  || fail "merge: $(grep '^ *10 ' <<<"$out")"

# The logs' cap: 20000 callers with one request each in one window, 5
# thresholds: 100000 logs of 72 bytes (7 MB), none can be swept. With
# --max-log-mb 1 rl-fit stops, status 1, saying what it needs.
awk 'BEGIN { for (c = 0; c < 20000; c++)
  printf "10.%d.%d.1 - - [01/Nov/2026:00:00:01 +0000] \"GET /\" 200 1 \"-\" \"t\"\n", c / 256, c % 256 }' > "$dir/many"
set +e; err=$("$fit" "${args[@]}" --algo sliding-window --max-log-mb 1 "$dir/many" 2>&1 >/dev/null); rc=$?; set -e
[ $rc = 1 ] && grep -q 'need more than --max-log-mb 1 at line [0-9]* .* need up to [0-9]* MB' <<<"$err" \
  || fail "log cap: $rc $err"
out=$("$fit" "${args[@]}" --algo sliding-window --max-log-mb 16 "$dir/many" 2>/dev/null)
grep -q '^callers 20000 ' <<<"$out" || fail "log cap 16: $(grep ^callers <<<"$out")"
# The same 20000 callers one second apart with a 60 s window: a log
# whose entry left the window is freed when the cap is reached (a sweep of
# every caller), so 1 MB is enough: about 60 callers' logs are live.
awk 'BEGIN { for (c = 0; c < 20000; c++)
  printf "10.%d.%d.1 - - [01/Nov/2026:%02d:%02d:%02d +0000] \"GET /\" 200 1 \"-\" \"t\"\n",
    c / 256, c % 256, c / 3600, c / 60 % 60, c % 60 }' > "$dir/spread"
out=$("$fit" "${args[@]}" --window 60 --algo sliding-window --max-log-mb 1 "$dir/spread" 2>/dev/null) \
  || fail "sweep: status $?"
grep -q '^callers 20000 ' <<<"$out" || fail "sweep: $(grep ^callers <<<"$out")"

# At most 10 callers held: the first 10 seen (callers 0-9, 31 + 9 x 11 =
# 130 requests) are simulated, the other callers' lines counted as dropped.
out=$("$fit" "${args[@]}" --max-users 10 "$dir/log" 2>/dev/null)
grep -q '^lines 4093  requests 130  malformed 3  no-key 0  out-of-order 0  dropped 3960$' <<<"$out" \
  || fail "max-users: $(head -1 <<<"$out")"

# A second file read after the first: its earlier lines run at the latest
# time and are counted as out of order: all but the 1000 at that time.
out=$("$fit" "${args[@]}" "$dir/log" "$dir/log" 2>/dev/null)
grep -q 'out-of-order 3090 ' <<<"$out" || fail "order: $(head -1 <<<"$out")"

# A truncated gzip file: what it held is counted, status 1. Random bytes:
# every line malformed, nothing else.
head -c 10000 "$dir/log.gz" > "$dir/trunc.gz"
set +e; out=$("$fit" "$dir/trunc.gz" 2>/dev/null); rc=$?; set -e
[ $rc = 1 ] && grep -q '^lines [1-9]' <<<"$out" || fail "truncated: $rc $out"
head -c 65536 /dev/urandom > "$dir/random"
out=$("$fit" "$dir/random" 2>/dev/null)
grep -Eq '^lines ([0-9]+)  requests 0  malformed \1 ' <<<"$out" || fail "random: $(head -1 <<<"$out")"

# Misuse: a clear error, status 2.
for bad in "--algo sliding-window --thresholds 1000001" "--algo sliding-window --max-log-mb 0" "--algo swl2" "--thresholds 5,3" "--format combined --key user_id"; do
  set +e; "$fit" $bad "$dir/log" >/dev/null 2>&1; rc=$?; set -e
  [ $rc = 2 ] || fail "misuse '$bad' gave $rc"
done
echo "ok"
