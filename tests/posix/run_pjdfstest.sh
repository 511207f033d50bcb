#!/usr/bin/env bash
# pjdfstest (the POSIX file system conformance suite) on a scratch volume served by the real
# agent binary: nfs-ganesha hub -> spoke-cache-agent (FUSE) mounted with `spokectl mount`.
#
#   tests/posix/run_pjdfstest.sh BUILD_DIR [--caller UID] [--nfs-version 4.1] [TEST_PATTERN...]
#
# Root by default: pjdfstest runs every case, switching to its dummy users, on a mount with
# --allow-root. --caller UID runs it as UID:UID without groups, as a pod with runAsUser does:
# the mount without --allow-root, the volume's directory on the hub owned by UID; pjdfstest
# then skips the cases that need root (chown to others, user switching). --nfs-version 4.1:
# the agent reaches the hub over NFSv4.1 (as Amazon EFS), with the configuration
# tests/posix/pjdfstest-nfs41.toml (what NFSv4.1 cannot carry is listed there).
#
# Configuration: tests/posix/pjdfstest.toml (its expected_failures each say why). Fails on any
# unexpected failure or unexpected pass; prints pjdfstest's summary line. Exit 77 (ctest:
# skipped) when not root or when pjdfstest, its dummy users or a Spoke binary is missing
# (scripts/install-deps.sh installs them).
# Env: SPOKE_PJDFSTEST_TIMEOUT (seconds, default 170), SPOKE_PJDFSTEST_CONFIG (another
# configuration file), KEEP_WORKDIR=1 keeps the logs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/e2e/lib/common.sh"
build=$(cd "${1:?usage: run_pjdfstest.sh BUILD_DIR [--caller UID] [--nfs-version 4.1] [TEST_PATTERN...]}" && pwd)
shift
caller=0
nfs_version=3
name=posix_pjdfstest
config=$here/pjdfstest.toml
if [ "${1:-}" = --caller ]; then
  caller=${2:?--caller needs a uid}
  name=posix_pjdfstest_nonroot
  shift 2
fi
if [ "${1:-}" = --nfs-version ]; then
  nfs_version=${2:?--nfs-version needs 3 or 4.1}
  [ "$nfs_version" = 3 ] || { name=${name}_nfs41; config=$here/pjdfstest-nfs41.toml; }
  shift 2
fi
limit=${SPOKE_PJDFSTEST_TIMEOUT:-170}

skip() { echo "$name: SKIP: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (FUSE, pjdfstest's user switching)"
pjdfstest=/usr/local/bin/pjdfstest
[ -x "$pjdfstest" ] || pjdfstest=$(command -v pjdfstest || true)
[ -n "$pjdfstest" ] || skip "pjdfstest is not installed (scripts/install-deps.sh)"
for u in nobody tests; do id "$u" >/dev/null 2>&1 || skip "user '$u' is missing (scripts/install-deps.sh)"; done
agent_bin=$build/cache-agent/agent/spoke-cache-agent
ctl_bin=$build/cache-agent/cli/spokectl
for b in "$agent_bin" "$ctl_bin"; do [ -x "$b" ] || skip "$b is not built"; done

work=$(mktemp -d /tmp/spoke-pjdfstest-XXXXXX)
# The dummy users must reach the mount (mktemp made it 0700).
chmod 0755 "$work"
agent_pid=""
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [ $rc -ne 0 ] && [ -f "$work/agent.log" ]; then
    echo "--- agent.log (tail) ---" >&2
    tail -20 "$work/agent.log" >&2
  fi
  [ -n "$agent_pid" ] && "$ctl_bin" --socket "$work/agent.sock" unmount "$work/mnt" >/dev/null 2>&1
  spoke_stop_pid "$agent_pid" "$name: agent"
  # A dead agent leaves its FUSE mount behind: detach it before removing the work dir.
  for m in $(spoke_mounts_under "$work"); do umount -l "$m" 2>/dev/null; done
  "$root/scripts/spoke-hub" stop "$work/hub" >/dev/null 2>&1
  if [ "${KEEP_WORKDIR:-0}" = 1 ]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

eval "$("$root/scripts/spoke-hub" start "$work/hub")"  # NFS_PORT MOUNT_PORT EXPORT PID
mkdir -p "$EXPORT/scratch"
if [ "$caller" = 0 ]; then
  chmod 0777 "$EXPORT/scratch"
else
  # The caller's own directory, as a pod's scratch space: 0755, not 0700, because the agent's
  # listings, lookups and block reads go to the hub as hubUid (65534), not as the caller.
  chown "$caller:$caller" "$EXPORT/scratch"
  chmod 0755 "$EXPORT/scratch"
fi

spoke_agent_config "$work" 256Mi "hub: {connections: 2, requestTimeoutSeconds: 10}" \
  >"$work/agent.yaml"
spoke_start_agent "$agent_bin" "$work/agent.yaml" "$work/agent.log" 20 || {
  agent_pid=$SPOKE_PID
  exit 1
}
agent_pid=$SPOKE_PID

# Strict consistency: every stat pjdfstest makes right after a change must see it. Root
# callers are root on the hub with --allow-root (the export does not squash root), so chown
# and friends are the hub's to allow or refuse. A non-root caller goes to the hub as itself
# (the default hub identity, the caller), without --allow-root.
# A second file system for the EXDEV cases: the work dir's own (not the mount).
mkdir -p "$work/mnt" "$work/other-fs"
chmod 0777 "$work/other-fs"
allow_root=(--allow-root)
as_caller=()
if [ "$caller" != 0 ]; then
  allow_root=()
  as_caller=(setpriv --reuid="$caller" --regid="$caller" --clear-groups --)
fi
url="nfs://127.0.0.1$EXPORT/scratch?nfsport=$NFS_PORT&mountport=$MOUNT_PORT"
[ "$nfs_version" = 3 ] || url="nfs://127.0.0.1$EXPORT/scratch?version=$nfs_version&nfsport=$NFS_PORT"
"$ctl_bin" --socket "$work/agent.sock" mount "$url" "$work/mnt" \
  --mode scratch --consistency strict "${allow_root[@]}"

# pjdfstest's tests call umask(0) and switch to its dummy users; its temp dirs live under -p.
set +e
NO_COLOR=1 CLICOLOR=0 timeout --kill-after=10 "$limit" "${as_caller[@]}" \
  "$pjdfstest" -c "${SPOKE_PJDFSTEST_CONFIG:-$config}" -p "$work/mnt" -s "$work/other-fs" "$@" >"$work/pjdfstest.log" 2>&1
rc=$?
set -e
grep -E "FAILED|PASSED UNEXPECTEDLY" "$work/pjdfstest.log" | sed 's/^/  /' || true
summary=$(grep -E "^Summary:" "$work/pjdfstest.log" || true)
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
  tail -5 "$work/pjdfstest.log" >&2
  echo "$name: FAIL: pjdfstest did not finish within ${limit} s" >&2
  exit 1
fi
if [ -z "$summary" ]; then
  tail -20 "$work/pjdfstest.log" >&2
  echo "$name: FAIL: pjdfstest ended (rc=$rc) without a summary" >&2
  exit 1
fi
echo "$name: $summary"
if [ $rc -ne 0 ]; then
  # The failures with their messages, and what the agent warned of, for whoever reads the log.
  grep -A3 -E "FAILED$" "$work/pjdfstest.log" | head -100 >&2 || true
  grep "level=warn\|level=error" "$work/agent.log" | head -40 >&2 || true
  echo "$name: FAIL: unexpected failures or passes (see above)" >&2
  exit 1
fi
echo "$name: PASS"
