#!/usr/bin/env bash
# End-to-end test of Spoke on a real one-node Kubernetes on this machine, without Docker:
# containerd + runc, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and a CNI bridge, then `helm install charts/spoke` and the workloads of
# e2e/workloads (shared with e2e/kind). The cluster's steps are in e2e/lib/k8s_steps.sh, the
# workloads' in e2e/workloads/lib.sh.
#
#   e2e/k8s/run.sh [BUILD_DIR]     (root; default BUILD_DIR: <repo>/build)
#
# Needs scripts/install-k8s.sh to have run (exit 77, ctest's "skipped", when it has not, when a
# Spoke binary is not built, or without root or /dev/fuse). Env: TIMEOUT (kubectl waits,
# default 180s), KEEP_WORKDIR=1 keeps the logs, HUB_DOWN_SECONDS (20) how long the hub stays
# unreachable while the agent pod is replaced, WL_ASSERT_FSGROUP=1 asserts that the scratch
# volume's files have the pods' fsGroup (they do not yet: e2e/k8s/README.md).
#
# Containment: pods get addresses on the bridge cni0 (10.244.0.0/24) and may talk only to each
# other and to this machine; forwarding to and from the external interface and from pod
# addresses to anything that is not a pod is dropped (iptables mangle FORWARD); kubelet gives
# pods an empty resolv.conf; the apiserver, kubelet and the hub listen on the bridge address.
# Teardown always runs and restores the host: processes this script started (by pid), mounts,
# the bridge, iptables rules (ours and kube-proxy's), sysctls kubelet and kube-proxy change,
# kubelet's cgroups.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
. "$ROOT/e2e/lib/k8s_steps.sh"
k8s_preconditions
. "$ROOT/e2e/workloads/lib.sh"
. "$ROOT/e2e/workloads/warmup.sh"
k8s_begin

step "host: bridge, sysctls, containment"                  k8s_host
step "hub: nfs-ganesha on $BRIDGE_IP + dataset"            k8s_hub
step "image: Spoke from Debian packages"                   k8s_image
step "pki and kubeconfigs"                                 k8s_pki
step "containerd"                                          k8s_containerd
step "etcd + kube-apiserver"                               k8s_apiserver
step "controller-manager, scheduler, kubelet, kube-proxy"  k8s_node
step "helm install charts/spoke"                           k8s_helm_install
step "SpokeWarmup: gate, 100 %, warm reader, node label"  wl_check_warmup
step "SpokeWarmup: rateLimit, verify repairs bad blocks"   wl_check_warmup_verify \
  "{nodeSelector: {kubernetes.io/hostname: $NODE}}" k8s_corrupt_cache
step "dataset PVC: cold read, warm read"                   wl_check_dataset_cold_warm
step "scratch PVC: writer pod, reader pod, fsGroup"        wl_check_scratch
step "CSI inline volume"                                   wl_check_inline
step "agent pod deleted under a reader"                    wl_delete_agent_under_reader
step "agent pod deleted, hub unreachable"                  wl_delete_agent_hub_down \
  k8s_hub_cut k8s_hub_restore "${HUB_DOWN_SECONDS:-20}"
step "node plugin pod restart"                             wl_restart_node_plugin
step "kubelet volume metrics"                              k8s_volume_metrics
step "workloads deleted: no mounts left"                   k8s_workloads_deleted
step "helm upgrade"                                        k8s_helm_upgrade
step "helm uninstall: no mounts, processes, stray files"   k8s_helm_uninstall
