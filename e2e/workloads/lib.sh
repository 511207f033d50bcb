# Workloads and checks shared by e2e/k8s/run.sh and e2e/kind/run.sh (sourced), so that both
# runs exercise Spoke the same way and cannot drift. The caller sets:
#   NS DRIVER_NS RELEASE TIMEOUT   namespace of the workloads, of the chart; kubectl timeout
#   SPOKE_IMAGE                    image of the workload pods (has sh, sha256sum, find)
#   HUB_SERVER HUB_SHARE NFS_PORT MOUNT_PORT DATASET_SUBDIR   the hub, for inline volumes
# and defines log MSG, die MSG, and node_sh NODE SCRIPT (runs a shell script on a node).
# Manifests here use ${UPPER_CASE} placeholders, filled from the environment by wl_render.

WL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# wl_render FILE [VAR=VALUE...]: FILE (relative: to e2e/workloads) with every ${VAR}
# replaced; an unset VAR is an error.
wl_render() {
  local file=$1
  shift
  [[ $file == /* ]] || file=$WL_DIR/$file
  env "$@" python3 - "$file" <<'PY'
import os, re, sys
text = open(sys.argv[1]).read()
def value(m):
    if m.group(1) not in os.environ:
        sys.exit(f"wl_render: {sys.argv[1]} needs ${{{m.group(1)}}}, which is not set")
    return os.environ[m.group(1)]
sys.stdout.write(re.sub(r"\$\{([A-Z][A-Z0-9_]*)\}", value, text))
PY
}
wl_apply() { wl_render "$@" | kubectl apply -f - >/dev/null; }

# wl_metric NAME POD: a counter of an agent's /metrics summed over its label sets (through the
# API server's pod proxy: no port-forward to manage).
wl_metric() {
  kubectl get --raw "/api/v1/namespaces/$DRIVER_NS/pods/$2:9810/proxy/metrics" |
    awk -v name="$1" '$1 == name || index($1, name "{") == 1 { sum += $NF }
                      END { printf "%d\n", sum }'
}

wl_agent_on() { # NODE -> name of the agent pod on it
  kubectl -n "$DRIVER_NS" get pods \
    -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=agent \
    --field-selector spec.nodeName="$1",status.phase=Running \
    -o jsonpath='{.items[*].metadata.name}' | awk '{ print $1 }'
}

wl_daemonset() { # COMPONENT (node|agent) -> daemonset/NAME of this release
  kubectl -n "$DRIVER_NS" get daemonset -o name \
    -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component="$1"
}

wl_dump_pod() { # NAMESPACE POD
  kubectl -n "$1" describe pod "$2" >&2 || true
  kubectl -n "$1" logs "$2" --all-containers --prefix --tail=50 >&2 || true
}

# wl_poll SECONDS WHAT COMMAND...: runs COMMAND (prints a state) until it prints "done" or
# "failed"; dies on "failed" or when SECONDS pass. Failing fast beats waiting out a timeout.
wl_poll() {
  local secs=$1 what=$2 deadline=$((SECONDS + $1)) state
  shift 2
  while :; do
    state=$("$@" 2>/dev/null || true)
    case $state in
      done) return 0 ;;
      failed) return 1 ;;
    esac
    [ $SECONDS -lt $deadline ] || { log "$what: not done within ${secs}s (state: ${state:-none})"; return 1; }
    sleep 1
  done
}
wl_secs() { local t=${TIMEOUT%s}; echo "${t:-180}"; }

wl_pod_state() { # POD -> done | failed | <phase>
  case $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}') in
    Succeeded) echo done ;;
    Failed) echo failed ;;
    *) kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}' ;;
  esac
}

# wl_wait_pod_done POD: waits until the pod Succeeded; dies with its logs if it failed or timed
# out.
wl_wait_pod_done() {
  if ! wl_poll "$(wl_secs)" "pod $1" wl_pod_state "$1"; then
    wl_dump_pod "$NS" "$1"
    die "pod $1 did not succeed (phase: $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null))"
  fi
  kubectl -n "$NS" logs "$1" >&2
}

wl_job_state() { # JOB -> done | failed | running
  local st
  st=$(kubectl -n "$NS" get job "$1" -o jsonpath='{.status.succeeded}/{.status.failed}')
  case $st in
    [1-9]*/*) echo done ;;
    */[1-9]*) echo failed ;;
    *) echo running ;;
  esac
}

