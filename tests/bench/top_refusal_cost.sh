#!/bin/bash
# Instructions per refused decision, with and without the top-offenders
# sketch: rl-server (memory store) under callgrind, rl-bench sending
# requests of which all but one a key are refused.
B=${BUILD:-build-rel}
K=$1; N=${2:-100000}; KEYS=${3:-1000}
rm -f ports.$K cg.$K
valgrind --tool=callgrind --callgrind-out-file=cg.$K $B/server/rl-server --listen 127.0.0.1:0 --rule deny=1/1h --top-k $K --port-file ports.$K 2>vg.$K.log &
P=$!
for i in $(seq 200); do [ -s ports.$K ] && break; sleep 0.1; done
L=$(awk '/^listen/{print $2}' ports.$K)
$B/tools/bench/rl-bench --server $L --rule deny --keys $KEYS --requests $N --connections 2 --inflight 64 --duration 600 > bench.$K.out 2>&1
kill -TERM $P; wait $P
