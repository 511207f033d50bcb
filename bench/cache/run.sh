#!/usr/bin/env bash
# Spoke cache benchmark: reads through a Spoke mount (cold over a 60 ms RTT, cold at 0 ms,
# warm from the block cache) against the same files read directly and through libfuse's
# passthrough_ll example. Drops the kernel page cache before every measured pass.
#
#   bench/cache/run.sh [BUILD_DIR]          (root; BUILD_DIR defaults to build-agent)
#
# Environment: LARGE_MIB (1024), SMALL_COUNT (4000), SMALL_KB (110), SMALL_READERS (8),
#              RTT_MS (60), REPS (3), KEEP=1 keeps the work directory.
# The warm and passthrough_ll passes alternate REPS times (after the cold passes, once the
# agent is idle) and the table gives their medians: one pass on a shared 2-core machine
# moves by +-30%.
# Writes bench/cache/results/RESULTS.md (not committed; current figures go to bench/RESULTS.md)
# and prints the same table.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/results"
table_file="$here/results/RESULTS.md"
src=$(cd "$here/../.." && pwd)
. "$src/e2e/lib/common.sh"
build=$(cd "${1:-$src/build-agent}" && pwd)
LARGE_MIB=${LARGE_MIB:-1024}
SMALL_COUNT=${SMALL_COUNT:-4000}
SMALL_KB=${SMALL_KB:-110}
SMALL_READERS=${SMALL_READERS:-8}
RTT_MS=${RTT_MS:-60}
REPS=${REPS:-3}

