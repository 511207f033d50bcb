# The SpokeWarmup steps of e2e/k8s/run.sh (sourced after lib.sh; same variables, plus NODE,
# EXPORT, the hub's export directory on this machine, and wl_metric/wl_agent_on of lib.sh).
# A cold dataset of its own (datasets/warm, StorageClass spoke-warm) so that the other steps'
# cold/warm checks are not disturbed.

WARM_SUBDIR=datasets/warm

# wl_warm_dataset: ~36 MiB in four top-level directories (a few seconds to warm, so that
# progress shows); meta/SHA256SUMS lists the others.
# Prints the bytes of its files.
wl_warm_dataset() {
  local ds=$EXPORT/$WARM_SUBDIR
  mkdir -p "$ds"
  python3 - "$ds" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(32)
for i in range(40):
    d = os.path.join(root, "shard-%d" % (i % 2))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "s-%03d.bin" % i), "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 200 * 1024)))
os.makedirs(os.path.join(root, "big"), exist_ok=True)
for j in range(2):
    with open(os.path.join(root, "big", "part-%d.tar" % j), "wb") as f:
        f.write(rng.randbytes(15 << 20))
PY
  mkdir -p "$ds/meta"
  printf 'part-0.tar\n\npart-1.tar\n' >"$ds/big/list.txt"   # warm-list.yaml's listFile, in its subDir
  (cd "$ds" && find . -type f ! -path ./meta/SHA256SUMS -print0 | sort -z | xargs -0 sha256sum) >"$W/warm.sums"
  mv "$W/warm.sums" "$ds/meta/SHA256SUMS"
  find "$ds" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }'
}

# wl_refused FILE FIELD: kubectl apply of FILE must fail with a message naming FIELD.
wl_refused() {
  local out
  if out=$(wl_render "$1" | kubectl apply -f - 2>&1); then
    die "kubectl apply of $1 succeeded; the schema should refuse it ($2)"
  fi
  grep -qF "$2" <<<"$out" || die "kubectl apply of $1 failed without naming $2: $out"
  log "refused as expected: $(grep -oF "$2" <<<"$out" | head -1) ... ($(wc -c <<<"$out") bytes of error)"
}

wl_warmup_field() { kubectl -n "$NS" get spokewarmup warm -o jsonpath="{$1}" 2>/dev/null; }

# wl_gated_pod: the gated Job's pod name.
wl_gated_pod() {
  kubectl -n "$NS" get pods -l job-name=spoke-gated-reader -o jsonpath='{.items[0].metadata.name}' 2>/dev/null
}

# wl_watch_warmup SECONDS: prints `kubectl get spokewarmups` whenever it changes, until the
# warm-up is Ready; while it is not, the gated pod must stay unscheduled.
wl_watch_warmup() {
  local deadline=$((SECONDS + $1)) last="" now phase pod node pct prev=0 seen=""
  while :; do
    # Where the gated pod runs, read before the phase: the gate lifts only once the warm-up is
    # Ready, so a pod scheduled here with a phase read after it not Ready broke the gate (read
    # the other way round, a warm-up turning Ready between the reads looks like a broken gate).
    node=""
    pod=$(wl_gated_pod)
    [ -z "$pod" ] || node=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.spec.nodeName}')
    now=$(kubectl -n "$NS" get spokewarmups 2>&1)
    [ "$now" = "$last" ] || { log "kubectl get spokewarmups:"; sed 's/^/    /' <<<"$now" >&2; last=$now; }
    phase=$(wl_warmup_field .status.phase)
    pct=$(wl_warmup_field .status.percent)
    if [ -n "$pct" ]; then
      [ "$pct" -ge "$prev" ] || die "the warm-up's percent went back from $prev to $pct"
      [ "$pct" = "$prev" ] || seen="$seen $pct"
      prev=$pct
    fi
    if [ "$phase" = Ready ]; then
      [ "$pct" = 100 ] || die "warm-up Ready at $pct %, want 100"
      log "percent seen on the way:${seen:- (none but the last)}"
      return 0
    fi
    [ "$phase" = Failed ] && { kubectl -n "$NS" get spokewarmup warm -o yaml >&2; die "warm-up Failed"; }
    [ -z "$node" ] || die "gated pod $pod was scheduled while the warm-up is $phase"
    [ $SECONDS -lt $deadline ] || { kubectl -n "$NS" get spokewarmup warm -o yaml >&2; die "warm-up not Ready within $1 s"; }
    sleep 0.5
  done
}

