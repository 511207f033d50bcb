# Steps of e2e/k8s/run.sh: a one-node Kubernetes on this machine (containerd, etcd, the
# control plane, kubelet, kube-proxy, a CNI bridge), the hub, the Spoke image and chart, and
# the teardown that restores the host. Sourced by run.sh after it set ROOT (the repository)
# and BUILD (the build dir); each step is a function, run by `step TITLE FUNCTION [ARGS...]`.
# Functions set globals (W, pids, pki, API_PORT, SPOKE_IMAGE...) that later steps read.

K8S_DIR=$ROOT/e2e/k8s
K8S_STEPS_LIB=${BASH_SOURCE[0]}
KUBE_VERSION=v1.34.4
K8S_TOOLS=${K8S_TOOLS:-/usr/local/share/spoke-tools/k8s-${KUBE_VERSION}}
KBIN=$K8S_TOOLS/bin
IMAGE_CACHE=${IMAGE_CACHE:-/var/cache/spoke-e2e-k8s}
export TIMEOUT=${TIMEOUT:-180s}
NODE=spoke-e2e-node
BRIDGE=cni0
BRIDGE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
KUBELET_DIR=/var/lib/kubelet
export NS=spoke-e2e DRIVER_NS=kube-system RELEASE=spoke

t0=$(date +%s.%N)
elapsed() { awk -v a="$(date +%s.%N)" -v b="${1:-$t0}" 'BEGIN { printf "%.1f", a - b }'; }
E2E_NAME=${E2E_NAME:-e2e/k8s}   # the run's name in its messages (e2e/kind sources this file too)
log() { printf '[%6ss] %s: %s\n' "$(elapsed)" "$E2E_NAME" "$*" >&2; }
die() { log "FAIL in step '$step_name': $*"; exit 1; }
skip() { echo "$E2E_NAME: SKIP: $*" >&2; exit 77; }
step_name=setup
step_t0=$t0
declare -a timings=()
step_done() { timings+=("$(printf '%-44s %6ss' "$step_name" "$(elapsed "$step_t0")")"); }
# step TITLE FUNCTION [ARGS...]: runs one step, timed (teardown prints the timings).
step() {
  step_name=$1
  step_t0=$(date +%s.%N)
  log "== $1"
  shift
  "$@"
  step_done
  step_name=between
}

# Preconditions (skip, not fail: ctest runs this on machines without the tools).
k8s_preconditions() {
  [ "$(id -u)" = 0 ] || skip "needs root (containerd, kubelet, mounts, iptables)"
  [ -c /dev/fuse ] || skip "no /dev/fuse"
  local b f t
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -x "$KBIN/$b" ] || skip "$KBIN/$b missing: run scripts/install-k8s.sh"
  done
  for f in pause.tar csi-provisioner.tar registrar-standin.tar livenessprobe-standin.tar; do
    [ -f "$K8S_TOOLS/images/$f" ] || skip "$K8S_TOOLS/images/$f missing: run scripts/install-k8s.sh"
  done
  for t in containerd ctr runc etcd iptables conntrack mmdebstrap helm openssl; do
    command -v "$t" >/dev/null || skip "$t missing: run scripts/install-deps.sh"
  done
  [ -x /usr/lib/cni/bridge ] || skip "CNI plugins missing: run scripts/install-k8s.sh"
  declare -gA spoke_bins=(
    [spoke-cache-agent]=$BUILD/cache-agent/agent/spoke-cache-agent
    [spoke-csi-controller]=$BUILD/csi-controller/spoke-csi-controller
    [spoke-csi-node]=$BUILD/csi-node/spoke-csi-node
    [spokectl]=$BUILD/cache-agent/cli/spokectl
    [spoke-warmup-controller]=$BUILD/warmup-controller/spoke-warmup-controller
  )
  for b in "${spoke_bins[@]}"; do [ -x "$b" ] || skip "$b is not built"; done
  export PATH=$KBIN:$PATH
}