# wl_verify_job JOB: runs verify-job.yaml as JOB to completion; prints "NODE BYTES" (the node
# it ran on and the dataset bytes it verified).
wl_verify_job() {
  local job=$1 out
  wl_apply verify-job.yaml JOB="$job"
  if ! wl_poll "$(wl_secs)" "Job $job" wl_job_state "$job"; then
    kubectl -n "$NS" describe job "$job" >&2 || true
    kubectl -n "$NS" logs "job/$job" >&2 || true
    die "verify Job $job did not succeed (logs above)"
  fi
  out=$(kubectl -n "$NS" logs "job/$job")
  log "$job: $out"
  [[ $out =~ verified\ ([0-9]+)\ files,\ ([0-9]+)\ bytes ]] || die "$job printed no summary: $out"
  echo "$(kubectl -n "$NS" get pods -l job-name="$job" -o jsonpath='{.items[0].spec.nodeName}') ${BASH_REMATCH[2]}"
}

wl_pod_running() { # POD -> done once Running | failed | <phase>
  case $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}') in
    Running) echo done ;;
    Succeeded | Failed) echo failed ;;
    *) kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}' ;;
  esac
}

# Cold read then warm read of the dataset PVC, each by its own pod. What it checks is where
# the bytes came from: the cold run must fetch at least the whole dataset from the hub, the
# warm run (another pod, same node) next to nothing, served from the cache. A holder pod keeps
# the volume staged in between (the agent drops a volume's counters when it is unstaged).
wl_check_dataset_cold_warm() {
  local node bytes node2 agent hub0 hub1 hub2 hits1 hits2
  wl_apply dataset-pvc.yaml
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound pvc/dataset --timeout="$TIMEOUT" \
    >/dev/null || { kubectl -n "$NS" describe pvc dataset >&2; die "PVC dataset not Bound within $TIMEOUT"; }
  wl_apply holder-pod.yaml
  if ! wl_poll "$(wl_secs)" "pod spoke-dataset-holder" wl_pod_running spoke-dataset-holder; then
    wl_dump_pod "$NS" spoke-dataset-holder
    die "pod spoke-dataset-holder did not start"
  fi
  local r
  r=$(wl_verify_job spoke-verify-cold)
  read -r node bytes <<<"$r"
  agent=$(wl_agent_on "$node")
  [ -n "$agent" ] || die "no running agent pod on node $node"
  hub1=$(wl_metric spoke_hub_read_bytes_total "$agent")
  hits1=$(wl_metric spoke_cache_hits_total "$agent")
  log "cold run on $node: dataset $bytes bytes, from the hub $hub1 bytes (agent $agent)"
  [ "$hub1" -ge "$bytes" ] ||
    die "cold read fetched $hub1 bytes from the hub, less than the dataset's $bytes: data did not come through the agent"
  r=$(wl_verify_job spoke-verify-warm)
  read -r node2 bytes <<<"$r"
  if [ "$node2" != "$node" ]; then
    log "warm run landed on $node2, not $node: cache check skipped"
    kubectl -n "$NS" delete pod spoke-dataset-holder --wait=false >/dev/null
    return
  fi
  hub2=$(wl_metric spoke_hub_read_bytes_total "$agent")
  hits2=$(wl_metric spoke_cache_hits_total "$agent")
  log "warm run: from the hub $((hub2 - hub1)) more bytes; cache hits $hits1 -> $hits2"
  # Allowance: a prefetch still in flight when the cold pod finished may land afterwards.
  [ $((hub2 - hub1)) -le $((bytes / 20)) ] ||
    die "warm read fetched $((hub2 - hub1)) bytes from the hub (dataset: $bytes): not served from the cache"
  # The warm pod may be served by the node's page cache (the same FUSE inodes): cache hits are
  # reported, not required; what matters is that its bytes did not cross the WAN again.
  kubectl -n "$NS" delete pod spoke-dataset-holder --wait=false >/dev/null
}

