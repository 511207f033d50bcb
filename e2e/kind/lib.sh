# Steps of e2e/kind/run.sh: a Docker engine of the run's own, a three-node kind cluster, the
# multi-node checks, and the teardown that restores the host. Sourced after
# e2e/lib/k8s_steps.sh (step, log, die, start, stop_pid, wait_for, ipt, sysctl_save, k8s_image,
# k8s_hub), whose globals it shares.

kind_preconditions() {
  [ "$(id -u)" = 0 ] || skip "needs root (dockerd, mounts, iptables)"
  local t
  for t in dockerd docker kind helm; do
    command -v "$t" >/dev/null || [ -x "$KIND_TOOLS/bin/$t" ] || skip "$t missing: run scripts/install-kind.sh"
  done
  [ -f "$KIND_TOOLS/node-image.tar" ] || skip "$KIND_TOOLS/node-image.tar missing: run scripts/install-kind.sh"
  export PATH=$KIND_TOOLS/bin:$PATH
}

# kind_begin: one run at a time per machine (the network's name and subnet are fixed), the work
# dir, the teardown trap.
kind_begin() {
  exec 8>/run/spoke-e2e-kind.lock
  flock -w 1800 8 || die "another e2e/kind run held /run/spoke-e2e-kind.lock for 30 min"
  ip link show "$KIND_BRIDGE" >/dev/null 2>&1 && die "$KIND_BRIDGE already exists (left from an earlier run?)"
  W=$(mktemp -d /var/tmp/spoke-e2e-kind.XXXXXX)
  chmod 755 "$W"
  declare -gA pids=() sysctl_saved=()
  iptables_rules=()
  host_routes=()
  hub_cut_rules=()
  # Docker creates /lib/modules for kind's read-only mount of it when the host has none.
  lib_modules_created=0
  [ -e /lib/modules ] || lib_modules_created=1
  mkdir -p "$W/logs" "$W/docker"
  export DOCKER_HOST=unix://$W/docker/sock KUBECONFIG=$W/kubeconfig
  trap kind_teardown EXIT
  trap 'exit 130' INT TERM
}

docker_ready() { docker info >/dev/null 2>&1; }

# kind_docker: dockerd with the run's own paths, no iptables/forwarding of its own, the runc
# wrapper as default runtime; the kind network; containment; the node image loaded.
kind_docker() {
  # kubelet in the nodes writes host-wide sysctls (kernel.panic...): restored by the teardown.
  sysctl_save kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom \
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward \
    net.bridge.bridge-nf-call-iptables net.netfilter.nf_conntrack_max \
    net.netfilter.nf_conntrack_tcp_timeout_established \
    net.netfilter.nf_conntrack_tcp_timeout_close_wait fs.inotify.max_user_watches \
    fs.inotify.max_user_instances
  cat >"$W/docker/daemon.json" <<EOF
{"runtimes": {"spoke-capfilter": {"path": "$HERE/runc-capfilter"}},
 "default-runtime": "spoke-capfilter"}
EOF
  start dockerd dockerd --config-file "$W/docker/daemon.json" --data-root "$W/docker/data" \
    --exec-root "$W/docker/exec" --pidfile "$W/docker/dockerd.pid" --host "$DOCKER_HOST" \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none
  wait_for 60 "dockerd answering" docker_ready
  alive dockerd
  docker network create -d bridge --subnet "$NET_CIDR" --gateway "$BRIDGE_IP" \
    -o com.docker.network.bridge.name="$KIND_BRIDGE" \
    -o com.docker.network.bridge.enable_ip_masquerade=false "$NETWORK" >/dev/null
  ipt mangle FORWARD -i "$KIND_BRIDGE" ! -o "$KIND_BRIDGE" -j DROP
  ipt mangle FORWARD -o "$KIND_BRIDGE" ! -i "$KIND_BRIDGE" -j DROP
  docker load -i "$KIND_TOOLS/node-image.tar" >"$W/logs/docker-load.log" 2>&1 ||
    { cat "$W/logs/docker-load.log" >&2; die "docker load of the node image failed"; }
  log "dockerd $(docker version -f '{{.Server.Version}}'), runtime $(docker info -f '{{.DefaultRuntime}}'); network $NETWORK $NET_CIDR on $KIND_BRIDGE; forwarding to/from other interfaces dropped"
}