# k8s_begin: one run at a time per machine (the node's name, the bridge and /var/lib/kubelet
# are fixed), the run's work dir, and the teardown trap.
k8s_begin() {
  exec 8>/run/spoke-e2e-k8s.lock
  flock -w 1800 8 || die "another e2e/k8s run held /run/spoke-e2e-k8s.lock for 30 min"
  ip link show "$BRIDGE" >/dev/null 2>&1 && die "$BRIDGE already exists (left from an earlier run?)"
  if [ -e "$KUBELET_DIR" ] && [ -n "$(ls -A "$KUBELET_DIR" 2>/dev/null)" ]; then
    die "$KUBELET_DIR exists and is not empty (left from an earlier run?)"
  fi
  W=$(mktemp -d /var/tmp/spoke-e2e-k8s.XXXXXX)
  chmod 755 "$W"
  declare -gA pids=()        # name -> pid of every daemon this run started
  declare -gA sysctl_saved=()
  iptables_rules=()          # "table chain rule..." of every rule this run added
  hub_cut_rules=()           # the rules of k8s_hub_cut while they are in place
  netns_before=$(ls /run/netns 2>/dev/null || true)
  chains_before=$(for t in filter nat mangle; do
    iptables -w -t $t -S 2>/dev/null | awk -v t=$t '/^-N / { print t, $2 }'; done)
  kubelet_dir_created=0
  kubelet_dir_mounted=0
  bridge_created=0
  proxy_ran=0
  trap teardown EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$W/logs" "$W/pki" "$W/containerd" "$W/cni/net.d" "$W/cni/ipam"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
start() { # name command... (output to $W/logs/name.log)
  local name=$1
  shift
  # 8>&-: daemons must not inherit the run lock (containerd's shims would hold it forever).
  "$@" >"$W/logs/$name.log" 2>&1 8>&- &
  pids[$name]=$!
}
stop_pid() { # name [seconds]
  local pid=${pids[$1]:-} wait_ds=$(( ${2:-10} * 10 ))
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq "$wait_ds"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$1 ($pid) ignored SIGTERM, killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  unset "pids[$1]"
}
alive() { # name: dies naming the daemon and its log if it exited
  local pid=${pids[$1]}
  kill -0 "$pid" 2>/dev/null && return 0
  tail -20 "$W/logs/$1.log" >&2 || true
  die "$1 exited (log above)"
}
wait_for() { # seconds what command...: polls the command until it succeeds
  local secs=$1 what=$2 deadline=$((SECONDS + $1))
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what: not within ${secs}s"
    sleep 0.2
  done
}
sysctl_save() { # key...: remembers the current values, restored by teardown
  local k v
  for k in "$@"; do
    v=$(sysctl -n "$k" 2>/dev/null) || continue
    sysctl_saved[$k]=$v
  done
}
ipt() { # table chain rule...: appends a rule and remembers it
  local table=$1 chain=$2
  shift 2
  iptables -w -t "$table" -A "$chain" "$@" -m comment --comment "${IPT_COMMENT:-spoke-e2e-k8s}"
  iptables_rules+=("$table $chain $* -m comment --comment ${IPT_COMMENT:-spoke-e2e-k8s}")
}
mounts_under() { # dir: mount points under dir, deepest first
  awk -v d="$1" '{ p=$5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print p }' \
    /proc/self/mountinfo | sort -r | uniq
}
# spoke processes of this run: the ones in containers (root not "/"); other tests on this
# machine run the same binaries on the host.
containerized_spoke_pids() {
  local p
  for p in $(pgrep -x 'spoke-cache-age|spoke-csi-node|spoke-csi-contr' || true); do
    [ "$(readlink "/proc/$p/root" 2>/dev/null)" != / ] && echo "$p"
  done
  return 0
}

dump_diagnostics() {
  log "diagnostics:"
  kubectl get nodes,pods -A -o wide >&2 || true
  kubectl get pvc,pv -A >&2 || true
  kubectl -n "$NS" describe pvc,jobs,pods >&2 || true
  kubectl -n "$DRIVER_NS" describe pods -l app.kubernetes.io/instance="$RELEASE" >&2 || true
  kubectl -n "$DRIVER_NS" logs -l app.kubernetes.io/instance="$RELEASE" --all-containers \
    --prefix --tail=60 >&2 || true
  kubectl get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -40 >&2 || true
  local f
  for f in kubelet containerd kube-apiserver kube-controller-manager kube-scheduler kube-proxy hub; do
    [ -f "$W/logs/$f.log" ] && { echo "--- $f.log (tail) ---" >&2; tail -30 "$W/logs/$f.log" >&2; }
  done
  [ -f "$W/hub/ganesha.log" ] && { echo "--- ganesha.log (tail) ---" >&2; tail -10 "$W/hub/ganesha.log" >&2; }
  return 0
}


# k8s_hub_cut / k8s_hub_restore: drop every packet from the pods to the hub's ports (the hub
# unreachable: no answer, no reset), and stop dropping them.
k8s_hub_cut() {
  local port rule
  for port in "$NFS_PORT" "$MOUNT_PORT"; do
    rule="INPUT -i $BRIDGE -d $BRIDGE_IP -p tcp --dport $port -j DROP -m comment --comment spoke-e2e-k8s-hub-cut"
    # shellcheck disable=SC2086  # the rule's words
    iptables -w -I $rule
    hub_cut_rules+=("$rule")
  done
}
k8s_hub_restore() {
  local rule dropped
  dropped=$(iptables -w -L INPUT -v -n -x | awk '/spoke-e2e-k8s-hub-cut/ { n += $1 } END { print n + 0 }')
  for rule in "${hub_cut_rules[@]}"; do
    # shellcheck disable=SC2086
    iptables -w -D $rule
  done
  hub_cut_rules=()
  log "hub traffic restored ($dropped packets to the hub were dropped)"
}

teardown() {
  local rc=$? k m r i t_down
  set +e
  trap - EXIT INT TERM
  t_down=$(date +%s.%N)
  case $step_name in setup | between) ;; *) step_done ;; esac
  [ $rc -ne 0 ] && [ -n "${pids[kube-apiserver]:-}" ] && dump_diagnostics
  log "== teardown"
  # Pods first, while kubelet and containerd still run (unmounts through the CSI driver), but
  # bounded: a broken driver must not stall the teardown.
  if [ -n "${pids[kubelet]:-}" ] && kill -0 "${pids[kubelet]}" 2>/dev/null; then
    helm uninstall "$RELEASE" -n "$DRIVER_NS" --wait --timeout 60s >/dev/null 2>&1
    kubectl delete namespace "$NS" --wait --timeout=60s >/dev/null 2>&1
  fi
  for k in kube-proxy kube-scheduler kube-controller-manager kubelet; do stop_pid "$k"; done
  # Every container of this run, then containerd.
  if [ -n "${pids[containerd]:-}" ]; then
    crictl_like() { ctr --address "$W/containerd/containerd.sock" -n k8s.io "$@"; }
    for t in $(crictl_like tasks ls -q 2>/dev/null); do crictl_like tasks kill -s KILL "$t" >/dev/null 2>&1; done
    sleep 1
    for t in $(crictl_like tasks ls -q 2>/dev/null); do crictl_like tasks delete -f "$t" >/dev/null 2>&1; done
    for t in $(crictl_like containers ls -q 2>/dev/null); do crictl_like containers delete "$t" >/dev/null 2>&1; done
  fi
  stop_pid containerd 20
  stop_pid kube-apiserver
  stop_pid etcd
  "$ROOT/scripts/spoke-hub" stop "$W/hub" >/dev/null 2>&1
  # Mounts: pods' volumes and FUSE mounts under the kubelet dir, containerd's rootfs and shm
  # mounts under the work dir, network namespaces.
  for m in $(mounts_under "$KUBELET_DIR" | grep -vx "$KUBELET_DIR"); do umount -l "$m"; done
  [ $kubelet_dir_mounted = 1 ] && umount -l "$KUBELET_DIR"
  for m in $(mounts_under "$W"); do umount -l "$m"; done
  # Pod network namespaces CRI failed to remove (only after a crash): the cni-* ones that
  # appeared during this run.
  for m in $(ls /run/netns 2>/dev/null | grep '^cni-'); do
    grep -qx "$m" <<<"$netns_before" || ip netns delete "$m"
  done
  [ $kubelet_dir_created = 1 ] && rm -rf "$KUBELET_DIR"
  # kubelet's cgroups (cgroupfs driver, cgroup v1): deepest first, in every hierarchy.
  for m in /sys/fs/cgroup/*/kubepods; do
    [ -d "$m" ] && find "$m" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  # Network: kube-proxy's chains, our rules, the bridge, the pods' veths go with their netns.
  [ $proxy_ran = 1 ] && kube-proxy --cleanup >"$W/logs/kube-proxy-cleanup.log" 2>&1
  [ ${#hub_cut_rules[@]} -eq 0 ] || k8s_hub_restore
  for ((i = ${#iptables_rules[@]} - 1; i >= 0; i--)); do
    read -r -a r <<<"${iptables_rules[$i]}"
    iptables -w -t "${r[0]}" -D "${r[1]}" "${r[@]:2}"
  done
  # Chains that appeared during the run and --cleanup left (kubelet's KUBE-FIREWALL; CNI-*
  # only after a crashed plugin): references first, then the chains.
  for table in filter nat mangle; do
    for c in $(iptables -w -t $table -S 2>/dev/null | awk '/^-N (KUBE|CNI)-/ { print $2 }'); do
      grep -qx "$table $c" <<<"$chains_before" && continue
      iptables -w -t $table -F "$c"
      iptables -w -t $table -S | awk -v c="$c" '/^-A/ && $0 ~ ("-j " c "( |$)")' |
        sed 's/^-A /-D /' | while read -r -a rule; do iptables -w -t $table "${rule[@]}"; done
      iptables -w -t $table -X "$c"
    done
  done
  [ $bridge_created = 1 ] && ip link delete "$BRIDGE"
  for k in "${!sysctl_saved[@]}"; do
    [ "$(sysctl -n "$k" 2>/dev/null)" = "${sysctl_saved[$k]}" ] || sysctl -qw "$k=${sysctl_saved[$k]}"
  done
  if [ "${KEEP_WORKDIR:-0}" = 1 ] || [ $rc -ne 0 ]; then
    rm -rf "$W/containerd/root" "$W/etcd"
    log "logs kept in $W/logs"
  else
    rm -rf "$W"
  fi
  timings+=("$(printf '%-44s %6ss' teardown "$(elapsed "$t_down")")")
  log "step timings:"
  for t in "${timings[@]}"; do log "  $t"; done
  log "$([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc=$rc)") in $(elapsed) s"
  exit $rc
}

# k8s_host: the bridge cni0, the host sysctls saved, containment (pods reach only pods and this
# machine).
k8s_host() {
  local ext_if
  sysctl_save kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom \
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward \
    net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables \
    net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established \
    net.netfilter.nf_conntrack_tcp_timeout_close_wait
  ip link add "$BRIDGE" type bridge
  bridge_created=1
  ip addr add "$BRIDGE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  ext_if=$(ip -o route show default | awk '{ print $5; exit }')
  [ -n "$ext_if" ] || die "no default route: cannot tell the external interface"
  ipt mangle FORWARD -o "$ext_if" -j DROP
  ipt mangle FORWARD -i "$ext_if" -j DROP
  ipt mangle FORWARD -s "$POD_CIDR" ! -d "$POD_CIDR" -j DROP
  : >"$W/resolv.conf"   # pods inherit no DNS server
  log "bridge $BRIDGE $BRIDGE_IP/24; forwarding to/from $ext_if and out of $POD_CIDR dropped"
}

# k8s_hub: nfs-ganesha bound to the bridge address, with a generated dataset and its SHA256SUMS.
k8s_hub() {
  local ds
  mkdir -p "$W/hub"
  # Attributes expire after 1 s (ganesha's default: 60): the warm-up verify step changes a file
  # on the export's disk and the hub must answer with its new attributes.
  eval "$(SPOKE_HUB_BIND_ADDR=$BRIDGE_IP SPOKE_HUB_ATTR_EXPIRATION=1 "$ROOT/scripts/spoke-hub" start "$W/hub" 8>&-)"  # NFS_PORT MOUNT_PORT EXPORT
  export HUB_SERVER=$BRIDGE_IP HUB_SHARE=$EXPORT NFS_PORT MOUNT_PORT DATASET_SUBDIR=datasets/e2e
  ds=$EXPORT/$DATASET_SUBDIR
  mkdir -p "$ds"
  python3 - "$ds" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(15)
for i in range(120):
    d = os.path.join(root, "shard-%02d" % (i % 6))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "sample-%04d.bin" % i), "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 96 * 1024)))
os.makedirs(os.path.join(root, "big files"), exist_ok=True)   # a space in the path
for j, mb in enumerate((6, 11)):
    with open(os.path.join(root, "big files", "part-%d.tar" % j), "wb") as f:
        f.write(rng.randbytes(mb << 20))
PY
  # (Written elsewhere first: a SHA256SUMS being written must not list itself.)
  (cd "$ds" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$W/SHA256SUMS"
  mv "$W/SHA256SUMS" "$ds/SHA256SUMS"
  log "dataset: $(wc -l <"$ds/SHA256SUMS") files, $(du -sm "$ds" | cut -f1) MiB on $BRIDGE_IP ports $NFS_PORT/$MOUNT_PORT"
}

# k8s_image: the Spoke image from the Dockerfile's runtime packages and this build's binaries;
# checks that it holds every library the binaries need.
k8s_image() {
  local packages rootfs bin_hash adds b lib image_files
  mkdir -p "$IMAGE_CACHE"
  # The runtime packages of the Dockerfile's last stage, so that this image matches it.
  packages=$(awk '/^FROM /{ last = NR } { line[NR] = $0 } END {
      for (i = last; i <= NR; i++) { if (line[i] ~ /rm -rf \/var\/lib\/apt\/lists/) break; s = s " " line[i] }
      sub(/.*--no-install-recommends/, "", s); gsub(/\\/, " ", s); gsub(/&&.*/, "", s); print s }' \
      "$ROOT/Dockerfile" | xargs)
  [ -n "$packages" ] || die "found no runtime packages in the Dockerfile's last stage"
  rootfs=$IMAGE_CACHE/rootfs-bookworm-$(echo "$packages" | sha256sum | cut -c1-16).tar
  if [ ! -f "$rootfs" ]; then
    log "mmdebstrap bookworm minbase + $packages (once; cached in $rootfs)"
    mmdebstrap --quiet --variant=minbase --format=tar --include="${packages// /,}" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$rootfs.tmp" \
      >"$W/logs/mmdebstrap.log" 2>&1 || { tail -20 "$W/logs/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
    mv "$rootfs.tmp" "$rootfs"
  fi
  # (The scripts are inputs: they decide what goes into the image.)
  bin_hash=$({ sha256sum "${spoke_bins[@]}" "$K8S_DIR/make_image.py" "$K8S_STEPS_LIB"; echo "$rootfs"; } |
    sha256sum | cut -c1-12)
  export SPOKE_IMAGE=localhost/spoke:e2e-$bin_hash
  spoke_tar=$IMAGE_CACHE/spoke-$bin_hash.tar
  if [ ! -f "$spoke_tar" ]; then
    rm -f "$IMAGE_CACHE"/spoke-*.tar
    adds=()
    mkdir -p "$W/image-bin"
    for b in "${!spoke_bins[@]}"; do
      # Without debug info: a smaller image imports faster (the build dir keeps the symbols).
      objcopy --strip-debug "${spoke_bins[$b]}" "$W/image-bin/$b"
      adds+=(--add "$W/image-bin/$b:/usr/local/bin/$b:755")
    done
    python3 "$K8S_DIR/make_image.py" --tag "$SPOKE_IMAGE" --out "$spoke_tar" --base "$rootfs" "${adds[@]}"
  fi
  # The image must hold every library the binaries need (the Dockerfile's ldd check).
  image_files=$(tar -tf "$rootfs" | sed 's|^\./||')
  for b in "${spoke_bins[@]}"; do
    for lib in $(objdump -p "$b" | awk '/NEEDED/ { print $2 }'); do
      grep -qx "usr/lib/x86_64-linux-gnu/$lib" <<<"$image_files" ||
        die "$(basename "$b") needs $lib, which the image's packages ($packages) do not provide"
    done
  done
  log "$SPOKE_IMAGE ($(du -m "$spoke_tar" | cut -f1) MiB)"
}