# wl_check_warmup: bad specs refused naming the field; a Job annotated wait-for is gated; the
# SpokeWarmup reaches 100 % on NODE (shown with kubectl get); only then the Job's pod is
# scheduled, and it reads the dataset from the cache (next to nothing from the hub); the node
# carries the dataset's warmth label; Events on the warm-up and the PVC; deleting the
# warm-up takes the label off (finalizer).
wl_check_warmup() {
  local bytes key pod ready_at started
  bytes=$(wl_warm_dataset)
  wl_apply warm-pvc.yaml
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound pvc/warm-data --timeout="$TIMEOUT" \
    >/dev/null || { kubectl -n "$NS" describe pvc warm-data >&2; die "PVC warm-data not Bound"; }
  wl_refused warmup-bad-nodes.yaml "spec.nodes: set exactly one of nodeSelector, podSelector, count"
  wl_refused warmup-bad-percent.yaml "spec.readyPercent"
  wl_refused warmup-bad-rate.yaml "spec.rateLimit"
  wl_refused warmup-bad-source.yaml "spec.source: set exactly one of pvc, storageClass"
  wl_refused warmup-bad-source.yaml "spec.source.subDir: a relative path that stays in the volume"
  wl_apply warm-holder.yaml
  kubectl -n "$NS" wait --for=condition=Ready pod/spoke-warm-holder --timeout="$TIMEOUT" >/dev/null ||
    { wl_dump_pod "$NS" spoke-warm-holder; die "pod spoke-warm-holder not Ready"; }
  wl_apply gated-job.yaml
  wl_wait_gated 30
  wl_apply warmup.yaml NODE="$NODE"
  wl_watch_warmup 120
  ready_at=$(wl_warmup_field .status.lastCompletion)
  log "warm-up Ready at $ready_at: $(wl_warmup_field '.status.nodes[0]')"
  # One worker: a healthy run needs no retry (a second would mean a lost or wrong status).
  if [ "$(wl_warmup_field '.status.nodes[0].attempts')" != 1 ]; then
    kubectl -n "$NS" get events --field-selector involvedObject.name=warm >&2 || true
    die "the node took $(wl_warmup_field '.status.nodes[0].attempts') worker pods, want 1 (events above)"
  fi
  wl_wait_job_done spoke-gated-reader
  pod=$(wl_gated_pod)
  started=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.status.startTime}')
  [[ ! $started < $ready_at ]] || die "gated pod started at $started, before the warm-up was Ready ($ready_at)"
  wl_check_reader_hub_bytes "$bytes"
  wl_check_warm_label_and_events
  wl_apply gated-late-pod.yaml
  wl_wait_pod_done spoke-gated-late
  [ -n "$(kubectl -n "$NS" get pod spoke-gated-late -o jsonpath='{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution}')" ] ||
    die "the pod released by the controller has no required node affinity toward the warm nodes"
  log "a pod gated after the warm-up was Ready was released and ran (required affinity to the warm nodes)"
  kubectl -n "$NS" delete pod spoke-gated-late --wait=false >/dev/null
  kubectl -n "$NS" delete spokewarmup warm --wait --timeout="$TIMEOUT" >/dev/null
  key=$(kubectl get node "$NODE" -o json | python3 -c 'import json,sys; print(" ".join(k for k in json.load(sys.stdin)["metadata"]["labels"] if k.startswith("warm.spoke.csi.dev/")))')
  [ -z "$key" ] || die "node label(s) $key left after the warm-up was deleted"
  kubectl -n "$NS" delete job spoke-gated-reader --cascade=foreground --wait --timeout="$TIMEOUT" >/dev/null
  wl_check_warmup_restart
  # (spoke-warm-holder keeps warm-data staged for wl_check_warmup_verify, which deletes it.)
}

