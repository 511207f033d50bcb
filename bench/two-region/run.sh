#!/usr/bin/env bash
# The two-region experiment (issue 6) in one command: one generated dataset on an NFS hub
# (nfs-ganesha on loopback), a 60 ms WAN (spoke-wan-proxy, 30 ms each way), and these
# scenarios, each with a fresh agent (own cacheDir, stateDir, socket, metrics port):
#
#   co-located       Spoke mounting the hub directly (no WAN delay), cache + prefetch on
#   remote-no-spoke  through the WAN, prefetch off, strict consistency (close-to-open, no page
#                    cache), and the smallest cache the agent accepts (64 blocks = 64 MiB:
#                    the agent has no per-mount "cache off")
#   spoke-cold       through the WAN, Spoke on, empty cache, several epochs
#   spoke-warm       the agent restarted on spoke-cold's cache (mount restored from its
#                    stateDir): the cache survives restarts
#   stage-in         copy the dataset over the WAN to local disk first (8 parallel cp streams
#                    through a Spoke mount with prefetch off), then train from the copy
#   spoke-hints      through the WAN, empty cache, the loader disclosing each epoch's order
#                    (<mount>/.spoke-hints when the agent serves it, else `spokectl hint`
#                    fed from a FIFO the loader writes each epoch's order to)
#
# Then plot.gp -> samples-per-s.png and summarize.py -> results.md (+ the targets).
# Needs root (FUSE mounts, /proc/sys/vm/drop_caches). Cleans up everything it started (by
# pid), even on failure or Ctrl-C.
#
#   bench/two-region/run.sh [--short] [--workload report|resnet50|unet3d|shards]
#       [--samples N] [--epochs E] [--out DIR] [--build-dir DIR] [--cache-fraction F]
#       [--scenarios LIST] [--delay-ms D] [--work DIR] [--keep]
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

usage() {
  cat >&2 <<'EOF'
usage: bench/two-region/run.sh [options]
  --short               a quick run (small dataset, see below); the demo uses it
  --workload W          report (default) | resnet50 | unet3d | shards (bench/loader presets)
  --samples N           dataset size in samples (default: short / full per workload)
  --epochs E            epochs for co-located, spoke-cold, stage-in, spoke-hints (default 3)
  --warm-epochs E       epochs of spoke-warm (default 2; 0 skips it)
  --nospoke-epochs E    epochs of remote-no-spoke (default: 1 with --short, else --epochs)
  --cache-fraction F    Spoke cache size = F x dataset size (default 2: the dataset fits;
                        e.g. 0.5 for a dataset twice the cache). Floor: 64 MiB (agent minimum)
  --cache-basis B       bytes (default): "dataset size" = the files' total size (the cache's
                        quota counts bytes stored since 5b2f311); footprint: every file rounded
                        up to whole 1 MiB blocks (what an agent before 5b2f311 needs: its block
                        store charged a full slot per block, 1 MiB for a 110 KB sample)
  --eviction-policy P   the agents' evictionPolicy (default lru; nothrash for datasets larger
                        than the cache)
  --scenarios LIST      comma-separated subset (default: all, in the order above)
  --delay-ms D          one-way WAN delay (default 30 = 60 ms RTT)
  --stage-streams N     parallel cp streams of stage-in (default 8)
  --out DIR             results (default bench/two-region/results/<workload>-<UTC time>)
  --build-dir DIR       where the binaries are (default build)
  --work DIR            scratch: hub export, caches, mounts (default /var/tmp/spoke-2r.PID)
  --keep                keep the work dir
EOF
  exit 2
}

