#!/usr/bin/env bash
# Builds jetrpc and softub (the software URMA provider) and runs the echo
# demo over URMA, then example/urma_performance (brpc's rdma_performance:
# latency percentiles, QPS, MB/s, CPU) for a few seconds over the same
# transport: servers and clients on this host, all with
# --socket_mode=urma, finding softub as liburma.so.0 through LD_LIBRARY_PATH
# (build/softub/lib), on a softub fabric of their own (SOFTUB_FABRIC). The
# client's log says which transport the connection used; without URMA
# (softub not built, or a library without the URMA transport) the same
# commands run over TCP, as the fallback rules say.
#
# Usage: bash scripts/demo.sh
#        DEMO_PORT=19000 bash scripts/demo.sh
# DEMO_PORT (default 18000) is the TCP port of the echo server; the
# urma_performance server listens on DEMO_PORT + 1. Both listen on every
# address (0.0.0.0) and are called on 127.0.0.1. Set it when 18000 or 18001
# is taken.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target echo_server echo_client urma_perf_server urma_perf_client
# softub is optional: without it URMA is unavailable and the demo runs TCP.
cmake --build build -j"$(nproc)" --target softub >/dev/null 2>&1 ||
  echo "demo: softub did not build; URMA will be unavailable (TCP fallback)"

port=${DEMO_PORT:-18000}
export LD_LIBRARY_PATH="$PWD/build/softub/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SOFTUB_FABRIC="jetrpc-demo-$$"
logdir=$(mktemp -d)
srv=
cleanup() {
  if [ -n "$srv" ]; then kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null || true; fi
  rm -rf "$logdir"
}
trap cleanup EXIT

# Starts the server in mode $1 (the echo server, or the program $2 with
# its arguments); 0 once its port accepts connections.
start_server() {
  local mode=$1
  shift
  "${@:-./build/example/echo/echo_server}" --port="$port" --socket_mode="$mode" \
    >"$logdir/server.out" 2>"$logdir/server.log" &
  srv=$!
  for _ in $(seq 50); do
    kill -0 "$srv" 2>/dev/null || break
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  cat "$logdir/server.out" "$logdir/server.log" >&2
  kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null || true
  srv=
  return 1
}

mode=urma
rc=0
if ! start_server urma; then
  echo "demo: the server cannot run --socket_mode=urma; running the demo over TCP"
  mode=tcp
  start_server tcp
fi
cat "$logdir/server.out"
# log_level 0 makes the client log the outcome of the URMA handshake.
./build/example/echo/echo_client --server="127.0.0.1:$port" --socket_mode="$mode" \
  --log_level=0 --attachment=demo --count=5 --interval_ms=100 \
  2>"$logdir/client.log" || rc=$?
grep -E "URMA|TCP" "$logdir/client.log" "$logdir/server.log" | sed 's/^[^:]*\/\([a-z]*\)\.log:/[\1] /' || true
if grep -q "URMA established" "$logdir/client.log"; then
  echo "demo: the calls went over URMA (softub fabric $SOFTUB_FABRIC)"
else
  echo "demo: the calls went over TCP"
fi
[ "$rc" -eq 0 ] || exit "$rc"

# The performance example: 4 connections x 4 calls in flight, 4 KiB
# attachments echoed back, on the transport the echo used.
kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null || true
srv=
port=$((port + 1))
echo
echo "demo: example/urma_performance over $mode"
start_server "$mode" ./build/example/urma_performance/urma_perf_server
./build/example/urma_performance/urma_perf_client --server="127.0.0.1:$port" \
  --socket_mode="$mode" --thread_num=4 --queue_depth=4 --attachment_size=4096 \
  --echo_attachment=true --test_seconds=3 2>"$logdir/perf.log" || rc=$?
[ "$rc" -eq 0 ] || cat "$logdir/perf.log" >&2
exit $rc
