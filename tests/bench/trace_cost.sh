#!/usr/bin/env bash
# What --trace-otlp costs a decision, in callgrind instructions (memory
# store, native requests, which carry no traceparent: roots):
#
#   tests/bench/trace_cost.sh [REQUESTS]
#
# Runs tests/bench/callgrind.sh three times: tracing off; on at
# --trace-sample 0 (the cost of asking, per decision); on at 1 (every
# decision a span, encoded and posted to a sink on loopback that answers
# 200 and keeps nothing). Prints instructions per decision for each. The
# sink is a Python HTTP server this script starts and stops by its pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-50000}
sinkdir=$(mktemp -d /tmp/rl-trace-sink.XXXXXX)
/usr/bin/python3 - "$sinkdir/port" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
s = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1] + ".new", "w") as f:
    f.write("%d\n" % s.server_address[1])
import os; os.rename(sys.argv[1] + ".new", sys.argv[1])
s.serve_forever()
PY
sink=$!
trap 'kill "$sink" 2>/dev/null; rm -rf "$sinkdir"' EXIT
while [ ! -s "$sinkdir/port" ]; do sleep 0.05; done
port=$(cat "$sinkdir/port")
url="http://127.0.0.1:$port/v1/traces"
for mode in off 0 1; do
  if [ "$mode" = off ]; then
    extra=""
  else
    extra="--trace-otlp $url --trace-sample $mode --trace-flush-ms 200"
  fi
  line=$(RL_SERVER_EXTRA="$extra" tests/bench/callgrind.sh memory uniform \
    "$n" | sed -n "s/^store /store /p")
  echo "tracing $mode: $line"
done