CACHE_BASIS=bytes EVICTION=lru
SHORT=0 WORKLOAD=report SAMPLES="" EPOCHS=3 WARM_EPOCHS=2 NOSPOKE_EPOCHS="" CACHE_FRACTION=2
SCENARIOS="co-located,remote-no-spoke,spoke-cold,spoke-warm,stage-in,spoke-hints"
DELAY_MS=30 STAGE_STREAMS=8 OUT="" BUILD_DIR=build WORK="" KEEP=0 SEED=1
while [ $# -gt 0 ]; do
  case "$1" in
    --short) SHORT=1 ;;
    --workload) WORKLOAD=${2:?}; shift ;;
    --samples) SAMPLES=${2:?}; shift ;;
    --epochs) EPOCHS=${2:?}; shift ;;
    --warm-epochs) WARM_EPOCHS=${2:?}; shift ;;
    --nospoke-epochs) NOSPOKE_EPOCHS=${2:?}; shift ;;
    --cache-fraction) CACHE_FRACTION=${2:?}; shift ;;
    --cache-basis) CACHE_BASIS=${2:?}; shift ;;
    --eviction-policy) EVICTION=${2:?}; shift ;;
    --scenarios) SCENARIOS=${2:?}; shift ;;
    --delay-ms) DELAY_MS=${2:?}; shift ;;
    --stage-streams) STAGE_STREAMS=${2:?}; shift ;;
    --out) OUT=${2:?}; shift ;;
    --build-dir) BUILD_DIR=${2:?}; shift ;;
    --work) WORK=${2:?}; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
  esac
  shift
done

log() { printf '[two-region %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

case "$WORKLOAD" in report|resnet50|unet3d|shards) ;; *) die "unknown workload $WORKLOAD" ;; esac
# Dataset sizes. Full: ~200 batches per epoch (report: 54 s/epoch at the ideal rate). Short:
# about a quarter, so that the whole --short run (six scenarios) takes ~5 minutes.
if [ -z "$SAMPLES" ]; then
  case "$WORKLOAD:$SHORT" in
    report:1) SAMPLES=960 ;;    resnet50:1) SAMPLES=2400 ;;  unet3d:1) SAMPLES=168 ;;
    shards:1) SAMPLES=3200 ;;
    report:0) SAMPLES=6400 ;;   resnet50:0) SAMPLES=8000 ;;  unet3d:0) SAMPLES=504 ;;
    shards:0) SAMPLES=12800 ;;
  esac
fi
[ -n "$NOSPOKE_EPOCHS" ] || { [ "$SHORT" = 1 ] && NOSPOKE_EPOCHS=1 || NOSPOKE_EPOCHS=$EPOCHS; }

[ "$(id -u)" -eq 0 ] || die "must run as root (FUSE mounts and /proc/sys/vm/drop_caches)"
[ -c /dev/fuse ] || die "/dev/fuse is missing (modprobe fuse)"
for t in python3 curl gnuplot; do command -v $t >/dev/null || die "$t is not installed (scripts/install-deps.sh)"; done

case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
AGENT_BIN=$BUILD_DIR/cache-agent/agent/spoke-cache-agent
CTL_BIN=$BUILD_DIR/cache-agent/cli/spokectl
LOADER_BIN=$BUILD_DIR/bench/loader/spoke-loader
PROXY_BIN=$BUILD_DIR/e2e/wan-proxy/spoke-wan-proxy
for b in "$AGENT_BIN" "$CTL_BIN" "$LOADER_BIN" "$PROXY_BIN"; do
  [ -x "$b" ] || die "$b not built (ninja -C $BUILD_DIR spoke-cache-agent spokectl spoke-loader spoke-wan-proxy)"
done

[ -n "$OUT" ] || OUT="$HERE/results/$WORKLOAD-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
[ -n "$WORK" ] || WORK=/var/tmp/spoke-2r.$$
mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
HUB_DIR=$WORK/hub
EXPORT=$HUB_DIR/export

