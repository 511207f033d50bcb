#!/usr/bin/env bash
# The two-region demo, from a fresh Debian bookworm machine: install the dependencies, build
# (Release, no tests), then run the two-region experiment's demo preset: 4000 samples of
# ~110 KB (438 MB) on an NFS hub behind a 60 ms link of 7.2 MB/s, a loader of batch 32,
# 8 workers and 1 s of compute per batch (3.5 MB/s: the link carries about 2x what it reads,
# so a cold cache takes a minute to fill), read directly from the local disk (the baseline),
# remotely without Spoke (a sample of an epoch) and through Spoke (cold cache, 3 epochs).
# Prints the results table (every scenario against the local reads, with the time the
# dataset took to come over the WAN) and where the plot is. `--preset tour` runs every
# scenario (co-located, warm after an agent restart, hints, a cache half the dataset, stage-in)
# on the same dataset over an uncapped link instead.
#
#   scripts/demo.sh [extra bench/two-region/two_region.py options, e.g. --preset tour]
#   SPOKE_DEMO_BUILD=<dir> scripts/demo.sh    (build dir; default build/demo)
#
# Must run as root: it installs packages, mounts FUSE filesystems and drops the page cache.
# About 13 minutes on a fresh 2-core machine: under a minute of packages, ~3.5 for the build
# (less with ccache), ~9.5 for the experiment (five 2-minute epochs, the remote sample, set-up).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh: must run as root (it installs packages, mounts FUSE filesystems and" >&2
  echo "drops the kernel page cache). Try: sudo $0 $*" >&2
  exit 1
fi

start=$SECONDS
step() { printf '\n== %s (%ds)\n' "$*" $((SECONDS - start)); }

step "dependencies (scripts/install-deps.sh --demo)"
scripts/install-deps.sh --demo

BUILD=${SPOKE_DEMO_BUILD:-build/demo}
step "configure + build ($BUILD, Release)"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPOKE_BUILD_TESTS=OFF \
  "${launcher[@]}" >/dev/null
ninja -C "$BUILD" spoke-cache-agent spokectl spoke-loader spoke-wan-proxy

step "two-region experiment (bench/two-region/two_region.py --preset demo $*)"
OUT="$ROOT/bench/two-region/results/demo-$(date -u +%Y%m%dT%H%M%SZ)"
bench/two-region/two_region.py --preset demo --build-dir "$BUILD" --out "$OUT" "$@"

step "done"
echo "results table: $OUT/results.md"
echo "plot:          $OUT/samples-per-s.png"
echo "per scenario:  $OUT/<scenario>.{csv,json,log}"