# wl_wait_gated SECONDS: the gated Job's pod exists, carries the scheduling gate and no node.
wl_wait_gated() {
  local deadline=$((SECONDS + $1)) pod gates
  until pod=$(wl_gated_pod) && [ -n "$pod" ]; do
    [ $SECONDS -lt $deadline ] || die "the gated Job made no pod within $1 s"
    sleep 0.5
  done
  gates=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.spec.schedulingGates[*].name}')
  [ "$gates" = spoke.csi.dev/warmup ] || die "pod $pod has scheduling gates '$gates', not the webhook's spoke.csi.dev/warmup"
  log "pod $pod is gated ($gates), waiting for SpokeWarmup warm"
}

wl_wait_job_done() {
  if ! wl_poll "$(wl_secs)" "Job $1" wl_job_state "$1"; then
    kubectl -n "$NS" describe job "$1" >&2 || true
    kubectl -n "$NS" logs "job/$1" >&2 || true
    die "Job $1 did not succeed"
  fi
  log "$1: $(kubectl -n "$NS" logs "job/$1")"
}

# The dataset's label at 100 on NODE, and the Ready events on the warm-up and the PVC.
wl_check_warm_label_and_events() {
  local key value
  key=$(wl_warmup_field .status.datasetLabel)
  [ -n "$key" ] || die "the warm-up's status names no dataset label"
  WL_WARM_LABEL=$key
  value=$(kubectl get node "$NODE" -o json | python3 -c "import json,sys; print(json.load(sys.stdin)['metadata']['labels'].get('$key', ''))")
  [ "$value" = 100 ] || die "node $NODE has $key='$value', want 100"
  log "node $NODE: $key=$value"
  kubectl -n "$NS" get events --field-selector involvedObject.kind=PersistentVolumeClaim,involvedObject.name=warm-data,reason=WarmupReady \
    -o jsonpath='{.items[*].message}' | grep -q . || die "no WarmupReady Event on PVC warm-data"
  kubectl -n "$NS" get events --field-selector involvedObject.kind=SpokeWarmup,involvedObject.name=warm,reason=Ready \
    -o jsonpath='{.items[*].message}' | grep -q . || die "no Ready Event on SpokeWarmup warm"
}

# wl_check_reader_hub_bytes BYTES: the gated reader fetched next to nothing from the hub. The
# holder kept the volume staged, so the agent's hub counter holds the warm-up's fetches and the
# reader's: about one dataset in all (the warm-up fetched it, the reader read the cache). A
# reader that fetched from the hub would make it about two.
wl_check_reader_hub_bytes() {
  local bytes=$1 agent hub
  agent=$(wl_agent_on "$NODE")
  hub=$(wl_metric spoke_hub_read_bytes_total "$agent")
  log "dataset $bytes bytes; from the hub through warm-up and reader together: $hub bytes"
  [ "$hub" -ge "$bytes" ] || die "the hub served $hub bytes, less than the dataset's $bytes: the warm-up did not go through the agent"
  [ "$hub" -le $((bytes + bytes / 20)) ] ||
    die "the hub served $hub bytes for a $bytes-byte dataset: the gated reader did not read from the cache"
}

