#!/usr/bin/env bash
# rl-fit end to end on a log whose answer is known by construction:
# 1000 callers over two 5-minute periods; in the first, 990 make 10
# requests, 9 make 30 and one makes 100; in the second each makes 5.
# Even callers are logged-in users who all share one address (so keying on
# the address would merge them); odd ones have only their own address.
#   thresholds 10, 20, 30, 50, 100 -> callers refused 10, 10, 1, 1, 0;
#   caller-periods the same; requests refused 270, 170, 70, 50, 0 of 15270.
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
  for (c = 0; c < 1000; c++) peak[c] = c == 0 ? 100 : (c <= 9 ? 30 : 10)
  for (p = 0; p < 2; p++)
    for (k = 0; k < 100; k++)
      for (c = 0; c < 1000; c++) {
        if (p == 0 && k >= peak[c]) continue
        if (p == 1 && k >= 5) continue
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

args=(--thresholds 10,20,30,50,100)
check() { # name output
  local out=$2
  grep -q '^lines 15273  requests 15270  malformed 3  no-key 0  out-of-order 0  dropped 0$' <<<"$out" \
    || fail "$1: counts: $(head -1 <<<"$out")"
  grep -q '^callers 1000  caller-periods 2000 ' <<<"$out" || fail "$1: callers"
  grep -q '^peak use per caller per period: p99 10  p99.9 30  p99.99 100  max 100$' <<<"$out" \
    || fail "$1: peaks: $(grep peak <<<"$out")"
  local want="10 10 10 270
20 10 10 170
30 1 1 70
50 1 1 50
100 0 0 0"
  got=$(awk '$1 ~ /^[0-9]+$/ && NF == 7 { print $1, $2, $4, $6 }' <<<"$out")
  [ "$got" = "$want" ] || fail "$1: table:
$got"
  grep -q '^recommended 100 ' <<<"$out" || fail "$1: $(grep recommended <<<"$out")"
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
grep -q '^recommended 30 ' <<<"$out" || fail "targets: $(grep recommended <<<"$out")"
out=$("$fit" "${args[@]}" --target-users 0 --target-periods 0 --thresholds 10,20 "$dir/log" 2>/dev/null)
grep -q '^recommended none ' <<<"$out" || fail "none: $(grep recommended <<<"$out")"

# Keying on the address alone merges the 500 users behind 10.9.9.9.
out=$("$fit" "${args[@]}" --key addr "$dir/log" 2>/dev/null)
grep -q '^callers 501 ' <<<"$out" || fail "addr key: $(grep ^callers <<<"$out")"

# Two windows: 10 per 300 s and 10 per 3600 s refuse every caller's
# second-period requests too (1000 callers, 10 + 1000 periods).
out=$("$fit" --thresholds 10 --window 300 --window 3600:1 "$dir/log" 2>/dev/null)
awk '$1 == "10" && NF == 7 { exit !($2 == 1000 && $4 == 1010) }' <<<"$out" \
  || fail "two windows: $(grep '^ *10 ' <<<"$out")"
# The sliding-window counter at 100: the 100-request caller's previous
# window still weighs ceil(100 x w / 65536) at 0-4 s into the next, w =
# ceil((300 - e) / 300 x 65536): 100 at 0-3 s, 99 at 4 s, so 4 of its 5
# are refused. A gcra of 100 per 300 s (3 s each, burst 100) refuses
# nothing: the caller's 100 at 1 s apart use 2 s each of its 300 s.
out=$("$fit" "${args[@]}" --algo sliding-window-counter "$dir/log" 2>/dev/null)
awk '$1 == "100" && NF == 7 { exit !($2 == 1 && $6 == 4) }' <<<"$out" \
  || fail "swc at 100: $(grep '^ *100 ' <<<"$out")"
out=$("$fit" "${args[@]}" --algo gcra "$dir/log" 2>/dev/null)
awk '$1 == "100" && NF == 7 { exit !($2 == 0 && $6 == 0) }' <<<"$out" \
  || fail "gcra at 100: $(grep '^ *100 ' <<<"$out")"

# A second file read after the first: its earlier lines run at the latest
# time and are counted as out of order: all but the 1000 at that time.
out=$("$fit" "${args[@]}" "$dir/log" "$dir/log" 2>/dev/null)
grep -q 'out-of-order 14270 ' <<<"$out" || fail "order: $(head -1 <<<"$out")"

# Misuse: a clear error, status 2.
for bad in "--algo sliding-window" "--thresholds 5,3" "--window 0" "--key a|b|c|d|e"; do
  set +e; "$fit" $bad "$dir/log" >/dev/null 2>&1; rc=$?; set -e
  [ $rc = 2 ] || fail "misuse '$bad' gave $rc"
done
echo "ok"