node_ip() { docker inspect -f "{{(index .NetworkSettings.Networks \"$NETWORK\").IPAddress}}" "$1"; }
node_sh() { docker exec -i "$1" sh -c "$2"; }   # NODE SCRIPT: a shell script on a node
pod_cidr() { kubectl get node "$1" -o jsonpath='{.spec.podCIDR}'; }
has_pod_cidr() { [ -n "$(pod_cidr "$1")" ]; }

# kind_cni NODE: the bridge CNI config of NODE for its pod subnet (kind's kindnet image
# cannot be pulled here; this bridge does what the e2e needs and enforces no NetworkPolicy).
kind_cni() {
  local cidr gw
  cidr=$(pod_cidr "$1")
  gw=${cidr%.0/24}.1
  node_sh "$1" 'mkdir -p /etc/cni/net.d && cat >/etc/cni/net.d/10-spoke-e2e.conflist' <<EOF
{"cniVersion": "0.4.0", "name": "spoke-e2e-kind", "plugins": [
  {"type": "bridge", "bridge": "kindpods0", "isGateway": true, "ipMasq": false,
   "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr", "gateway": "$gw"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
}

# kind_cluster: the cluster, its CNI and routes (node to node, and the host to the pods so
# that the hub answers them on the kind bridge); every node Ready.
kind_cluster() {
  local n m ip cidr cp
  KIND_EXPERIMENTAL_DOCKER_NETWORK=$NETWORK kind create cluster --name "$CLUSTER" \
    --image "$NODE_IMAGE" --config "$HERE/kind-config.yaml" --kubeconfig "$W/kind.kubeconfig" \
    >"$W/logs/kind-create.log" 2>&1 || { tail -30 "$W/logs/kind-create.log" >&2; die "kind create cluster failed"; }
  cluster_created=1
  mapfile -t kind_nodes < <(kind get nodes --name "$CLUSTER" | sort)
  cp=$CLUSTER-control-plane
  # The API server by the control plane's address on the kind network (no port publishing).
  sed "s#server: https://.*#server: https://$(node_ip "$cp"):6443#" "$W/kind.kubeconfig" >"$KUBECONFIG"
  for n in "${kind_nodes[@]}"; do
    wait_for 60 "pod subnet of $n" has_pod_cidr "$n"
    kind_cni "$n"
  done
  for n in "${kind_nodes[@]}"; do
    ip=$(node_ip "$n")
    cidr=$(pod_cidr "$n")
    ip route add "$cidr" via "$ip" dev "$KIND_BRIDGE"
    host_routes+=("$cidr via $ip dev $KIND_BRIDGE")
    for m in "${kind_nodes[@]}"; do
      [ "$m" = "$n" ] || node_sh "$m" "ip route add $cidr via $ip"
    done
  done
  wait_for 120 "every node Ready" kubectl wait --for=condition=Ready nodes --all --timeout=5s
  wait_for 60 "default service account" kubectl -n default get serviceaccount default
  kind_cluster_dns
  log "nodes: $(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.spec.podCIDR} {end}')"
}

# kind_cluster_dns: CoreDNS answers for the cluster's names only (no upstream: containment);
# the agents find their peers through the headless Service's DNS.
kind_cluster_dns() {
  kubectl -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}' |
    awk '/^ *forward / { skip = 1 } skip { if (/}/) skip = 0; next } { print }' >"$W/Corefile"
  grep -q kubernetes "$W/Corefile" || die "CoreDNS's Corefile has no kubernetes block: $(cat "$W/Corefile")"
  kubectl -n kube-system create configmap coredns --from-file=Corefile="$W/Corefile" \
    --dry-run=client -o yaml | kubectl replace -f - >/dev/null
  kubectl -n kube-system rollout restart deployment coredns >/dev/null
  kubectl -n kube-system rollout status deployment coredns --timeout="$TIMEOUT" >/dev/null ||
    die "CoreDNS not ready"
}

# kind_wan_hub: a second dataset on the hub, no node has read it, and spoke-wan-proxy in front
# of the hub (60 ms) for it.
kind_wan_hub() {
  local ds
  export WAN_DATASET_SUBDIR=datasets/wan
  ds=$EXPORT/$WAN_DATASET_SUBDIR
  mkdir -p "$ds"
  python3 - "$ds" <<'PY'
import os, random, sys
rng = random.Random(31)
for i in range(24):
    with open(os.path.join(sys.argv[1], "part-%02d.bin" % i), "wb") as f:
        f.write(rng.randbytes(2 << 20))
PY
  (cd "$ds" && sha256sum part-*.bin) >"$W/SHA256SUMS.wan"
  mv "$W/SHA256SUMS.wan" "$ds/SHA256SUMS"
  WAN_NFS_PORT=$(free_port)
  WAN_MOUNT_PORT=$(free_port)
  export WAN_NFS_PORT WAN_MOUNT_PORT
  start wan-proxy "$BUILD/e2e/wan-proxy/spoke-wan-proxy" --delay-ms 60 \
    --route "$BRIDGE_IP:$WAN_NFS_PORT=$BRIDGE_IP:$NFS_PORT" \
    --route "$BRIDGE_IP:$WAN_MOUNT_PORT=$BRIDGE_IP:$MOUNT_PORT" --stats-file "$W/wan-proxy.stats"
  wait_for 10 "spoke-wan-proxy listening" python3 -c "import socket; socket.create_connection(('$BRIDGE_IP', $WAN_NFS_PORT), 1)"
  alive wan-proxy
  log "WAN dataset: 24 files, 48 MiB behind spoke-wan-proxy (60 ms) on $BRIDGE_IP ports $WAN_NFS_PORT/$WAN_MOUNT_PORT"
}

# kind_image: the Spoke image as e2e/k8s makes it (its rootfs cache is shared), then a link of
# its tarball in the work dir: an e2e/k8s run of other binaries replaces the cached tarball.
kind_image() {
  k8s_image
  ln "$spoke_tar" "$W/spoke-image.tar" 2>/dev/null || cp "$spoke_tar" "$W/spoke-image.tar"
  spoke_tar=$W/spoke-image.tar
}

# kind_helm_install: the Spoke image into every node, `helm install charts/spoke`; CSINode of
# every node lists the driver.
kind_helm_install() {
  local values=$W/values-kind.yaml n
  kind load image-archive "$spoke_tar" --name "$CLUSTER" >"$W/logs/kind-load.log" 2>&1 ||
    { cat "$W/logs/kind-load.log" >&2; die "kind load image-archive failed"; }
  wl_render "$HERE/values-kind.yaml" >"$values"
  kubectl -n "$DRIVER_NS" create secret generic spoke-peer-token \
    --from-literal=token="$(openssl rand -hex 32)" >/dev/null
  helm install "$RELEASE" "$ROOT/charts/spoke" --namespace "$DRIVER_NS" -f "$values" \
    --set-string "image.controller.repository=${SPOKE_IMAGE%:*},image.controller.tag=${SPOKE_IMAGE##*:}" \
    --set-string "image.node.repository=${SPOKE_IMAGE%:*},image.node.tag=${SPOKE_IMAGE##*:}" \
    --set-string "image.agent.repository=${SPOKE_IMAGE%:*},image.agent.tag=${SPOKE_IMAGE##*:}" \
    --wait --timeout "$TIMEOUT" >"$W/logs/helm-install.log" 2>&1 ||
    { cat "$W/logs/helm-install.log" >&2; die "helm install did not become ready within $TIMEOUT"; }
  for n in "${kind_nodes[@]}"; do
    wait_for 60 "CSINode $n listing spoke.csi.dev" \
      sh -c "kubectl get csinode $n -o jsonpath='{.spec.drivers[*].name}' | grep -qw spoke.csi.dev"
  done
  kubectl create namespace "$NS" >/dev/null
}

# hub_bytes_all: spoke_hub_read_bytes_total summed over every agent of the cluster.
hub_bytes_all() {
  local a sum=0
  for a in $(kubectl -n "$DRIVER_NS" get pods -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=agent \
               --field-selector status.phase=Running -o name); do
    sum=$((sum + $(wl_metric spoke_hub_read_bytes_total "${a#pod/}")))
  done
  echo "$sum"
}
node_reader_line() { kubectl -n "$NS" logs "$1" 2>/dev/null | grep '^verified '; }

pod_running() { [ "$(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}')" = Running ]; }

wan_bytes_from_hub() { awk '{ print $2 }' "$W/wan-proxy.stats" 2>/dev/null || echo 0; }

# kind_read_on_every_node: the WAN dataset, which no node has read before, staged on every
# node by a holder pod (an agent serves its peers only the volumes it has mounted), then one
# reader per node (pinned by nodeName), all at once, verifies the whole dataset. The hub's
# bytes are what crossed the WAN proxy (the only way to this dataset), from the first mount on:
# the agents' prefetch starts at staging. Without peers that is 3x the dataset; measured here
# 1.02-1.42x in three runs (README). The agents stage at different times: a late one owns blocks its peers
# fetched before it mounted, and asks their previous owner's cache for them (docs/peers.md);
# on two loaded cores some peer asks pass their bound and go to the hub. Without the previous
# owner's answer it was 1.77-1.98x: the run fails at 1.7x or more.
kind_read_on_every_node() {
  local n bytes=0 before after line fetched
  wl_render "$HERE/dataset-wan-pvc.yaml" | kubectl apply -f - >/dev/null
  before=$(wan_bytes_from_hub)
  for n in "${kind_nodes[@]}"; do
    wl_render "$HERE/node-holder.yaml" NODE="$n" CLAIM=dataset-wan | kubectl apply -f - >/dev/null
  done
  for n in "${kind_nodes[@]}"; do
    wait_for "$(wl_secs)" "pod spoke-node-holder-$n running" pod_running "spoke-node-holder-$n"
  done
  for n in "${kind_nodes[@]}"; do
    wl_render "$HERE/node-reader.yaml" NODE="$n" CLAIM=dataset-wan | kubectl apply -f - >/dev/null
  done
  for n in "${kind_nodes[@]}"; do
    wait_for "$(wl_secs)" "pod spoke-node-reader-$n verified the dataset" node_reader_line "spoke-node-reader-$n"
    line=$(node_reader_line "spoke-node-reader-$n")
    [[ $line =~ verified\ ([0-9]+)\ files,\ ([0-9]+)\ bytes ]] || die "spoke-node-reader-$n: $line"
    bytes=${BASH_REMATCH[2]}
    log "$n: $line"
  done
  sleep 1   # the proxy rewrites its stats every 200 ms
  after=$(wan_bytes_from_hub)
  fetched=$((after - before))
  log "hub bytes with peers: $fetched bytes crossed the 60 ms WAN for ${#kind_nodes[@]} nodes reading the $bytes-byte dataset: $(awk -v h=$fetched -v d="$bytes" 'BEGIN { printf "%.2f", h / d }') x the dataset (without peers: ${#kind_nodes[@]} x); agents' hub counters now: $(hub_bytes_all) bytes"
  [ "$fetched" -ge "$bytes" ] || die "only $fetched bytes crossed the WAN for a $bytes-byte dataset: not read through the hub"
  [ "$fetched" -lt $((bytes * 17 / 10)) ] ||
    die "$fetched bytes crossed the WAN for a $bytes-byte dataset read on ${#kind_nodes[@]} nodes: 1.7x or more, where peers make it about 1x"
  kubectl -n "$NS" delete pods -l 'app.kubernetes.io/name in (spoke-node-reader,spoke-node-holder)' \
    --wait --timeout="$TIMEOUT" >/dev/null
}

# kind_warmup_two_nodes: SpokeWarmup warm-verify with nodes.count 2 (wl_check_warmup_verify:
# each chosen node Ready at 100 % with its own worker, a verify pass and the dataset label);
# the third node carries no label of the dataset. Deleting the warm-up takes the labels off.
kind_warmup_two_nodes() {
  local key
  wl_check_warmup_verify "{count: 2}"
  [ "$WL_WARM_NODES" = 2 ] || die "warm-verify warmed $WL_WARM_NODES nodes, want 2 (nodes.count)"
  key=$(kubectl get nodes -o json | python3 -c '
import json, sys
print(" ".join(k for n in json.load(sys.stdin)["items"] for k in n["metadata"]["labels"] if k.startswith("warm.spoke.csi.dev/")))')
  [ -z "$key" ] || die "warm-up labels left on the nodes after the warm-up was deleted: $key"
  log "no warm-up label left on any node after the warm-up was deleted"
}

# kind_rolling_upgrade_under_reader: `helm upgrade` rolls the agent and node DaemonSets across
# the nodes while a reader reads the dataset; every pass of the reader must succeed.
kind_rolling_upgrade_under_reader() {
  local up_start up_end ok failed longest
  wl_start_reader 75   # the upgrade takes 10-30 s here
  up_start=$(date +%s)
  helm upgrade "$RELEASE" "$ROOT/charts/spoke" --namespace "$DRIVER_NS" --reuse-values \
    --set logLevel=info --wait --timeout "$TIMEOUT" >"$W/logs/helm-upgrade.log" 2>&1 ||
    { cat "$W/logs/helm-upgrade.log" >&2; die "helm upgrade did not become ready within $TIMEOUT"; }
  kubectl -n "$DRIVER_NS" rollout status "$(wl_daemonset agent)" --timeout="$TIMEOUT" >/dev/null
  kubectl -n "$DRIVER_NS" rollout status "$(wl_daemonset node)" --timeout="$TIMEOUT" >/dev/null
  up_end=$(date +%s)
  read -r ok failed longest <<<"$(wl_passes_between "$up_start" "$up_end")"
  log "rolling upgrade took $((up_end - up_start)) s; reader passes within it: $ok ok, $failed failed, longest ${longest} s"
  wl_finish_reader
}

fuse_mounts_on() { # NODE: FUSE mounts under kubelet's dir on NODE
  node_sh "$1" "awk '\$5 ~ \"^/var/lib/kubelet/\" && / - fuse/' /proc/self/mountinfo"
}
no_fuse_mounts_on() { [ -z "$(fuse_mounts_on "$1")" ]; }
mover_node() {
  kubectl -n "$NS" get pods -l app.kubernetes.io/name=spoke-mover --field-selector status.phase=Running \
    -o jsonpath='{.items[0].spec.nodeName}' 2>/dev/null
}
mover_on_other_node() { local n; n=$(mover_node); [ -n "$n" ] && [ "$n" != "$1" ]; }

# kind_drain_worker: a Deployment's pod reads the dataset on a worker; that worker is drained:
# the pod moves to another node, nothing stays mounted on the drained one; then uncordoned.
kind_drain_worker() {
  local from
  wl_apply dataset-pvc.yaml
  wl_render "$HERE/mover-deployment.yaml" | kubectl apply -f - >/dev/null
  kubectl -n "$NS" rollout status deployment/spoke-mover --timeout="$TIMEOUT" >/dev/null ||
    die "deployment spoke-mover not ready"
  from=$(mover_node)
  [ -n "$from" ] || die "no running spoke-mover pod"
  fuse_mounts_on "$from" | grep -q . || die "no Spoke FUSE mount on $from while spoke-mover runs there"
  kubectl drain "$from" --ignore-daemonsets --delete-emptydir-data --timeout="$TIMEOUT" \
    >"$W/logs/drain.log" 2>&1 || { cat "$W/logs/drain.log" >&2; die "kubectl drain $from failed"; }
  wait_for 120 "spoke-mover running on another node than $from" mover_on_other_node "$from"
  wait_for 60 "no FUSE mount left on drained $from" no_fuse_mounts_on "$from"
  log "drained $from: spoke-mover moved to $(mover_node); no FUSE mount left on $from"
  kubectl uncordon "$from" >/dev/null
  kubectl -n "$NS" delete deployment spoke-mover --wait --timeout="$TIMEOUT" >/dev/null
}

# kind_network_policy_report: says whether NetworkPolicy (the chart's peer-port policy) is
# enforced here. The CNI is the bridge plugin, which does not enforce it (nor does kindnet).
kind_network_policy_report() {
  log "NetworkPolicy: NOT enforced in this cluster (CNI: the bridge plugin, no policy agent; kind's kindnet does not enforce it either)"
}

kind_workloads_deleted() {
  local n
  wl_delete_workloads
  for n in "${kind_nodes[@]}"; do
    wait_for 60 "no FUSE mounts left under /var/lib/kubelet on $n" no_fuse_mounts_on "$n"
  done
}

kind_teardown() {
  local rc=$? m i r k t_down
  set +e
  trap - EXIT INT TERM
  t_down=$(date +%s.%N)
  case $step_name in setup | between) ;; *) step_done ;; esac
  [ $rc -ne 0 ] && [ "${cluster_created:-0}" = 1 ] && dump_diagnostics
  log "== teardown"
  if [ -n "${pids[dockerd]:-}" ]; then
    [ "${cluster_created:-0}" = 1 ] && timeout 120 kind delete cluster --name "$CLUSTER" >/dev/null 2>&1
    for m in $(docker ps -aq 2>/dev/null); do docker rm -f -v "$m" >/dev/null 2>&1; done
    docker network rm "$NETWORK" >/dev/null 2>&1
  fi
  stop_pid dockerd 30
  stop_pid wan-proxy
  "$ROOT/scripts/spoke-hub" stop "$W/hub" >/dev/null 2>&1
  for m in $(mounts_under "$W"); do umount -l "$m"; done
  for r in "${host_routes[@]}"; do
    # shellcheck disable=SC2086  # the route's words
    ip route del $r 2>/dev/null
  done
  ip link show "$KIND_BRIDGE" >/dev/null 2>&1 && ip link delete "$KIND_BRIDGE"
  for ((i = ${#iptables_rules[@]} - 1; i >= 0; i--)); do
    read -r -a r <<<"${iptables_rules[$i]}"
    iptables -w -t "${r[0]}" -D "${r[1]}" "${r[@]:2}"
  done
  for k in "${!sysctl_saved[@]}"; do
    [ "$(sysctl -n "$k" 2>/dev/null)" = "${sysctl_saved[$k]}" ] || sysctl -qw "$k=${sysctl_saved[$k]}"
  done
  [ "$lib_modules_created" = 1 ] && rmdir /lib/modules 2>/dev/null
  if [ "${KEEP_WORKDIR:-0}" = 1 ] || [ $rc -ne 0 ]; then
    rm -rf "$W/docker"
    log "logs kept in $W/logs"
  else
    rm -rf "$W"
  fi
  timings+=("$(printf '%-44s %6ss' teardown "$(elapsed "$t_down")")")
  log "step timings:"
  for k in "${timings[@]}"; do log "  $k"; done
  log "$([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc=$rc)") in $(elapsed) s"
  exit $rc
}