# wl_fsgroup_check POD: the pod's "fsgroup: N of M entries not of group 2000" line; every entry
# must have the fsGroup (the driver has VOLUME_MOUNT_GROUP: kubelet hands the group to the
# agent, which gives the volume root the group on the hub). WL_ASSERT_FSGROUP=0 only reports.
wl_fsgroup_check() {
  local line
  line=$(kubectl -n "$NS" logs "$1" | grep '^fsgroup: ' || true)
  [ -n "$line" ] || die "pod $1 printed no fsgroup line"
  log "$1: $line"
  [[ $line == "fsgroup: 0 of "* ]] && return
  if [ "${WL_ASSERT_FSGROUP:-1}" = 1 ]; then die "files in the scratch volume lack the pod's fsGroup"; fi
  log "the scratch volume does not have the pod's fsGroup (reported only: WL_ASSERT_FSGROUP=0)"
}

# A scratch PVC written by one pod and read back by the next (both uid 1000, fsGroup 2000).
wl_check_scratch() {
  wl_apply scratch.yaml
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound pvc/scratch --timeout="$TIMEOUT" \
    >/dev/null || { kubectl -n "$NS" describe pvc scratch >&2; die "PVC scratch not Bound within $TIMEOUT"; }
  wl_apply scratch-writer.yaml
  wl_wait_pod_done spoke-scratch-writer
  wl_fsgroup_check spoke-scratch-writer
  kubectl -n "$NS" delete pod spoke-scratch-writer --wait --timeout="$TIMEOUT" >/dev/null
  wl_apply scratch-reader.yaml
  wl_wait_pod_done spoke-scratch-reader
  wl_fsgroup_check spoke-scratch-reader
  kubectl -n "$NS" delete pod spoke-scratch-reader --wait --timeout="$TIMEOUT" >/dev/null
}

# A CSI inline volume of the dataset.
wl_check_inline() {
  wl_apply inline-pod.yaml
  wl_wait_pod_done spoke-inline-verify
  kubectl -n "$NS" delete pod spoke-inline-verify --wait --timeout="$TIMEOUT" >/dev/null
}

# wl_start_reader SECONDS: starts reader-pod.yaml and waits for its first successful pass.
wl_start_reader() {
  wl_apply reader-pod.yaml READER_SECONDS="$1"
  kubectl -n "$NS" wait --for=condition=Ready pod/spoke-reader --timeout="$TIMEOUT" >/dev/null ||
    { wl_dump_pod "$NS" spoke-reader; die "reader pod not Ready within $TIMEOUT"; }
  local deadline=$((SECONDS + 60))
  until kubectl -n "$NS" logs spoke-reader 2>/dev/null | grep -q ' ok$'; do
    [ $SECONDS -lt $deadline ] || { wl_dump_pod "$NS" spoke-reader; die "reader pod made no successful pass within 60 s"; }
    sleep 1
  done
}

# wl_reader_report: the reader's passes, summarised (ok / failed, and the first failures);
# fails when a pass failed or none passed.
wl_reader_report() {
  local lines ok failed
  lines=$(kubectl -n "$NS" logs spoke-reader)
  ok=$(grep -c ' ok$' <<<"$lines" || true)
  failed=$(grep -c ' FAIL:' <<<"$lines" || true)
  log "reader pod: $ok passes ok, $failed failed"
  # (awk, not head: head closing the pipe early fails the pipeline under pipefail)
  awk '/ FAIL:/ && n++ < 3' <<<"$lines" | while read -r l; do log "  reader: $l"; done
  awk '/ ok$/ { last = $0 } END { if (last != "") print last }' <<<"$lines" |
    while read -r l; do log "  reader (last ok pass): $l"; done
  awk '/ FAIL:/ { last = $0 } END { if (last != "") print last }' <<<"$lines" |
    while read -r l; do log "  reader (last failed pass): $l"; done
  [ "$failed" -eq 0 ] && [ "$ok" -gt 0 ]
}