# ---------------------------------------------------------------- cleanup (always)
declare -A AGENT_PID=()   # name -> pid
MOUNTS=()                 # every FUSE target we asked for
BG_PIDS=()                # proxy, samplers, hint feeders
HUB_STARTED=0
LOADER_PID="" COPY_PID=""
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  [ -n "$LOADER_PID" ] && { kill "$LOADER_PID" 2>/dev/null; wait "$LOADER_PID" 2>/dev/null; }
  [ -n "$COPY_PID" ] && { kill -- -"$COPY_PID" 2>/dev/null; wait "$COPY_PID" 2>/dev/null; }
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m" 2>/dev/null; then
      for n in "${!AGENT_PID[@]}"; do
        "$CTL_BIN" --socket "$WORK/$n/agent.sock" unmount "$m" >/dev/null 2>&1
      done
      mountpoint -q "$m" 2>/dev/null && { fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
    fi
  done
  for n in "${!AGENT_PID[@]}"; do stop_agent "$n"; done
  if [ -p "$WORK/hints.fifo" ]; then  # a hint feeder may sit in open(fifo)
    touch "$WORK/hints.stop"; timeout 2 sh -c ": > '$WORK/hints.fifo'" 2>/dev/null
  fi
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ "$HUB_STARTED" = 1 ] && "$ROOT/scripts/spoke-hub" stop "$HUB_DIR" >/dev/null 2>&1
  if [ "$KEEP" = 1 ]; then
    log "work dir kept: $WORK"
  else
    # Only when nothing is mounted under it any more.
    if ! grep -q " $WORK/" /proc/mounts; then rm -rf "$WORK"; else log "mounts left under $WORK; not removed"; fi
  fi
  [ $rc -eq 0 ] || log "failed (exit $rc); partial results in $OUT"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- helpers
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# start_agent NAME CACHE_BYTES [READ_AHEAD_BYTES]: fresh dirs unless they exist (restart).
# (readAheadMaxBytes is at least one block; the prefetch-off agents use one: with
# --prefetch off it is never used.)
start_agent() {
  local n=$1 cache=$2 ra=${3:-67108864} d=$WORK/$1
  mkdir -p "$d/cache" "$d/state"
  if [ ! -f "$d/agent.yaml" ]; then
    # Read-ahead window: the agent requires <= cacheSizeBytes / 2.
    [ "$ra" -le $((cache / 2)) ] || ra=$((cache / 2))
    cat > "$d/agent.yaml" <<EOF
socket: $d/agent.sock
cacheDir: $d/cache
cacheSizeBytes: $cache
blockSizeBytes: 1048576
stateDir: $d/state
mountRoots: [$WORK]
metricsAddress: 127.0.0.1:$(free_port)
logLevel: info
hub: {connections: 4, inflightPerConnection: 64, requestTimeoutSeconds: 10}
readAheadMaxBytes: $ra
evictionPolicy: $EVICTION
EOF
  fi
  local port; port=$(sed -n 's/^metricsAddress: 127.0.0.1://p' "$d/agent.yaml")
  "$AGENT_BIN" --config "$d/agent.yaml" >> "$d/agent.log" 2>&1 &
  AGENT_PID[$n]=$!
  for _ in $(seq 200); do
    if curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && [ -S "$d/agent.sock" ]; then return 0; fi
    kill -0 "${AGENT_PID[$n]}" 2>/dev/null || { tail -20 "$d/agent.log" >&2; die "agent $n exited at start"; }
    sleep 0.05
  done
  tail -20 "$d/agent.log" >&2
  die "agent $n did not come up"
}

