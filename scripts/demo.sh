#!/usr/bin/env bash
# The two-region demo, from a fresh Debian bookworm machine: install the dependencies, build
# (Release, no tests), then run the two-region experiment in its short form: one dataset on
# an NFS hub behind a 60 ms link, read co-located, remotely without Spoke, through Spoke
# (cold, warm after an agent restart, with hints) and by staging it in first.
# Prints the results table and where the plot is.
#
#   scripts/demo.sh [extra bench/two-region/two_region.py options]
#
# Must run as root: it installs packages, mounts FUSE filesystems and drops the page cache.
# About 10 minutes on 2 cores after the packages are installed: ~5 for the build, ~5 for the
# experiment (measured: 4 min 45 s for --short on a loaded 2-core VM).
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

step "dependencies (scripts/install-deps.sh)"
scripts/install-deps.sh

BUILD=build/demo
step "configure + build ($BUILD, Release)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPOKE_BUILD_TESTS=OFF >/dev/null
ninja -C "$BUILD" spoke-cache-agent spokectl spoke-loader spoke-wan-proxy

step "two-region experiment (bench/two-region/two_region.py --short)"
OUT="$ROOT/bench/two-region/results/demo-$(date -u +%Y%m%dT%H%M%SZ)"
bench/two-region/two_region.py --short --build-dir "$BUILD" --out "$OUT" "$@"

step "done"
echo "results table: $OUT/results.md"
echo "plot:          $OUT/samples-per-s.png"
echo "per scenario:  $OUT/<scenario>.{csv,json,log}"
