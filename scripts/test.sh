#!/usr/bin/env bash
# The README's test command: installs what is missing, then four trees, each built with
# warnings as errors:
#  - plain gcc: every binary and non-unit test; runs integration (nfs-ganesha + FUSE + io_uring),
#    e2e, csi-sanity, chart, soak and Kubernetes tests (e2e/k8s one node, e2e/kind three nodes);
#  - gcc ASan + UBSan: every test and the binaries they start; runs the unit and integration
#    tests and the fault soak;
#  - clang 19 ThreadSanitizer with -Wthread-safety (the lock annotations are checked): the
#    libraries and unit tests; runs the unit tests;
#  - clang 19 ASan + UBSan + libFuzzer: the fuzz harnesses only, each run for a bounded time.
# Ends with ctest's summary and a table of minutes per stage.
#   scripts/test.sh [--no-sanitize] [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
if [ "${1:-}" = "--no-sanitize" ]; then sanitize=0; shift; fi

# Where the time goes: each stage's minutes, printed at the end (also on failure).
stage_start=$SECONDS
stages=()
stage() { # name: closes the stage that ran since the last call
  stages+=("$(printf '%-46s %5.1f min' "$1" "$(awk "BEGIN { print ($SECONDS - $stage_start) / 60 }")")")
  stage_start=$SECONDS
}
report() {
  echo "== test.sh stages"
  printf '%s\n' "${stages[@]}"
  printf '%-46s %5.1f min\n' "total" "$(awk "BEGIN { print $SECONDS / 60 }")"
}
trap report EXIT

scripts/install-deps.sh
stage "install-deps"
export PATH=/usr/local/bin:$PATH
jobs=$(nproc)

# Line tables only (-g1): sanitizer reports and backtraces keep file:line, and each tree
# compiles about a quarter faster than with full debug info (55 s -> 41 s for the FUSE mount
# test under ASan; objects 16 -> 7 MB), which keeps the run under an hour on 2 cores.
# ccache (install-deps) makes a second run of the suite on one machine rebuild only what changed.
# Paths under the checkout are hashed relative to each tree, and the tree's own directory is
# left out of the hash (it only reaches the debug info's compile directory), so objects whose
# flags match across trees (the generated protobuf code, plain in every tree) compile once.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi
build() { # dir "ninja targets (empty: all)" extra-cmake-args...
  local dir=$1 targets=$2; shift 2
  cmake -S . -B "$dir" -G Ninja -DSPOKE_WERROR=ON -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" "${launcher[@]}" "$@" >/dev/null
  # shellcheck disable=SC2086 # targets is a word list
  ninja -C "$dir" -j"$jobs" $targets
}

# The sanitizer and clang trees build in the background at the lowest CPU priority while the
# tests of the tree before them run: those tests mostly wait (WAN delays, hub restarts,
# Kubernetes start-up), and a nice 19 build takes only the CPU they leave.
bg_build() { # log dir "targets" extra-cmake-args...: starts the build; its pid in $bg_pid
  local log=$1; shift
  (renice -n 19 -p $BASHPID >/dev/null; build "$@") >"$log" 2>&1 &
  bg_pid=$!
}
wait_build() { # pid log name: waits for a background build; false (log shown) if it failed
  local pid=$1 log=$2 name=$3
  if wait "$pid"; then return 0; fi
  echo "test.sh: the $name build failed:" >&2
  tail -n 60 "$log" >&2
  return 1
}

# The plain tree builds every binary and every test but the unit tests, and runs every label
# but `unit`: the unit tests run in the ASan and TSan trees (gcc and clang, both -Werror), where
# they find what a plain run finds and more. A unit test not built here shows in ctest as
# NAME_NOT_BUILT without a label; -E leaves those out.
build build/ci spoke_all_but_unit_tests -DCMAKE_BUILD_TYPE=RelWithDebInfo
stage "build (gcc, -Werror; no unit tests)"
status=0
mkdir -p build
if [ $sanitize -eq 1 ]; then
  # -O2: sanitizer checks stay, and the FUSE/WAN integration tests finish in time.
  bg_build build/asan-build.log build/asan spoke_sanitized_suite -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSPOKE_SANITIZE=ON
  asan_pid=$bg_pid
fi
(cd build/ci && ctest --output-on-failure -j2 --timeout 900 -LE '^unit$' -E '_NOT_BUILT' "$@") ||
  status=$?
stage "ctest: all but unit (+ ASan build behind)"

# ThreadSanitizer on the unit tests, in a clang tree that also checks -Wthread-safety with
# -Werror (a member read without its lock fails the build). spoke_unit_tests is every library
# and every unit-test executable: no binary, no integration test (those need root and real
# servers, and their main()s carry no lock annotations). scripts/tsan.supp: reports inside
# Debian's uninstrumented gRPC, which TSan cannot see order anything (the file says what that
# hides). llvm-symbolizer-19 (install-deps) names the frames the suppressions match.
tsan_build() {
  bg_build build/tsan-build.log build/tsan spoke_unit_tests -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DSPOKE_TSAN=ON
  tsan_pid=$bg_pid
}

if [ $sanitize -eq 1 ]; then
  asan_ok=1
  wait_build "$asan_pid" build/asan-build.log "ASan + UBSan" || { status=1; asan_ok=0; }
  stage "waiting for the ASan build"
  tsan_build
  if [ $asan_ok -eq 1 ]; then
    # ASan cannot run under csi-sanity's timing or the chart tests' tools: unit + integration,
    # and the fault soak (its agent, keeper and FUSE mounts under ASan).
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
    (cd build/asan && ctest --output-on-failure -j2 --timeout 900 -L 'unit|integration|soak' -E '^csi_sanity' "$@") ||
      status=$?
  fi
  stage "ctest under ASan (+ TSan build behind)"
else
  tsan_build
fi

# Fuzzing: each libFuzzer harness for a bounded time from its corpus in fuzz/corpus/, under ASan
# + UBSan. A tree of its own because ASan and TSan exclude each other, and the harnesses are
# single-threaded parsers: TSan finds nothing there, ASan finds their bugs. Only the harnesses
# and the libraries they reach are built (83 build steps of the 147 of a full tree).
tsan_ok=1
wait_build "$tsan_pid" build/tsan-build.log "ThreadSanitizer" || { status=1; tsan_ok=0; }
stage "waiting for the TSan build"
bg_build build/fuzz-build.log build/fuzz spoke_fuzzers -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DSPOKE_FUZZ=ON -DSPOKE_BUILD_TESTS=OFF
fuzz_pid=$bg_pid
if [ $tsan_ok -eq 1 ]; then
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
  (cd build/tsan && ctest --output-on-failure -j2 --timeout 900 -L unit "$@") || status=$?
fi
stage "ctest under TSan (unit; + fuzz build behind)"
if wait_build "$fuzz_pid" build/fuzz-build.log "fuzzer"; then
  stage "waiting for the fuzz build"
  # Each harness is one single-threaded process for a fixed time: two at once on 2 cores.
  (cd build/fuzz && ctest --output-on-failure -j2 -L fuzz) || status=$?
else
  status=1
fi
stage "fuzzing"
exit $status