stop_agent() {
  local n=$1 pid=${AGENT_PID[$1]:-}
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { log "agent $n ignored SIGTERM; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  wait "$pid" 2>/dev/null || true
  unset "AGENT_PID[$n]"
}

ctl() { local n=$1; shift; "$CTL_BIN" --socket "$WORK/$n/agent.sock" "$@"; }
metrics_port() { sed -n 's/^metricsAddress: 127.0.0.1://p' "$WORK/$1/agent.yaml"; }
# Sum of every series of the agent's spoke_hub_read_bytes_total ("-" when unknown).
hub_bytes() {
  local port; port=$(metrics_port "$1" 2>/dev/null) || { echo -; return; }
  curl -sf "http://127.0.0.1:$port/metrics" 2>/dev/null |
    awk '/^spoke_hub_read_bytes_total[ {]/ {s += $NF; f = 1} END {if (f) printf "%.0f\n", s; else print "-"}'
}
wan_stats() { local s; s=$(cat "$WORK/wan.stats" 2>/dev/null) || s=""; [ -n "$s" ] && echo "$s" || echo "- -"; }

# mount_volume NAME URL DIR [spokectl mount flags]: records the mount time in MOUNT_S.
mount_volume() {
  local n=$1 url=$2 dir=$3; shift 3
  mkdir -p "$dir"
  MOUNTS+=("$dir")
  local t0; t0=$(date +%s.%N)
  ctl "$n" mount "$url" "$dir" --mode dataset "$@" >> "$WORK/$n/spokectl.log" 2>&1 ||
    { cat "$WORK/$n/spokectl.log" >&2; tail -20 "$WORK/$n/agent.log" >&2; die "mount $n failed"; }
  [ -f "$dir/MANIFEST" ] || die "mount $n: no MANIFEST under $dir"
  MOUNT_S=$(echo "$(date +%s.%N) - $t0" | bc)
}

unmount_volume() { ctl "$1" unmount "$2" >/dev/null 2>&1 || fusermount3 -uz "$2" 2>/dev/null || true; }

# Sampler: "<wall> <wan up> <wan down> <agent hub bytes>" every 0.5 s into TRACE.
start_sampler() { # NAME TRACE
  local n=$1 trace=$2
  ( while :; do echo "$(date +%s.%N) $(wan_stats) $(hub_bytes "$n")"; sleep 0.5; done ) >> "$trace" &
  SAMPLER=$!
  BG_PIDS+=("$SAMPLER")
}
stop_sampler() { # NAME TRACE
  sleep 0.5   # the proxy rewrites its stats file every 200 ms
  kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true
  echo "$(date +%s.%N) $(wan_stats) $(hub_bytes "$1")" >> "$2"
}

# run_loader LABEL DIR EPOCHS AGENT [extra loader flags]: drop caches, run, annotate.
LOADER_RC=0
run_loader() {
  local label=$1 dir=$2 epochs=$3 agent=$4; shift 4
  drop_caches
  local t0; t0=$(date +%s.%N)
  echo "$t0" > "$OUT/$label.t0"
  # In the background + wait, so that a signal reaches the trap at once (bash defers traps
  # while a foreground child runs) and cleanup can end the loader by pid.
  "$LOADER_BIN" run --dir "$dir" --epochs "$epochs" --seed "$SEED" --drop-cache \
    --label "$label" --json "$OUT/$label.json" --csv "$OUT/$label.csv" "$@" \
    > "$OUT/$label.log" 2>&1 &
  LOADER_PID=$!
  local rc=0
  wait "$LOADER_PID" || rc=$?
  LOADER_PID=
  [ $rc -eq 0 ] || { log "loader $label exited $rc (read errors?) -- see $OUT/$label.log"; LOADER_RC=1; }
  [ -f "$OUT/$label.json" ] || die "loader $label wrote no summary; log: $(tail -5 "$OUT/$label.log")"
  tail -n 12 "$OUT/$label.log" | sed "s/^/    [$label] /" >&2
}

annotate() { # LABEL [key=value ...]
  local label=$1; shift
  local sets=(--set dataset_bytes="$DATASET_BYTES" --set dataset_files="$DATASET_FILES"
              --set dataset_footprint_bytes="$FOOTPRINT_BYTES" --set cache_basis="$CACHE_BASIS"
              --set cache_basis_bytes="$BASIS_BYTES")
  for kv in "$@"; do sets+=(--set "$kv"); done
  python3 "$HERE/annotate.py" --json "$OUT/$label.json" --csv "$OUT/$label.csv" \
    --trace "$OUT/$label.trace" --t0 "$(cat "$OUT/$label.t0")" "${sets[@]}"
}

want() { [[ ",$SCENARIOS," == *",$1,"* ]]; }

# ---------------------------------------------------------------- hub, dataset, WAN
log "work $WORK, results $OUT"
log "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
HUB_STARTED=1
hub_out=$("$ROOT/scripts/spoke-hub" start "$HUB_DIR") || die "spoke-hub start failed"
HUB_NFS=$(sed -n 's/.*NFS_PORT=\([0-9]*\).*/\1/p' <<<"$hub_out")
HUB_MNT=$(sed -n 's/.*MOUNT_PORT=\([0-9]*\).*/\1/p' <<<"$hub_out")
log "hub: ganesha on 127.0.0.1:$HUB_NFS (mount $HUB_MNT), export $EXPORT"

# The dataset is the export's root (so hint paths, relative to the dataset, are relative to
# the volume root too). Generated on the hub side: no WAN.
t=$(date +%s.%N)
"$LOADER_BIN" gen --dir "$EXPORT" --workload "$WORKLOAD" --samples "$SAMPLES" --seed "$SEED" \
  > "$OUT/gen.log" 2>&1 || die "gen failed: $(tail -3 "$OUT/gen.log")"
DATASET_FILES=$(grep -vc '^#' "$EXPORT/MANIFEST" || true)
DATASET_BYTES=$(awk '!/^#/ && NF >= 2 {s += $2} END {printf "%.0f\n", s}' "$EXPORT/MANIFEST")
# What the agent's cache needs to hold the whole dataset: whole 1 MiB blocks per file.
FOOTPRINT_BYTES=$(awk '!/^#/ && NF >= 2 {s += int(($2 + 1048575) / 1048576) * 1048576} END {printf "%.0f\n", s}' "$EXPORT/MANIFEST")
case "$CACHE_BASIS" in
  footprint) BASIS_BYTES=$FOOTPRINT_BYTES ;; bytes) BASIS_BYTES=$DATASET_BYTES ;;
  *) die "--cache-basis: footprint or bytes" ;;