agent_bin=$build/cache-agent/agent/spoke-cache-agent
ctl_bin=$build/cache-agent/cli/spokectl
proxy_bin=$build/e2e/wan-proxy/spoke-wan-proxy
for b in "$agent_bin" "$ctl_bin" "$proxy_bin"; do
  [ -x "$b" ] || { echo "missing $b: ninja -C $build spoke-cache-agent spokectl spoke-wan-proxy" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (FUSE mounts, drop_caches)" >&2; exit 1; }

work=$(mktemp -d /var/tmp/spoke-bench-cache.XXXXXX)
pids=()
mounts=()
cleanup() {
  set +e
  for m in "${mounts[@]}"; do
    "$ctl_bin" --socket "$work/agent.sock" unmount "$m" >/dev/null 2>&1
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  for p in "${pids[@]}"; do spoke_stop_pid "$p"; done
  "$src/scripts/spoke-hub" stop "$work/hub" >/dev/null 2>&1
  [ "${KEEP:-0}" = 1 ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT

echo "== building the reader and passthrough_ll"
g++ -O2 -std=c++17 -pthread -o "$work/reader" "$here/reader.cc"
ex=/usr/share/doc/libfuse3-dev/examples
pt_src=$ex/passthrough_ll.c
if [ ! -f "$pt_src" ] && [ -f "$pt_src.gz" ]; then
  gunzip -c "$pt_src.gz" > "$work/passthrough_ll.c"; pt_src=$work/passthrough_ll.c
fi
# shellcheck disable=SC2046
gcc -O2 -Wall -I"$ex" -o "$work/passthrough_ll" "$pt_src" $(pkg-config --cflags --libs fuse3)

echo "== hub and data (${LARGE_MIB} MiB file, ${SMALL_COUNT} x ${SMALL_KB} KB files)"
eval "$("$src/scripts/spoke-hub" start "$work/hub" | tail -1)"  # NFS_PORT MOUNT_PORT EXPORT
mkdir -p "$EXPORT/large" "$EXPORT/small"
dd if=/dev/urandom of="$EXPORT/large/big.bin" bs=1M count="$LARGE_MIB" status=none
python3 - "$EXPORT/small" "$SMALL_COUNT" "$SMALL_KB" <<'PY'
import os, sys
d, n, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
blob = os.urandom(kb * 1000 + 4096)
for i in range(n):
    sub = os.path.join(d, "d%03d" % (i // 500))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%06d.jpg" % i), "wb") as f:
        f.write(blob[i % 4096:i % 4096 + kb * 1000])
PY
sync

echo "== WAN proxy (${RTT_MS} ms RTT), agent"
wan_nfs=$(spoke_free_port); wan_mnt=$(spoke_free_port)
"$proxy_bin" --delay-ms $((RTT_MS / 2)) --route "127.0.0.1:$wan_nfs=127.0.0.1:$NFS_PORT" \
  --route "127.0.0.1:$wan_mnt=127.0.0.1:$MOUNT_PORT" > "$work/proxy.log" 2>&1 &
pids+=($!)
# The block cache stores whole 1 MiB slots: each small file takes one. Two mounts (WAN, LAN).
cache_gib=$(( (LARGE_MIB + SMALL_COUNT) * 2 / 1024 + 2 ))
spoke_agent_config "$work" "${cache_gib}Gi" > "$work/agent.yaml"
rc=0
spoke_start_agent "$agent_bin" "$work/agent.yaml" "$work/agent.log" 20 || rc=$?
pids+=("$SPOKE_PID")
[ $rc -eq 0 ] || { echo "the agent did not start" >&2; exit 1; }
ctl() { "$ctl_bin" --socket "$work/agent.sock" "$@"; }
sleep 0.5

mkdir -p "$work/wan" "$work/lan" "$work/pt"
ctl mount "nfs://127.0.0.1$EXPORT?nfsport=$wan_nfs&mountport=$wan_mnt" "$work/wan" >/dev/null
mounts+=("$work/wan")
ctl mount "nfs://127.0.0.1$EXPORT?nfsport=$NFS_PORT&mountport=$MOUNT_PORT" "$work/lan" >/dev/null
mounts+=("$work/lan")
"$work/passthrough_ll" -f -o source="$EXPORT" "$work/pt" > "$work/pt.log" 2>&1 &
pids+=($!)
mounts+=("$work/pt")
for _ in $(seq 50); do mountpoint -q "$work/pt" && break; sleep 0.1; done

list() { # ROOT KIND -> list file
  local out=$work/list-$2-$(basename "$1")
  if [ "$2" = large ]; then echo "$1/large/big.bin" > "$out"
  else (cd "$EXPORT" && find small -type f | sort | sed "s|^|$1/|") > "$out"; fi
  echo "$out"
}
metrics_url=http://$(sed -n 's/^metricsAddress: //p' "$work/agent.yaml")/metrics
# Waits (at most 60 s) until the agent's hub reads and cache size stop moving for 2 s: warm
# passes measure reads from the cache, not reads competing with background prefetching.
agent_idle() {
  local last="" now same=0
  for _ in $(seq 120); do
    now=$(curl -s "$metrics_url" | grep -E '^spoke_(hub_read_bytes_total|cache_bytes)' | md5sum)
    if [ "$now" = "$last" ]; then same=$((same + 1)); [ $same -ge 4 ] && return 0; else same=0; fi
    last=$now; sleep 0.5
  done
  echo "  (the agent was still busy after 60 s)"
}
declare -A mbps
median() { python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
measure() { # NAME KIND ROOT
  local threads=1 buf=$((1 << 20))
  [ "$2" = small ] && threads=$SMALL_READERS
  local l; l=$(list "$3" "$2")
  sync; echo 3 > /proc/sys/vm/drop_caches
  local out; out=$("$work/reader" "$threads" "$buf" "$l")
  local v; v=$(sed -n 's/.*mbps=\([0-9.]*\).*/\1/p' <<< "$out")
  mbps[$1,$2]=$v
  printf '  %-14s %-6s %10s MB/s   (%s)\n' "$1" "$2" "$v" "$out"
}

echo "== passes"
for kind in large small; do
  measure source "$kind" "$EXPORT"
  ctl evict "$work/wan" >/dev/null; ctl evict "$work/lan" >/dev/null
  measure "cold ${RTT_MS}ms" "$kind" "$work/wan"
  measure "cold 0ms" "$kind" "$work/lan"
  agent_idle  # the cold passes' prefetches and stores have ended
  warm=() pt=()
  for r in $(seq "$REPS"); do
    measure "warm $r" "$kind" "$work/wan"; warm+=("${mbps[warm $r,$kind]}")
    measure "passthrough_ll $r" "$kind" "$work/pt"; pt+=("${mbps[passthrough_ll $r,$kind]}")
  done
  mbps[warm,$kind]=$(median "${warm[@]}")
  mbps[passthrough_ll,$kind]=$(median "${pt[@]}")
  mbps[warm runs,$kind]=${warm[*]}
  mbps[passthrough_ll runs,$kind]=${pt[*]}
done
ctl stats "$work/wan" > "$work/stats.txt" || true

ratio() { python3 -c "import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print('%.2f' % (a/b if b else 0))" "$1" "$2"; }
{
  echo "# Spoke cache benchmark"
  echo
  echo "\`bench/cache/run.sh\` on $(hostname), $(date -u +%Y-%m-%dT%H:%MZ), kernel $(uname -r), $(nproc) cores."
  echo "Large: one ${LARGE_MIB} MiB file, 1 reader, 1 MiB reads. Small: ${SMALL_COUNT} files of ${SMALL_KB} KB,"
  echo "${SMALL_READERS} readers. Kernel page cache dropped before every pass. Hub: nfs-ganesha (NFSv3) on"
  echo "loopback; WAN: spoke-wan-proxy with $((RTT_MS / 2)) ms each way."
  echo
  echo "| pass | large MB/s | small MB/s |"
  echo "|---|---:|---:|"
  for p in source "cold ${RTT_MS}ms" "cold 0ms"; do
    echo "| $p | ${mbps[$p,large]} | ${mbps[$p,small]} |"
  done
  for p in passthrough_ll warm; do
    echo "| $p (median of $REPS: ${mbps[$p runs,large]} / ${mbps[$p runs,small]}) | ${mbps[$p,large]} | ${mbps[$p,small]} |"
  done
  echo
  echo "| ratio | large | small | target |"
  echo "|---|---:|---:|---|"
  echo "| warm / passthrough_ll | $(ratio "${mbps[warm,large]}" "${mbps[passthrough_ll,large]}") | $(ratio "${mbps[warm,small]}" "${mbps[passthrough_ll,small]}") | >= 1.0 (issue 16) |"
  echo "| cold ${RTT_MS}ms / cold 0ms | $(ratio "${mbps[cold ${RTT_MS}ms,large]}" "${mbps[cold 0ms,large]}") | $(ratio "${mbps[cold ${RTT_MS}ms,small]}" "${mbps[cold 0ms,small]}") | large >= 0.5 |"
  echo
  echo "spokectl stats after the passes (WAN mount):"
  echo
  echo '```'
  cat "$work/stats.txt"
  echo '```'
} > "$table_file"
echo
cat "$table_file"
