#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, AddressSanitizer + UBSan) and
# runs each for the given number of seconds (default 60). Corpora live in
# build-fuzz/corpus/<target>; the baidu_std ones start from the frames
# recorded from brpc (../shared/interop). A finding stops its target with the
# crashing input saved as build-fuzz/crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
bash scripts/deps.sh
command -v clang >/dev/null || apt-get install -y clang >/dev/null
CC=clang cmake -S . -B build-fuzz -DJET_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)"
corpus=build-fuzz/corpus
mkdir -p "$corpus"/{baidu_frame,meta,urma_hello,ubring_hello,decompress,pb_nesting}
for f in ../shared/interop/baidu_std/*.bin; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 100000 ] || continue
  n=$(basename "$f")
  { printf '\001\005\040'; cat "$f"; } > "$corpus/baidu_frame/$n"
  ms=$(od -An -tu1 -j8 -N4 "$f" | awk '{print $1*16777216 + $2*65536 + $3*256 + $4}')
  tail -c +13 "$f" | head -c "$ms" > "$corpus/meta/$n"
done
# A Node two levels deep (jettest.Node, test/proto/nest.proto).
printf '\012\004\012\002\030\001' > "$corpus/pb_nesting/chain2"
for t in baidu_frame meta urma_hello ubring_hello decompress pb_nesting; do
  echo "fuzz_$t: ${secs}s"
  (cd build-fuzz && ./fuzz/fuzz_$t -max_total_time="$secs" -max_len=8192 "corpus/$t" 2>&1 | tail -2)
done