esac
CACHE_BYTES=$(python3 -c "import sys; d=int(sys.argv[1]); f=float(sys.argv[2]); mib=1<<20; print(max(64*mib, int(d*f)//mib*mib))" "$BASIS_BYTES" "$CACHE_FRACTION")
MIN_CACHE=$((64 << 20))
log "dataset: $WORKLOAD, $SAMPLES samples, $DATASET_FILES files, $DATASET_BYTES bytes (gen $(echo "$(date +%s.%N) - $t" | bc | cut -c1-5) s); cache footprint $FOOTPRINT_BYTES bytes; Spoke cache $CACHE_BYTES bytes (x$CACHE_FRACTION of the $CACHE_BASIS)"

DIRECT_URL="nfs://127.0.0.1$EXPORT?nfsport=$HUB_NFS&mountport=$HUB_MNT"
WAN_NFS=$(free_port); WAN_MNT=$(free_port)
"$PROXY_BIN" --delay-ms "$DELAY_MS" --route "127.0.0.1:$WAN_NFS=127.0.0.1:$HUB_NFS" \
  --route "127.0.0.1:$WAN_MNT=127.0.0.1:$HUB_MNT" --stats-file "$WORK/wan.stats" \
  > "$WORK/wan-proxy.log" 2>&1 &
BG_PIDS+=("$!")
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$WAN_NFS") 2>/dev/null && break; sleep 0.05; done
WAN_URL="nfs://127.0.0.1$EXPORT?nfsport=$WAN_NFS&mountport=$WAN_MNT"
log "WAN: spoke-wan-proxy ${DELAY_MS} ms each way ($((2 * DELAY_MS)) ms RTT) on $WAN_NFS/$WAN_MNT"

cat > "$OUT/run.txt" <<EOF
command: bench/two-region/run.sh $( [ $SHORT = 1 ] && echo --short ) --workload $WORKLOAD --samples $SAMPLES --epochs $EPOCHS --warm-epochs $WARM_EPOCHS --nospoke-epochs $NOSPOKE_EPOCHS --cache-fraction $CACHE_FRACTION --cache-basis $CACHE_BASIS --eviction-policy $EVICTION --delay-ms $DELAY_MS --stage-streams $STAGE_STREAMS
commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)
dataset: $WORKLOAD, $SAMPLES samples, $DATASET_FILES files, $DATASET_BYTES bytes (cache footprint in 1 MiB blocks: $FOOTPRINT_BYTES); Spoke cache $CACHE_BYTES bytes = $CACHE_FRACTION x $CACHE_BASIS; remote-no-spoke/stage-in cache $MIN_CACHE bytes
EOF
DONE=()

