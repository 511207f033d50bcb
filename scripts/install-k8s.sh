#!/usr/bin/env bash
# Installs what e2e/k8s needs to run a one-node Kubernetes on this machine, pinned and once per
# machine, outside the checkout (under $K8S_TOOLS):
#   Debian: etcd-server, containerd, runc, containernetworking-plugins, iptables, conntrack,
#           mmdebstrap (the rootfs of Spoke's test image).
#   bin/:   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and
#           kubectl built from k8s.io/kubernetes (e2e/k8s/tools/kubernetes); csi-provisioner
#           and the registrar/livenessprobe stand-ins (e2e/k8s/tools/sidecars).
#   images/: docker-archives of the pause image and the three sidecars (imported into
#           containerd by e2e/k8s/run.sh).
# Each part carries a stamp (the hash of its inputs) and is rebuilt only when that changes.
# First run: ~640 CPU-s for the Kubernetes binaries and ~180 for csi-provisioner.
set -euo pipefail

KUBE_VERSION=v1.34.4
PROVISIONER_VERSION=v5.2.0
K8S_TOOLS=${K8S_TOOLS:-/usr/local/share/spoke-tools/k8s-${KUBE_VERSION}}
REPO=$(cd "$(dirname "$0")/.." && pwd)
TOOLS_SRC=$REPO/e2e/k8s/tools

APT_PACKAGES=(etcd-server containerd runc containernetworking-plugins iptables conntrack
              mmdebstrap gcc libc6-dev)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
log() { echo "install-k8s: $*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt installing ${missing[*]}"
  $SUDO apt-get update -qq
  # No services from postinst: e2e/k8s starts containerd and etcd itself, with its own config.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
  $SUDO rm -f /usr/sbin/policy-rc.d
fi

$SUDO mkdir -p "$K8S_TOOLS/bin" "$K8S_TOOLS/images"

# stamp_of DIR...: hash of every file under the given directories (the inputs of one part).
stamp_of() {
  (cd "$REPO" && find "$@" -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum |
     cut -d' ' -f1)
}
is_current() { [ "$(cat "$K8S_TOOLS/$1.stamp" 2>/dev/null)" = "$2" ]; }
mark_current() { echo "$2" | $SUDO tee "$K8S_TOOLS/$1.stamp" >/dev/null; }

# Go builds run niced (the machine is shared); caches stay in the user's Go directories.
gobuild() { # module_dir out_dir ldflags packages...
  local dir=$1 out=$2 ldflags=$3
  shift 3
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
     GONOSUMDB=github.com/kubernetes-csi nice -n 10 \
     go build -trimpath -ldflags "-s -w $ldflags" -o "$out/" "$@")
}

kube_stamp="$KUBE_VERSION $(stamp_of e2e/k8s/tools/kubernetes)"
if ! is_current kubernetes "$kube_stamp"; then
  log "building Kubernetes $KUBE_VERSION node components (~640 CPU-s, once per machine)"
  tmp=$(mktemp -d)
  v=k8s.io/component-base/version
  gobuild "$TOOLS_SRC/kubernetes" "$tmp" \
    "-X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=34 -X $v.gitTreeState=clean" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
  $SUDO install -m 0755 "$tmp"/* "$K8S_TOOLS/bin/"
  rm -rf "$tmp"
  mark_current kubernetes "$kube_stamp"
fi

sidecar_stamp="$PROVISIONER_VERSION $(stamp_of e2e/k8s/tools/sidecars e2e/k8s/make_image.py)"
if ! is_current sidecars "$sidecar_stamp"; then
  log "building csi-provisioner $PROVISIONER_VERSION and the sidecar stand-ins (~180 CPU-s)"
  tmp=$(mktemp -d)
  gobuild "$TOOLS_SRC/sidecars" "$tmp" "-X main.version=$PROVISIONER_VERSION" \
    github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner \
    ./cmd/spoke-e2e-registrar-standin ./cmd/spoke-e2e-livenessprobe-standin
  $SUDO install -m 0755 "$tmp"/* "$K8S_TOOLS/bin/"
  # Static binaries: each image is the binary alone. The stand-ins sit at the real sidecars'
  # paths (the chart's probes exec /csi-node-driver-registrar) under names nobody takes for
  # the real images.
  img() { # tag out binary dest
    $SUDO python3 "$REPO/e2e/k8s/make_image.py" --tag "$1" --out "$K8S_TOOLS/images/$2" \
      --add "$tmp/$3:$4:755" --entrypoint "$4"
  }
  img "localhost/e2e-csi-provisioner:$PROVISIONER_VERSION" csi-provisioner.tar \
    csi-provisioner /csi-provisioner
  img localhost/e2e-registrar-standin:1 registrar-standin.tar \
    spoke-e2e-registrar-standin /csi-node-driver-registrar
  img localhost/e2e-livenessprobe-standin:1 livenessprobe-standin.tar \
    spoke-e2e-livenessprobe-standin /livenessprobe
  rm -rf "$tmp"
  mark_current sidecars "$sidecar_stamp"
fi

pause_stamp=$(stamp_of e2e/k8s/pause e2e/k8s/make_image.py)
if ! is_current pause "$pause_stamp"; then
  log "building the pause image"
  tmp=$(mktemp -d)
  gcc -static -O2 -Wall -Wextra -Werror -o "$tmp/pause" "$TOOLS_SRC/../pause/pause.c"
  $SUDO python3 "$REPO/e2e/k8s/make_image.py" --tag localhost/e2e-pause:1 \
    --out "$K8S_TOOLS/images/pause.tar" --add "$tmp/pause:/pause:755" --entrypoint /pause
  rm -rf "$tmp"
  mark_current pause "$pause_stamp"
fi
log "all present in $K8S_TOOLS"
