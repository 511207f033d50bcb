# Shared helpers of the shell test and benchmark drivers (e2e/local, e2e/sanity, bench/cache).
# Source it:  . "$root/e2e/lib/common.sh"
# Functions only: no `set` options, no traps, no globals other than SPOKE_PID.

# A TCP port free on 127.0.0.1 right now (the kernel's pick; several runs may share the host).
spoke_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# spoke_agent_config WORK CACHE_SIZE [YAML_LINE...]: prints an agent config whose socket,
# cacheDir and stateDir live under WORK and whose metrics listen on a free port; every extra
# argument is one more YAML line (e.g. "hub: {connections: 2}"). No fd keeper unless a line
# sets fuseKeeperSocket (the agent's default would start one shared by every run, at
# /run/spoke/fuse-keeper.sock).
spoke_agent_config() {
  local work=$1 cache=$2
  shift 2
  cat <<CONF
socket: $work/agent.sock
cacheDir: $work/cache
cacheSizeBytes: $cache
blockSizeBytes: 1Mi
metricsAddress: 127.0.0.1:$(spoke_free_port)
stateDir: $work/agent-state
mountRoots: [$work]
logLevel: info
CONF
  local line keeper='fuseKeeperSocket: ""'
  for line in "$@"; do
    case $line in fuseKeeperSocket:*) keeper= ;; esac
    printf '%s\n' "$line"
  done
  if [ -n "$keeper" ]; then printf '%s\n' "$keeper"; fi
}

# spoke_wait_socket SOCKET [PID] [SECONDS=10]: waits until the unix socket exists. Fails
# (status 1) when it does not appear in time or when PID exits first.
spoke_wait_socket() {
  local sock=$1 pid=${2:-} tries=$(( ${3:-10} * 10 ))
  local _
  for _ in $(seq "$tries"); do
    [ -S "$sock" ] && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "spoke_wait_socket: pid $pid exited before $sock appeared" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "spoke_wait_socket: $sock did not appear within $(( tries / 10 )) s" >&2
  return 1
}

# spoke_start_agent BIN CONFIG LOG [SECONDS=10]: starts the cache agent in the background
# (output appended to LOG), sets SPOKE_PID to its pid and waits for its socket (read from
# CONFIG). On failure prints the log's tail and returns 1; SPOKE_PID is set either way so
# the caller's cleanup can stop it.
spoke_start_agent() {
  local bin=$1 config=$2 log=$3 secs=${4:-10}
  local sock
  sock=$(sed -n 's/^socket:[[:space:]]*//p' "$config")
  [ -n "$sock" ] || { echo "spoke_start_agent: no socket: in $config" >&2; return 1; }
  "$bin" --config "$config" >>"$log" 2>&1 &
  SPOKE_PID=$!
  spoke_wait_socket "$sock" "$SPOKE_PID" "$secs" && return 0
  echo "--- $log (tail) ---" >&2
  tail -20 "$log" >&2
  return 1
}

# spoke_stop_pid PID [NAME]: SIGTERM, up to 5 s to exit, then SIGKILL; reaps it when it is
# this shell's child. Only ever the pid given: never by name.
spoke_stop_pid() {
  local pid=$1 name=${2:-$1}
  local _
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$name ($pid) ignored SIGTERM, killing" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
}

# spoke_mounts_under DIR: mount points at or under DIR, deepest first (mountinfo escapes
# spaces as \040).
spoke_mounts_under() {
  awk -v w="$1" '{ p=$5; gsub(/\\040/, " ", p); if (p == w || index(p, w "/") == 1) print p }' \
    /proc/self/mountinfo | sort -r | uniq
}
