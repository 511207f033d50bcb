#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with warnings as errors, runs
# every test under ctest (unit, integration against nfs-ganesha + FUSE + io_uring, e2e,
# csi-sanity, chart tests), then builds again with ASan + UBSan and runs the unit and
# integration tests there too, and once more with clang: ThreadSanitizer plus the
# -Wthread-safety check of the lock annotations (as errors), running the unit tests under TSan.
# Ends with ctest's summary.
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

  # One clang build for two checks: -Wthread-safety (with -Werror, so a member read without
  # its lock fails the build) and ThreadSanitizer on the unit tests. Same clang as the fuzz
  # build. scripts/tsan.supp silences reports inside third-party code only.
  clang_cc=$(command -v clang-19 || command -v clang || true)
  clang_cxx=$(command -v clang++-19 || command -v clang++ || true)
  if [ -z "$clang_cc" ] || [ -z "$clang_cxx" ]; then
    echo "test.sh: no clang for the TSan/-Wthread-safety build (Debian package clang-19)" >&2
    status=1
  else
    build build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOKE_TSAN=ON \
      -DCMAKE_C_COMPILER="$clang_cc" -DCMAKE_CXX_COMPILER="$clang_cxx"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
    (cd build/tsan && ctest --output-on-failure -j2 --timeout 900 -L unit "$@") || status=$?
  fi
fi
exit $status