# wl_wait_ok_passes N: waits (60 s at most) until the reader logged N successful passes.
wl_wait_ok_passes() {
  local deadline=$((SECONDS + 60))
  until [ "$(kubectl -n "$NS" logs spoke-reader 2>/dev/null | grep -c ' ok$')" -ge "$1" ]; do
    [ $SECONDS -lt $deadline ] || { wl_dump_pod "$NS" spoke-reader; die "reader pod made no $1 successful passes within 60 s"; }
    sleep 1
  done
}

# wl_passes_between FROM TO: the reader's passes that started at or after FROM and ended at or
# before TO (epoch seconds), as "ok failed longest_seconds".
wl_passes_between() {
  kubectl -n "$NS" logs spoke-reader | awk -v from="$1" -v to="$2" '
    { split($2, t, "-"); if (t[1] < from || t[2] > to) next
      if ($5 == "ok") ok++; else if ($5 == "FAIL:") failed++
      if (t[2] - t[1] > longest) longest = t[2] - t[1] }
    END { printf "%d %d %d\n", ok, failed, longest }'
}

# wl_replace_agent NODE OLD SECONDS: waits until a Ready agent pod other than OLD runs on NODE;
# prints its name.
wl_replace_agent() {
  local new deadline=$((SECONDS + $3))
  until new=$(wl_agent_on "$1") && [ -n "$new" ] && [ "$new" != "$2" ] &&
        kubectl -n "$DRIVER_NS" wait --for=condition=Ready "pod/$new" --timeout=5s >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "no Ready replacement agent pod on $1 within $3 s"
    sleep 1
  done
  echo "$new"
}

# wl_finish_reader: waits for the reader pod to finish, reports its passes and deletes it;
# dies unless it Succeeded with no failed pass.
wl_finish_reader() {
  local phase clean=0
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Succeeded pod/spoke-reader \
    --timeout=180s >/dev/null 2>&1 || true
  phase=$(kubectl -n "$NS" get pod spoke-reader -o jsonpath='{.status.phase}')
  wl_reader_report || clean=$?
  [ "$phase" = Succeeded ] || { wl_dump_pod "$NS" spoke-reader; die "reader pod ended $phase, not Succeeded"; }
  kubectl -n "$NS" delete pod spoke-reader --wait --timeout="$TIMEOUT" >/dev/null
  [ $clean -eq 0 ] || die "the reader saw failed passes (or none passed)"
}

# wl_delete_agent_under_reader: deletes the agent pod of the reader's node while the reader
# reads, waits for the DaemonSet's replacement; every pass of the reader must succeed, and it
# must pass again through the new agent (the node plugin keeps the connections, the new agent
# takes them over).
wl_delete_agent_under_reader() {
  local node agent new ready_at
  wl_start_reader 40
  node=$(kubectl -n "$NS" get pod spoke-reader -o jsonpath='{.spec.nodeName}')
  agent=$(wl_agent_on "$node")
  [ -n "$agent" ] || die "no agent pod on $node"
  log "deleting agent pod $agent while spoke-reader reads on $node"
  kubectl -n "$DRIVER_NS" delete pod "$agent" --wait --timeout="$TIMEOUT" >/dev/null
  new=$(wl_replace_agent "$node" "$agent" 120)
  ready_at=$(date +%s)
  log "replacement agent $new Ready"
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Succeeded pod/spoke-reader \
    --timeout=120s >/dev/null 2>&1 || true
  local ok failed longest
  read -r ok failed longest <<<"$(wl_passes_between "$ready_at" 9999999999)"
  log "reader passes after the replacement was Ready: $ok ok, $failed failed"
  [ "$ok" -gt 0 ] || die "the reader made no successful pass through the replacement agent"
  wl_finish_reader
}

