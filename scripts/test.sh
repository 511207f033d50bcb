#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with warnings as errors, runs
# every test under ctest (unit, integration against nfs-ganesha + FUSE + io_uring, e2e,
# csi-sanity, chart tests), then builds again with ASan + UBSan and runs the unit and
# integration tests there too, and last builds with clang 19 (-Wthread-safety as errors: the
# lock annotations are checked) and runs the libFuzzer harnesses for a bounded time each
# (ctest -L fuzz). Ends with ctest's summary.
#   scripts/test.sh [--no-sanitize] [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
if [ "${1:-}" = "--no-sanitize" ]; then sanitize=0; shift; fi

scripts/install-deps.sh
export PATH=/usr/local/bin:$PATH
jobs=$(nproc)

build() { # dir extra-cmake-args...
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DSPOKE_WERROR=ON "$@" >/dev/null
  ninja -C "$dir" -j"$jobs"
}

build build/ci -DCMAKE_BUILD_TYPE=RelWithDebInfo
status=0
(cd build/ci && ctest --output-on-failure -j2 --timeout 900 "$@") || status=$?

if [ $sanitize -eq 1 ]; then
  # -O2: sanitizer checks stay, and the FUSE/WAN integration tests finish in time.
  build build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOKE_SANITIZE=ON
  # ASan cannot run under csi-sanity's timing or the chart tests' tools: unit + integration.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
  (cd build/asan && ctest --output-on-failure -j2 --timeout 900 -L 'unit|integration' "$@") || status=$?
fi

# One clang build for two checks: -Wthread-safety with -Werror (a member read without its lock
# fails the build; every library and binary is compiled), and fuzzing: each libFuzzer harness
# for a bounded time from its corpus in fuzz/corpus/.
build build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 \
  -DCMAKE_CXX_COMPILER=clang++-19 -DSPOKE_FUZZ=ON -DSPOKE_THREAD_SAFETY=ON -DSPOKE_BUILD_TESTS=OFF
(cd build/fuzz && ctest --output-on-failure -L fuzz) || status=$?
exit $status
