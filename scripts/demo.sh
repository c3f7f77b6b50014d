#!/usr/bin/env bash
# Builds jetrpc and runs the echo demo: a server and a client on this host.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target echo_server echo_client
port=${DEMO_PORT:-18000}
./build/example/echo/echo_server --port="$port" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
./build/example/echo/echo_client --server="127.0.0.1:$port" --attachment=demo --count=5 --interval_ms=100