# k8s_pki: the run's CA, the certificates of the apiserver, admin and kubelet, kubeconfigs.
k8s_pki() {
  pki=$W/pki
  API_PORT=$(free_port)
  gen_cert() { # name subject [san]: an EC key and a certificate signed by the run's CA
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$1.key" 2>/dev/null
    openssl req -new -key "$pki/$1.key" -subj "$2" -out "$pki/$1.csr" 2>/dev/null
    local ext=$pki/$1.ext
    { echo "keyUsage=critical,digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=serverAuth,clientAuth"
      [ -n "${3:-}" ] && echo "subjectAltName=$3"; } >"$ext"
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 2 -extfile "$ext" -out "$pki/$1.crt" 2>/dev/null
  }
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=spoke-e2e-ca" -days 2 -out "$pki/ca.crt" 2>/dev/null
  gen_cert apiserver "/CN=kube-apiserver" \
    "IP:$BRIDGE_IP,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  gen_cert admin "/O=system:masters/CN=spoke-e2e-admin"
  gen_cert kubelet-client "/O=system:nodes/CN=system:node:$NODE"
  gen_cert kubelet-serving "/CN=$NODE" "IP:$BRIDGE_IP,DNS:$NODE"
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key" 2>/dev/null
  openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  kubeconfig() { # file cert
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster: {server: "https://$BRIDGE_IP:$API_PORT", certificate-authority: "$pki/ca.crt"}
users:
  - name: u
    user: {client-certificate: "$pki/$2.crt", client-key: "$pki/$2.key"}
contexts:
  - name: e2e
    context: {cluster: e2e, user: u}
current-context: e2e
EOF
  }
  kubeconfig "$W/admin.kubeconfig" admin
  kubeconfig "$W/kubelet.kubeconfig" kubelet-client
  export KUBECONFIG=$W/admin.kubeconfig
}