# wl_delete_agent_hub_down CUT RESTORE SECONDS: the agent pod deleted while the hub is
# unreachable. A reader warms the dataset, then CUT drops the traffic to the hub, the page
# cache is dropped (the reader's next passes reach the agent), the agent pod is deleted and
# replaced, and RESTORE brings the hub back SECONDS after CUT. Every pass must succeed from the
# agent's cache, passes must complete while the hub is away, and go on after it is back (the
# mount was not detached).
wl_delete_agent_hub_down() {
  local cut=$1 restore=$2 outage=$3 node agent new="" cut_at restored_at ready_at=""
  wl_start_reader $((outage + 35))
  wl_wait_ok_passes 2
  node=$(kubectl -n "$NS" get pod spoke-reader -o jsonpath='{.spec.nodeName}')
  agent=$(wl_agent_on "$node")
  [ -n "$agent" ] || die "no agent pod on $node"
  "$cut"
  cut_at=$(date +%s)
  sync
  echo 3 >/proc/sys/vm/drop_caches || log "could not drop the page cache: passes may not reach the agent"
  log "hub unreachable; deleting agent pod $agent while spoke-reader reads on $node"
  kubectl -n "$DRIVER_NS" delete pod "$agent" --wait --timeout="$TIMEOUT" >/dev/null
  # The replacement may come up while the hub is still down; the hub returns on time either way.
  while [ "$(date +%s)" -lt $((cut_at + outage)) ]; do
    if [ -z "$ready_at" ] && new=$(wl_agent_on "$node") && [ -n "$new" ] && [ "$new" != "$agent" ] &&
       kubectl -n "$DRIVER_NS" wait --for=condition=Ready "pod/$new" --timeout=1s >/dev/null 2>&1; then
      ready_at=$(date +%s)
      log "replacement agent $new Ready $((ready_at - cut_at)) s after the hub went away"
    fi
    sleep 0.5
  done
  "$restore"
  restored_at=$(date +%s)
  log "hub reachable again after $((restored_at - cut_at)) s"
  if [ -z "$ready_at" ]; then
    new=$(wl_replace_agent "$node" "$agent" 120)
    log "replacement agent $new Ready $(( $(date +%s) - cut_at )) s after the hub went away (after it returned)"
  fi
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Succeeded pod/spoke-reader \
    --timeout=$((outage + 120))s >/dev/null 2>&1 || true
  # What the new agent said about the takeover and the hub.
  kubectl -n "$DRIVER_NS" logs "$new" -c spoke-cache-agent 2>/dev/null |
    grep -i -E 'adopt|take|detach|hub|walk' | awk 'n++ < 12' | while read -r l; do log "  agent: $l"; done
  # (Windows start a second after the cut and the restore: a pass started in that second may
  # have started before it.)
  local ok failed longest ok_after failed_after
  read -r ok failed longest <<<"$(wl_passes_between $((cut_at + 1)) "$restored_at")"
  log "reader passes while the hub was unreachable: $ok ok, $failed failed, longest $longest s"
  read -r ok_after failed_after longest <<<"$(wl_passes_between $((restored_at + 1)) 9999999999)"
  log "reader passes after the hub returned: $ok_after ok, $failed_after failed, longest $longest s"
  # The passes that overlapped the outage, as the reader saw them.
  kubectl -n "$NS" logs spoke-reader | awk -v from="$cut_at" -v to="$restored_at" '
    { split($2, t, "-") } t[2] >= from && t[1] <= to' |
    while read -r l; do log "  reader (hub down): $l"; done
  [ "$ok_after" -gt 0 ] || die "the reader made no successful pass after the hub returned (mount detached?)"
  # The dataset is cached and the kernel's inodes are in the agent's state directory: the new
  # agent serves them while the hub is away, without waiting for it.
  [ "$ok" -gt 0 ] || die "no pass completed while the hub was unreachable: cached data waited for the hub"
  wl_finish_reader
}