# ---------------------------------------------------------------- scenarios
# (a) co-located: Spoke on the hub directly (no WAN).
if want co-located; then
  log "scenario co-located: agent on the hub directly, cache + prefetch auto, $EPOCHS epochs"
  start_agent co-located "$CACHE_BYTES"
  mount_volume co-located "$DIRECT_URL" "$WORK/mnt-co-located" --prefetch auto
  m=$MOUNT_S
  start_sampler co-located "$OUT/co-located.trace"
  run_loader co-located "$WORK/mnt-co-located" "$EPOCHS" co-located
  stop_sampler co-located "$OUT/co-located.trace"
  ctl co-located stats "$WORK/mnt-co-located" > "$OUT/co-located.stats.txt" 2>&1 || true
  unmount_volume co-located "$WORK/mnt-co-located"; stop_agent co-located
  annotate co-located mount_s="$m" cache_size_bytes="$CACHE_BYTES" wan_path=direct
  DONE+=(co-located)
fi

# (b) remote without Spoke: same mount path, prefetch off, strict consistency, minimal cache.
if want remote-no-spoke; then
  log "scenario remote-no-spoke: WAN, prefetch off, strict, cache $MIN_CACHE bytes (agent minimum), $NOSPOKE_EPOCHS epoch(s)"
  start_agent remote-no-spoke "$MIN_CACHE" 1048576
  mount_volume remote-no-spoke "$WAN_URL" "$WORK/mnt-remote-no-spoke" --prefetch off --consistency strict
  m=$MOUNT_S
  start_sampler remote-no-spoke "$OUT/remote-no-spoke.trace"
  run_loader remote-no-spoke "$WORK/mnt-remote-no-spoke" "$NOSPOKE_EPOCHS" remote-no-spoke
  stop_sampler remote-no-spoke "$OUT/remote-no-spoke.trace"
  ctl remote-no-spoke stats "$WORK/mnt-remote-no-spoke" > "$OUT/remote-no-spoke.stats.txt" 2>&1 || true
  unmount_volume remote-no-spoke "$WORK/mnt-remote-no-spoke"; stop_agent remote-no-spoke
  annotate remote-no-spoke mount_s="$m" cache_size_bytes="$MIN_CACHE"
  DONE+=(remote-no-spoke)
fi

# (c) remote with Spoke: cold cache, several epochs; then warm after an agent restart.
if want spoke-cold || want spoke-warm; then
  log "scenario spoke-cold: WAN, Spoke (prefetch auto), empty cache, $EPOCHS epochs"
  start_agent spoke "$CACHE_BYTES"
  mount_volume spoke "$WAN_URL" "$WORK/mnt-spoke" --prefetch auto
  m=$MOUNT_S
  start_sampler spoke "$OUT/spoke-cold.trace"
  run_loader spoke-cold "$WORK/mnt-spoke" "$EPOCHS" spoke
  stop_sampler spoke "$OUT/spoke-cold.trace"
  ctl spoke stats "$WORK/mnt-spoke" > "$OUT/spoke-cold.stats.txt" 2>&1 || true
  curl -sf "http://127.0.0.1:$(metrics_port spoke)/metrics" > "$OUT/spoke-cold.metrics.txt" || true
  annotate spoke-cold mount_s="$m" cache_size_bytes="$CACHE_BYTES"
  DONE+=(spoke-cold)
  if want spoke-warm && [ "$WARM_EPOCHS" -gt 0 ]; then
    log "scenario spoke-warm: agent restarted on the same cacheDir/stateDir, $WARM_EPOCHS epochs"
    stop_agent spoke
    t=$(date +%s.%N)
    start_agent spoke "$CACHE_BYTES"
    # The mount comes back from stateDir/mounts.json; mount explicitly if it does not.
    for _ in $(seq 100); do [ -f "$WORK/mnt-spoke/MANIFEST" ] && mountpoint -q "$WORK/mnt-spoke" && break; sleep 0.1; done
    if ! mountpoint -q "$WORK/mnt-spoke" || [ ! -f "$WORK/mnt-spoke/MANIFEST" ]; then
      log "the restarted agent did not restore the mount within 10 s; mounting again"
      fusermount3 -uz "$WORK/mnt-spoke" 2>/dev/null || true
      mount_volume spoke "$WAN_URL" "$WORK/mnt-spoke" --prefetch auto
      restored=0
    else
      restored=1
    fi
    m=$(echo "$(date +%s.%N) - $t" | bc)
    start_sampler spoke "$OUT/spoke-warm.trace"
    run_loader spoke-warm "$WORK/mnt-spoke" "$WARM_EPOCHS" spoke
    stop_sampler spoke "$OUT/spoke-warm.trace"
    ctl spoke stats "$WORK/mnt-spoke" > "$OUT/spoke-warm.stats.txt" 2>&1 || true
    annotate spoke-warm mount_s="$m" cache_size_bytes="$CACHE_BYTES" mount_restored="$restored"
    DONE+=(spoke-warm)
  fi
  unmount_volume spoke "$WORK/mnt-spoke"; stop_agent spoke