# k8s_containerd: containerd with the CNI bridge; checks that it answers and imports the images.
k8s_containerd() {
  local f
  cat >"$W/containerd/config.toml" <<EOF
version = 2
root = "$W/containerd/root"
state = "$W/containerd/state"
[grpc]
  address = "$W/containerd/containerd.sock"
[ttrpc]
  address = "$W/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/e2e-pause:1"
  # This VM lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below the current value.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$W/cni/net.d"
EOF
  cat >"$W/cni/net.d/10-spoke-e2e.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "spoke-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$W/cni/ipam",
              "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
EOF
  start containerd containerd --config "$W/containerd/config.toml"
  ctr_() { ctr --address "$W/containerd/containerd.sock" -n k8s.io "$@"; }
  wait_for 30 "containerd answering" ctr_ version
  for f in "$K8S_TOOLS"/images/*.tar "$spoke_tar"; do
    ctr_ images import "$f" >>"$W/logs/import.log" 2>&1 ||
      { tail -5 "$W/logs/import.log" >&2; die "ctr images import $f failed"; }
  done
  log "images: $(ctr_ images ls -q | grep -c '^localhost/')"
}

# k8s_apiserver: etcd and kube-apiserver; checks that the apiserver is ready.
k8s_apiserver() {
  ETCD_PORT=$(free_port)
  ETCD_PEER_PORT=$(free_port)
  start etcd etcd --name e2e --data-dir "$W/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT"
  start kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --advertise-address "$BRIDGE_IP" --bind-address "$BRIDGE_IP" --secure-port "$API_PORT" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" \
    --tls-private-key-file "$pki/apiserver.key" \
    --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --authorization-mode Node,RBAC \
    --kubelet-preferred-address-types InternalIP --profiling=false \
    --enable-priority-and-fairness=false
  wait_for 60 "kube-apiserver ready" kubectl get --raw /readyz
  alive etcd
}

# k8s_node: controller-manager, scheduler, kubelet and kube-proxy; checks that the node is Ready.
k8s_node() {
  start kube-controller-manager kube-controller-manager --kubeconfig "$W/admin.kubeconfig" \
    --authentication-kubeconfig "$W/admin.kubeconfig" --authorization-kubeconfig "$W/admin.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=true
  start kube-scheduler kube-scheduler --kubeconfig "$W/admin.kubeconfig" \
    --authentication-kubeconfig "$W/admin.kubeconfig" --authorization-kubeconfig "$W/admin.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false
  # kubelet's dir must be a shared mount for Bidirectional propagation ("/" is private here).
  if [ ! -d "$KUBELET_DIR" ]; then mkdir -p "$KUBELET_DIR"; kubelet_dir_created=1; fi
  mount --bind "$KUBELET_DIR" "$KUBELET_DIR"
  kubelet_dir_mounted=1
  mount --make-rshared "$KUBELET_DIR"
  cat >"$W/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No systemd and cgroup v1 on these machines.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$W/containerd/containerd.sock
address: $BRIDGE_IP
port: $(free_port)
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(free_port)
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
# Pods get no DNS server of the host's (containment), and there is no cluster DNS.
resolvConf: $W/resolv.conf
clusterDomain: cluster.local
# The test's own iptables rules stay the only ones besides kube-proxy's.
makeIPTablesUtilChains: false
protectKernelDefaults: false
# Volume metrics (NodeGetVolumeStats, VolumeCondition) refreshed often enough to be seen.
volumeStatsAggPeriod: 5s
featureGates: {CSIVolumeHealth: true}
# A shared machine's disk and memory must not evict the test's pods, nor image GC its images.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 30
EOF
  start kubelet kubelet --config "$W/kubelet.yaml" --kubeconfig "$W/kubelet.kubeconfig" \
    --root-dir "$KUBELET_DIR" --hostname-override "$NODE" --node-ip "$BRIDGE_IP" --v 2
  cat >"$W/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $W/admin.kubeconfig}
hostnameOverride: $NODE
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$(free_port)
metricsBindAddress: 127.0.0.1:$(free_port)
# Leave the host's conntrack sysctls alone, and no localhost node ports (route_localnet).
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
nodePortAddresses: ["$BRIDGE_IP/32"]
EOF
  start kube-proxy kube-proxy --config "$W/kube-proxy.yaml"
  proxy_ran=1
  wait_for 90 "node $NODE Ready" kubectl wait --for=condition=Ready "node/$NODE" --timeout=2s
  for k in kube-controller-manager kube-scheduler kube-proxy; do alive "$k"; done
  wait_for 60 "default service account" kubectl -n default get serviceaccount default
}

# k8s_helm_install: `helm install charts/spoke`; checks that it gets ready and CSINode lists the
# driver.
k8s_helm_install() {
  local values
  values=$W/values-e2e.yaml
  wl_render "$K8S_DIR/values-e2e.yaml" CACHE_DIR="$W/cache" STATE_DIR="$W/agent-state" \
    SOCKET_DIR="$W/agent-run" >"$values"
  helm install "$RELEASE" "$ROOT/charts/spoke" --namespace "$DRIVER_NS" -f "$values" \
    --set-string "image.controller.repository=${SPOKE_IMAGE%:*},image.controller.tag=${SPOKE_IMAGE##*:}" \
    --set-string "image.node.repository=${SPOKE_IMAGE%:*},image.node.tag=${SPOKE_IMAGE##*:}" \
    --set-string "image.agent.repository=${SPOKE_IMAGE%:*},image.agent.tag=${SPOKE_IMAGE##*:}" \
    --wait --timeout "$TIMEOUT" >"$W/logs/helm-install.log" 2>&1 ||
    { cat "$W/logs/helm-install.log" >&2; die "helm install did not become ready within $TIMEOUT"; }
  wait_for 60 "CSINode $NODE listing spoke.csi.dev" \
    sh -c "kubectl get csinode $NODE -o jsonpath='{.spec.drivers[*].name}' | grep -qw spoke.csi.dev"
  kubectl create namespace "$NS" >/dev/null
}

# k8s_corrupt_cache [FILE_IDS]: flips one data byte in three cached blocks of the agent's cache
# directory (on this machine), none of the files FILE_IDS (space-separated: the hub's file ids,
# its inode numbers); prints how many. Every block cached so far is warm-data's (the warm-up
# steps run first).
k8s_corrupt_cache() {
  python3 - "$W/cache" "${1:-}" <<'PY'
import os, struct, sys
skip = {int(x) for x in sys.argv[2].split()}
done = 0
for root, _, files in os.walk(sys.argv[1]):
    for name in sorted(files):
        if not name.startswith("data."):
            continue
        path = os.path.join(root, name)
        with open(path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            first = None  # a slot starts every 4096 + block size bytes; find one written
            for off in range(0, size, 4096):
                f.seek(off)
                if f.read(8) == b"SPOKEBLK":
                    first = off
                    break
            if first is None:
                continue
            f.seek(first + 12)
            slot = 4096 + struct.unpack("<I", f.read(4))[0]  # header + the cache's block size
            for off in range(first % slot, size - 4096, slot):
                f.seek(off)
                h = f.read(64)
                if h[:8] != b"SPOKEBLK":
                    continue
                length = struct.unpack_from("<I", h, 56)[0]
                file_id = struct.unpack_from("<Q", h, 24)[0]  # BlockKey: volume, file_id, ...
                if length < 2 or file_id in skip:
                    continue
                pos = off + 4096 + min(777, length - 1)
                f.seek(pos)
                b = f.read(1)
                f.seek(pos)
                f.write(bytes([b[0] ^ 0x40]))
                done += 1
                if done == 3:
                    break
            f.flush()
            os.fsync(f.fileno())
        if done == 3:
            break
    if done == 3:
        break
print(done)
PY
}

# k8s_volume_metrics: kubelet's volume metrics (stats and health) of the dataset PVC in use.
k8s_volume_metrics() {
  wl_start_reader 60
  wl_check_volume_stats "$NODE" 60 1
  kubectl -n "$NS" delete pod spoke-reader --wait --timeout="$TIMEOUT" >/dev/null
}

# k8s_workloads_deleted: no FUSE mount left once the workloads are gone, and the scratch PVC's
# directory removed from the hub.
k8s_workloads_deleted() {
  wl_delete_workloads
  wait_for 60 "no FUSE mounts left under $KUBELET_DIR" \
    sh -c "! awk '\$5 ~ \"^$KUBELET_DIR/\" && / - fuse/' /proc/self/mountinfo | grep -q ."
  # onDelete: delete removes the scratch PVC's directory from the hub.
  [ ! -e "$EXPORT/scratch/$NS/scratch" ] ||
    die "the scratch PVC's directory is still on the hub after its PV was deleted"
}

# k8s_helm_upgrade: `helm upgrade` rolls both DaemonSets, then a Job verifies the dataset again.
k8s_helm_upgrade() {
  helm upgrade "$RELEASE" "$ROOT/charts/spoke" --namespace "$DRIVER_NS" --reuse-values \
    --set logLevel=info --wait --timeout "$TIMEOUT" >"$W/logs/helm-upgrade.log" 2>&1 ||
    { cat "$W/logs/helm-upgrade.log" >&2; die "helm upgrade did not become ready within $TIMEOUT"; }
  kubectl -n "$DRIVER_NS" rollout status "$(wl_daemonset agent)" --timeout="$TIMEOUT" >/dev/null
  kubectl -n "$DRIVER_NS" rollout status "$(wl_daemonset node)" --timeout="$TIMEOUT" >/dev/null
  wl_apply dataset-pvc.yaml
  # The new controller's provisioner waits out the old one's leader lease (about 20 s). A pod
  # created before its claim binds can stay Pending for minutes (seen here: the scheduler
  # found the claim unbound, then the new PV "not found" in its cache, and did not try again
  # within 3 min), which is Kubernetes', not the driver's: the test waits for the binding.
  wait_for "${TIMEOUT%s}" "PVC dataset Bound after the upgrade" \
    kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound pvc/dataset --timeout=2s
  wl_verify_job spoke-verify-after-upgrade >/dev/null
  wl_delete_workloads
}

# k8s_helm_uninstall: `helm uninstall` leaves no FUSE mount, no Spoke process, no socket or
# temporary file in the agent's directories.
k8s_helm_uninstall() {
  local left stray
  helm uninstall "$RELEASE" --namespace "$DRIVER_NS" --wait --timeout "$TIMEOUT" >/dev/null
  wait_for 60 "Spoke pods gone" sh -c "! kubectl -n $DRIVER_NS get pods -l app.kubernetes.io/instance=$RELEASE -o name | grep -q ."
  left=$(awk -v d="$KUBELET_DIR/" 'index($5, d) == 1 && / - fuse/' /proc/self/mountinfo)
  [ -z "$left" ] || die "FUSE mounts left after helm uninstall: $left"
  no_spoke_containers() { [ -z "$(containerized_spoke_pids)" ]; }
  wait_for 30 "Spoke container processes gone" no_spoke_containers
  stray=$(find "$W/cache" "$W/agent-state" "$W/agent-run" -name '*.tmp' -o -name '*.sock' 2>/dev/null)
  [ -z "$stray" ] || die "files left behind by the agent after uninstall: $stray"
  log "cache dir after uninstall: $(du -sh "$W/cache" 2>/dev/null | cut -f1) (the block cache persists by design)"
}