# wl_check_warmup_restart: a warm-up of a StorageClass and sub-directory (no PVC of its own:
# the controller claims the class's volume) with a list file there, and the controller pod
# deleted right after it was created: the new controller (the Lease is released on shutdown)
# carries it to Ready with the one worker it has, not a second; its claim goes with it.
wl_check_warmup_restart() {
  local old attempts claim=spoke-warmup-warm-list
  wl_apply warmup-list.yaml NODE="$NODE"
  old=$(kubectl -n "$DRIVER_NS" get pods -o name \
    -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=controller)
  kubectl -n "$DRIVER_NS" delete "$old" --wait --timeout="$TIMEOUT" >/dev/null
  log "deleted controller $old right after creating SpokeWarmup warm-list"
  kubectl -n "$DRIVER_NS" wait --for=condition=Ready pod --timeout="$TIMEOUT" \
    -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=controller >/dev/null ||
    die "no Ready controller pod after deleting $old"
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Ready spokewarmup/warm-list --timeout=90s >/dev/null ||
    { kubectl -n "$NS" get spokewarmup warm-list -o yaml >&2; die "warm-list not Ready after the controller restart"; }
  kubectl -n "$NS" get spokewarmups warm-list >&2
  attempts=$(kubectl -n "$NS" get spokewarmup warm-list -o jsonpath='{.status.nodes[0].attempts}')
  [ "$attempts" = 1 ] || die "warm-list's node took $attempts worker pods, want 1 across the restart"
  [ "$(kubectl -n "$NS" get spokewarmup warm-list -o jsonpath='{.status.nodes[0].message}')" = "path 2 of 2" ] ||
    die "warm-list did not warm the list file's two paths"
  [ "$(kubectl -n "$NS" get spokewarmup warm-list -o jsonpath='{.status.nodes[0].filesDone}')" = 2 ] ||
    die "warm-list warmed $(kubectl -n "$NS" get spokewarmup warm-list -o jsonpath='{.status.nodes[0].filesDone}') files, want big/part-0.tar and big/part-1.tar"
  log "warm-list Ready after the restart: $(kubectl -n "$NS" get spokewarmup warm-list -o jsonpath='{.status.nodes[0].message}, {.status.nodes[0].filesDone} files')"
  # The class's volume is warm-data's (a dataset class names one volume): the same label.
  [ "$(kubectl -n "$NS" get spokewarmup warm-list -o jsonpath='{.status.datasetLabel}')" = "$WL_WARM_LABEL" ] ||
    die "warm-list's dataset label is not warm-data's ($WL_WARM_LABEL): the controller's claim names another volume"
  kubectl -n "$NS" get pvc "$claim" -o jsonpath='{.status.phase} {.spec.storageClassName} {.metadata.ownerReferences[0].name}' |
    grep -qx 'Bound spoke-warm warm-list' || die "no Bound claim $claim of spoke-warm owned by warm-list"
  kubectl -n "$NS" delete spokewarmup warm-list --wait --timeout="$TIMEOUT" >/dev/null
  kubectl -n "$NS" wait --for=delete "pvc/$claim" --timeout=90s >/dev/null 2>&1 ||
    die "claim $claim still there 90 s after its warm-up was deleted"
  log "warm-list's claim $claim of StorageClass spoke-warm was Bound, and went with the warm-up"
}

# wl_warm_change_on_hub: a file of warm-data changes on the hub (new content and size, same
# file), and meta/SHA256SUMS with it: two files whose cached blocks are of an older version.
# The volume is immutable and stays staged (spoke-warm-holder), so only a verify pass can
# notice. The files change on the export's disk; the hub (k8s_hub: attributes expire after
# 1 s) answers with their new attributes after 2 s.
wl_warm_change_on_hub() {
  local ds=$EXPORT/$WARM_SUBDIR
  head -c 300000 /dev/urandom >"$ds/shard-0/s-000.bin"
  (cd "$ds" && find . -type f ! -path ./meta/SHA256SUMS -print0 | sort -z | xargs -0 sha256sum) >"$W/warm.sums"
  cat "$W/warm.sums" >"$ds/meta/SHA256SUMS"   # the same file, rewritten
  sleep 2
  log "changed on the hub: $WARM_SUBDIR/shard-0/s-000.bin and meta/SHA256SUMS"
}