fi

# (d) stage-in: copy over the WAN (8 parallel cp streams through a Spoke mount with
# prefetch off and a cold minimal cache; metadata immutable, i.e. the walk helps the copy),
# then train from the local copy.
if want stage-in; then
  log "scenario stage-in: copy over the WAN with $STAGE_STREAMS cp streams, then $EPOCHS epochs locally"
  start_agent stage "$MIN_CACHE" 1048576
  mount_volume stage "$WAN_URL" "$WORK/mnt-stage" --prefetch off
  m=$MOUNT_S
  LOCAL=$WORK/local-copy
  rm -rf "$LOCAL"; mkdir -p "$LOCAL"
  : > "$OUT/stage-in.trace"
  start_sampler stage "$OUT/stage-in.trace"
  t=$(date +%s.%N)
  # Directories first (parallel `cp --parents` races on mkdir), then the files.
  ( cd "$WORK/mnt-stage" && awk '!/^#/ && NF >= 2 {print $1}' MANIFEST | sed -n 's|/[^/]*$||p' |
      sort -u | (cd "$LOCAL" && xargs -r mkdir -p) ) || die "stage-in mkdir failed"
  # Its own process group (setsid), so that cleanup can end xargs and every cp at once.
  setsid bash -c 'cd "$1" && { echo MANIFEST; awk '"'"'!/^#/ && NF >= 2 {print $1}'"'"' MANIFEST; } |
      xargs -d "\n" -P "$2" -n 64 cp --parents -t "$3"' copy "$WORK/mnt-stage" "$STAGE_STREAMS" "$LOCAL" &
  COPY_PID=$!
  rc=0; wait "$COPY_PID" || rc=$?
  COPY_PID=
  [ $rc -eq 0 ] || die "stage-in copy failed (exit $rc)"
  STAGE_S=$(echo "$(date +%s.%N) - $t" | bc)
  log "stage-in copy: $STAGE_S s"
  # The agent's counters stop with it: keep sampling the proxy only while training.
  stop_sampler stage "$OUT/stage-in.trace"
  unmount_volume stage "$WORK/mnt-stage"; stop_agent stage
  sync
  start_sampler none "$OUT/stage-in.trace"
  run_loader stage-in "$LOCAL" "$EPOCHS" none
  stop_sampler none "$OUT/stage-in.trace"
  # The trace's hub column ends with "-" after the agent stopped; annotate uses the proxy's.
  annotate stage-in mount_s="$m" stage_in_s="$STAGE_S" stage_streams="$STAGE_STREAMS" cache_size_bytes="$MIN_CACHE"
  rm -rf "$LOCAL"
  DONE+=(stage-in)
fi