# wl_restart_node_plugin: deletes the node plugin pod of every node, waits for the rollout,
# then a new pod mounts the dataset through the new plugin.
wl_restart_node_plugin() {
  kubectl -n "$DRIVER_NS" delete pod --wait --timeout="$TIMEOUT" \
    -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=node >/dev/null
  kubectl -n "$DRIVER_NS" rollout status "$(wl_daemonset node)" --timeout="$TIMEOUT" >&2 ||
    die "node plugin DaemonSet did not roll out again within $TIMEOUT"
  local r
  r=$(wl_verify_job spoke-verify-after-node-restart)
}

# wl_check_volume_stats NODE SECONDS NEED_HEALTH: kubelet's volume metrics list the dataset
# PVC while a pod uses it (NodeGetVolumeStats); with NEED_HEALTH=1 also its health
# (VolumeCondition; kubelet's CSIVolumeHealth feature gate), which must be normal.
wl_check_volume_stats() {
  local node=$1 deadline=$((SECONDS + $2)) need_health=$3 m cap abnormal
  while :; do
    m=$(kubectl get --raw "/api/v1/nodes/$node/proxy/metrics" 2>/dev/null |
        grep -E '^kubelet_volume_stats_(capacity_bytes|health_status_abnormal)\{.*persistentvolumeclaim="dataset"' || true)
    cap=$(awk '/^kubelet_volume_stats_capacity_bytes/ { print $NF; exit }' <<<"$m")
    abnormal=$(awk '/^kubelet_volume_stats_health_status_abnormal/ { print $NF; exit }' <<<"$m")
    [ -n "$cap" ] && { [ "$need_health" = 0 ] || [ -n "$abnormal" ]; } && break
    [ $SECONDS -lt $deadline ] || die "kubelet's metrics on $node show no volume stats/health for PVC dataset within $2 s (got: ${m:-nothing})"
    sleep 2
  done
  log "kubelet volume metrics for PVC dataset: capacity_bytes=$cap health_status_abnormal=$abnormal"
  [ "${abnormal:-0}" = 0 ] || die "kubelet reports the dataset volume abnormal (VolumeCondition)"
}

# wl_delete_workloads: every object of these manifests gone (label
# e2e.spoke.csi.dev/workload), and the dataset PVs (reclaimPolicy Retain) of this namespace.
wl_delete_workloads() {
  local sel=e2e.spoke.csi.dev/workload=true pv
  kubectl -n "$NS" delete jobs -l "$sel" --cascade=foreground --wait --timeout="$TIMEOUT" >/dev/null
  kubectl -n "$NS" delete pods -l "$sel" --wait --timeout="$TIMEOUT" >/dev/null
  kubectl -n "$NS" delete pods -l job-name --wait --timeout="$TIMEOUT" >/dev/null
  kubectl -n "$NS" delete pvc -l "$sel" --wait --timeout="$TIMEOUT" >/dev/null
  wl_ns_pvs() {
    kubectl get pv -o jsonpath="{range .items[?(@.spec.claimRef.namespace==\"$NS\")]}{.metadata.name} {.spec.persistentVolumeReclaimPolicy}{'\n'}{end}"
  }
  wl_ns_pvs | awk '$2 == "Retain" { print $1 }' | xargs -r kubectl delete pv --wait \
    --timeout="$TIMEOUT" >/dev/null
  # The others (reclaimPolicy Delete) go once the driver's DeleteVolume succeeded.
  local deadline=$((SECONDS + 120))
  while [ -n "$(wl_ns_pvs)" ]; do
    [ $SECONDS -lt $deadline ] || die "PVs not deleted within 120 s: $(wl_ns_pvs | xargs)"
    sleep 1
  done
}
