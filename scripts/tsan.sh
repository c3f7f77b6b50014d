#!/usr/bin/env bash
# Builds jetrpc with ThreadSanitizer and runs every test under it, one at a
# time (instrumented code runs several times slower; concurrent tests on a
# small machine would then miss their handshake deadlines). Not part of
# scripts/test.sh: it takes about ten minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJET_TSAN=ON -DJET_TEST_TIMEOUT=1200 >/dev/null
cmake --build build-tsan -j"$(nproc)"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --test-dir build-tsan --output-on-failure