# (e) remote with Spoke and hints, cold cache.
if want spoke-hints; then
  start_agent hints "$CACHE_BYTES"
  mount_volume hints "$WAN_URL" "$WORK/mnt-hints" --prefetch auto
  m=$MOUNT_S
  # The control file must exist and take a write (an empty one) on this read-only mount.
  if [ -e "$WORK/mnt-hints/.spoke-hints" ] && : 2>/dev/null > "$WORK/mnt-hints/.spoke-hints"; then
    CHANNEL=control-file
    HINTS_FILE=$WORK/mnt-hints/.spoke-hints
  else
    [ -e "$WORK/mnt-hints/.spoke-hints" ] && log "the agent's .spoke-hints refuses writes; using spokectl hint"
    # No usable control file: the loader writes each epoch's order into a FIFO before starting
    # the epoch's workers; this feeder hands it to `spokectl hint` (an agent API call).
    CHANNEL=spokectl
    HINTS_FILE=$WORK/hints.fifo
    rm -f "$HINTS_FILE"; mkfifo "$HINTS_FILE"
    (
      i=0
      while [ ! -f "$WORK/hints.stop" ]; do
        cat "$HINTS_FILE" > "$WORK/hints.epoch" || break
        [ -f "$WORK/hints.stop" ] && break
        [ -s "$WORK/hints.epoch" ] || continue
        i=$((i + 1))
        echo "epoch order $i: $(wc -l < "$WORK/hints.epoch") paths at $(date +%s.%N)" >> "$OUT/spoke-hints.hints.log"
        ctl hints hint "$WORK/mnt-hints" "$WORK/hints.epoch" >> "$OUT/spoke-hints.hints.log" 2>&1 || true
      done
    ) &
    FEEDER=$!
    BG_PIDS+=("$FEEDER")
  fi
  log "scenario spoke-hints: WAN, Spoke, empty cache, hints via $CHANNEL, $EPOCHS epochs"
  start_sampler hints "$OUT/spoke-hints.trace"
  run_loader spoke-hints "$WORK/mnt-hints" "$EPOCHS" hints --hints-file "$HINTS_FILE"
  stop_sampler hints "$OUT/spoke-hints.trace"
  if [ "$CHANNEL" = spokectl ]; then
    touch "$WORK/hints.stop"
    timeout 2 sh -c ": > '$HINTS_FILE'" 2>/dev/null || true   # wakes a feeder blocked in open
    wait "$FEEDER" 2>/dev/null || true
  fi
  ctl hints stats "$WORK/mnt-hints" > "$OUT/spoke-hints.stats.txt" 2>&1 || true
  curl -sf "http://127.0.0.1:$(metrics_port hints)/metrics" > "$OUT/spoke-hints.metrics.txt" || true
  unmount_volume hints "$WORK/mnt-hints"; stop_agent hints
  annotate spoke-hints mount_s="$m" cache_size_bytes="$CACHE_BYTES" hint_channel="$CHANNEL"
  DONE+=(spoke-hints)
fi

# ---------------------------------------------------------------- plot and table
csvs="" titles=""
for s in "${DONE[@]}"; do csvs+="$OUT/$s.csv "; titles+="$s "; done
ideal=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['config']['ideal_samples_per_s'])" "$OUT/${DONE[0]}.json")
gnuplot -e "csvs='${csvs% }'" -e "titles='${titles% }'" -e "out='$OUT/samples-per-s.png'; ideal=$ideal" \
  "$HERE/plot.gp" 2> "$OUT/plot.log" || log "gnuplot failed: $(cat "$OUT/plot.log")"
jsons=(); for s in "${DONE[@]}"; do jsons+=("$OUT/$s.json"); done
python3 "$HERE/summarize.py" --targets "${jsons[@]}" > "$OUT/results.md"
{ echo; cat "$OUT/run.txt"; } >> "$OUT/results.md"
echo
cat "$OUT/results.md"
echo
log "plot: $OUT/samples-per-s.png"
log "table: $OUT/results.md"
exit $LOADER_RC