# wl_check_warmup_verify NODES [DAMAGE]: SpokeWarmup warm-verify (rateLimit 32Mi, verify) on
# NODES (a spec.nodes value). The rate and the verify flag reach the agent of every chosen node
# (its log); each node ends Ready at 100 % with blocks verified and its label at 100. DAMAGE
# (optional) is a function that corrupts cached blocks of warm-data on NODE, except those of the
# file ids it is given, and prints how many:
# then a file is also changed on the hub, and the status must show at least that many blocks
# fetched again, both changed files, and the agent's checksum failures counting them. Creates
# warm-data when an earlier step has not; deletes spoke-warm-holder at the end.
wl_check_warmup_verify() {
  local nodes=$1 damage=${2:-} corrupted=0 failures0=0 n count node agent key value i repaired=0 changed=0
  if ! kubectl -n "$NS" get pvc warm-data >/dev/null 2>&1; then
    wl_warm_dataset >/dev/null
    wl_apply warm-pvc.yaml
    kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound pvc/warm-data --timeout="$TIMEOUT" \
      >/dev/null || { kubectl -n "$NS" describe pvc warm-data >&2; die "PVC warm-data not Bound"; }
  fi
  if [ -n "$damage" ]; then
    failures0=$(wl_metric spoke_checksum_failures_total "$(wl_agent_on "$NODE")")
    # Not the blocks of the files about to change on the hub: verify drops those as stale
    # without reading them (the hub's file ids are the export's inode numbers).
    corrupted=$("$damage" "$(stat -c %i "$EXPORT/$WARM_SUBDIR/shard-0/s-000.bin" "$EXPORT/$WARM_SUBDIR/meta/SHA256SUMS" | xargs)")
    [ "$corrupted" -gt 0 ] || die "$damage corrupted no cached block"
    log "corrupted $corrupted cached blocks of warm-data on $NODE"
    wl_warm_change_on_hub
  fi
  wl_apply warmup-verify.yaml NODES="$nodes"
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Ready spokewarmup/warm-verify --timeout=120s >/dev/null ||
    { kubectl -n "$NS" get spokewarmup warm-verify -o yaml >&2; die "warm-verify not Ready within 120 s"; }
  log "kubectl get spokewarmups -o wide:"
  kubectl -n "$NS" get spokewarmups -o wide | sed 's/^/    /' >&2
  count=$(kubectl -n "$NS" get spokewarmup warm-verify -o jsonpath='{.status.nodes[*].node}' | wc -w)
  key=$(kubectl -n "$NS" get spokewarmup warm-verify -o jsonpath='{.status.datasetLabel}')
  for ((i = 0; i < count; i++)); do
    node=$(kubectl -n "$NS" get spokewarmup warm-verify -o jsonpath="{.status.nodes[$i].node}")
    n=$(kubectl -n "$NS" get spokewarmup warm-verify -o jsonpath="{.status.nodes[$i]}")
    log "node $node: $n"
    python3 - "$n" <<'PY' || die "node $node: the warm-up's status does not show a verify pass"
import json, sys
n = json.loads(sys.argv[1])
assert n["percent"] == 100, n
assert n.get("blocksVerified", 0) > 0, n
PY
    repaired=$((repaired + $(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("blocksRepaired", 0))' "$n")))
    changed=$((changed + $(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("filesChanged", 0))' "$n")))
    value=$(kubectl get node "$node" -o json | python3 -c "import json,sys; print(json.load(sys.stdin)['metadata']['labels'].get('$key', ''))")
    [ "$value" = 100 ] || die "node $node has $key='$value', want 100"
    agent=$(wl_agent_on "$node")
    kubectl -n "$DRIVER_NS" logs "$agent" -c spoke-cache-agent | grep 'msg="warmup started"' |
      grep -q 'rate_bytes_per_second=33554432 verify=true' ||
      die "agent $agent on $node logged no warm-up with rate_bytes_per_second=33554432 verify=true"
  done
  n=$(kubectl get nodes -o json | python3 -c "import json,sys; print(sum(1 for n in json.load(sys.stdin)['items'] if n['metadata']['labels'].get('$key') == '100'))")
  [ "$n" = "$count" ] || die "$n nodes carry $key=100, want the $count chosen ones only"
  WL_WARM_NODES=$count
  log "warm-verify: $count of $(kubectl get nodes -o name | wc -l) node(s) Ready and labelled, rate 32Mi and verify reached their agents; repaired $repaired blocks, $changed files changed"
  if [ -n "$damage" ]; then
    [ "$repaired" -ge "$corrupted" ] || die "verify fetched $repaired blocks again, fewer than the $corrupted corrupted"
    [ "$changed" -ge 2 ] || die "verify found $changed files changed on the hub, want 2"
    n=$(wl_metric spoke_checksum_failures_total "$(wl_agent_on "$NODE")")
    [ $((n - failures0)) -ge "$corrupted" ] || die "the agent counted $((n - failures0)) checksum failures, fewer than the $corrupted corrupted blocks"
    log "agent checksum failures +$((n - failures0)) (the corrupted blocks found by verify)"
  fi
  kubectl -n "$NS" delete spokewarmup warm-verify --wait --timeout="$TIMEOUT" >/dev/null
  kubectl -n "$NS" delete pod spoke-warm-holder --ignore-not-found --wait=false >/dev/null
}
