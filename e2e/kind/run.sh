#!/usr/bin/env bash
# End-to-end test of Spoke in a three-node kind cluster (one control plane, two workers) on
# this machine, with a Docker engine of its own:
#
#   e2e/kind/run.sh [BUILD_DIR]     (root; default BUILD_DIR: <repo>/build)
#
# 1. dockerd with its own data root, exec root, socket and bridge network (10.250.0.0/24),
#    its default runtime e2e/kind/runc-capfilter (privileged containers on a machine whose
#    capability bounding set lacks CAP_SYS_RESOURCE, see that file);
# 2. `kind create cluster` from the node image scripts/install-kind.sh built, then a bridge
#    CNI config per node and routes between the nodes' pod subnets;
# 3. the hub: nfs-ganesha on the host's address of the kind network, with e2e/k8s's dataset,
#    and a second dataset behind spoke-wan-proxy;
# 4. the Spoke image (as e2e/k8s makes it), `kind load`ed; `helm install charts/spoke` with
#    values-kind.yaml;
# 5. the shared workloads of e2e/workloads, then what only several nodes show: one pod per
#    node reading a dataset through spoke-wan-proxy (60 ms) with the agents sharing blocks as
#    peers (found through CoreDNS), the bytes that crossed the WAN reported against the
#    dataset's size; a rolling upgrade of the agent DaemonSet while a reader reads; a worker
#    drained (nothing left mounted on it) and uncordoned; NetworkPolicy enforcement reported;
#    a SpokeWarmup (rateLimit, verify) on two of the three nodes, labels on those two only;
# 6. teardown (always): the cluster, the network, dockerd (by pid), mounts, iptables rules,
#    routes and sysctls are restored as they were.
#
# Exit 77 (ctest's "skipped") when a tool, the node image or a Spoke binary is missing, or
# without root or /dev/fuse. Env: TIMEOUT (kubectl waits, default 180s), KEEP_WORKDIR=1.
#
# Containment: the node containers sit on the run's bridge spokekind0; forwarding between it
# and any other interface is dropped (iptables mangle FORWARD), so nodes and pods reach only
# each other and this machine. Nodes resolve no outside name (pods get an empty resolv.conf).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
HERE=$ROOT/e2e/kind
E2E_NAME=e2e/kind
IPT_COMMENT=spoke-e2e-kind   # this run's iptables rules, told apart from e2e/k8s's
. "$ROOT/e2e/lib/k8s_steps.sh"
KIND_VERSION=v0.30.0
KIND_TOOLS=${KIND_TOOLS:-/usr/local/share/spoke-tools/kind-${KIND_VERSION}}
NODE_IMAGE=localhost/spoke-kind-node:$KUBE_VERSION
CLUSTER=spoke-e2e
NETWORK=spoke-kind
KIND_BRIDGE=spokekind0
NET_CIDR=10.250.0.0/24
BRIDGE_IP=10.250.0.1     # the host on the kind network: the hub listens here
. "$HERE/lib.sh"

kind_preconditions
k8s_preconditions          # the Spoke binaries and the one-node e2e's tools and images
. "$ROOT/e2e/workloads/lib.sh"
. "$ROOT/e2e/workloads/warmup.sh"
kind_begin

step "dockerd of this run + network + containment"        kind_docker
step "image: Spoke from Debian packages"                  kind_image
step "kind create cluster (3 nodes) + CNI, nodes Ready"   kind_cluster
step "hub: nfs-ganesha on $BRIDGE_IP + dataset"           k8s_hub
step "WAN dataset behind spoke-wan-proxy (60 ms)"          kind_wan_hub
step "helm install charts/spoke (peers on)"               kind_helm_install
step "dataset PVC: cold read, warm read"                  wl_check_dataset_cold_warm
step "scratch PVC: writer pod, reader pod, fsGroup"       wl_check_scratch
step "CSI inline volume"                                  wl_check_inline
step "SpokeWarmup on two of three nodes: rate, verify"    kind_warmup_two_nodes
step "agent pod deleted under a reader"                   wl_delete_agent_under_reader
step "node plugin pod restart"                            wl_restart_node_plugin
step "one reader per node through the WAN, with peers"    kind_read_on_every_node
step "agent DaemonSet rolling upgrade under a reader"     kind_rolling_upgrade_under_reader
step "worker drained and uncordoned"                      kind_drain_worker
step "NetworkPolicy enforcement"                          kind_network_policy_report
step "workloads deleted: no mounts left on any node"      kind_workloads_deleted
