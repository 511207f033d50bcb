#!/usr/bin/env bash
# Installs what e2e/kind needs, pinned and once per machine, outside the checkout (under
# $KIND_TOOLS). Runs after scripts/install-k8s.sh, whose Kubernetes binaries and images it
# reuses:
#   Debian: docker.io (dockerd, started by the test itself with its own paths).
#   bin/:   kind and CoreDNS (go install), kubeadm and etcd (built from e2e/kind/tools).
#   node-image.tar: the kind node image (docker-archive, localhost/spoke-kind-node:v1.34.4):
#           a Debian bookworm rootfs with systemd, containerd, runc and the CNI plugins, the
#           Kubernetes binaries, and in /kind/images the control plane's images (made here
#           from the same binaries), the pause image and the CSI sidecars. No registry is
#           reachable, so kind must never pull.
# Each part carries a stamp (the hash of its inputs) and is rebuilt only when that changes.
# First run: ~150 CPU-s for kubeadm and etcd, ~200 for CoreDNS, ~2 min for two mmdebstrap root filesystems.
set -euo pipefail

KIND_VERSION=v0.30.0
KUBE_VERSION=v1.34.4
ETCD_TAG=3.6.13-0   # the version e2e/kind/tools/etcd/go.mod pins, as kubeadm tags etcd
COREDNS_VERSION=v1.12.1   # kubeadm 1.34's CoreDNS: the peers' headless Service needs cluster DNS
K8S_TOOLS=${K8S_TOOLS:-/usr/local/share/spoke-tools/k8s-${KUBE_VERSION}}
KIND_TOOLS=${KIND_TOOLS:-/usr/local/share/spoke-tools/kind-${KIND_VERSION}}
# Where the control plane's images are named from (kubeadm's imageRepository): local names,
# so that nobody takes them for the registry's.
IMAGE_REPO=localhost/spoke-e2e-k8s
NODE_IMAGE=localhost/spoke-kind-node:${KUBE_VERSION}
REPO=$(cd "$(dirname "$0")/.." && pwd)
NODE_SRC=$REPO/e2e/kind/node
MAKE_IMAGE=$REPO/e2e/k8s/make_image.py

NODE_PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,iptables,containernetworking-plugins,conntrack,iproute2,ethtool,socat,util-linux,mount,kmod,procps,ca-certificates,fuse3,findutils
PROXY_PACKAGES=iptables,conntrack

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
log() { echo "install-kind: $*"; }
t_begin=$SECONDS
took() { echo "$((SECONDS - t_begin)) s"; }

for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
  [ -x "$K8S_TOOLS/bin/$b" ] || { echo "install-kind: $K8S_TOOLS/bin/$b missing: run scripts/install-k8s.sh first" >&2; exit 1; }
done

if ! dpkg-query -W -f='${Status}' docker.io 2>/dev/null | grep -q "install ok installed"; then
  log "apt installing docker.io"
  $SUDO apt-get update -qq
  # No services from postinst: e2e/kind starts its own dockerd with its own paths.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends docker.io
  $SUDO rm -f /usr/sbin/policy-rc.d
fi

$SUDO mkdir -p "$KIND_TOOLS/bin" "$KIND_TOOLS/cache"

stamp_of() { # paths...: hash of every file under them (the inputs of one part)
  (cd "$REPO" && find "$@" -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum |
     cut -d' ' -f1)
}
is_current() { [ "$(cat "$KIND_TOOLS/$1.stamp" 2>/dev/null)" = "$2" ]; }
mark_current() { echo "$2" | $SUDO tee "$KIND_TOOLS/$1.stamp" >/dev/null; }

if ! is_current kind "$KIND_VERSION"; then
  log "go install sigs.k8s.io/kind@$KIND_VERSION"
  GOBIN=$KIND_TOOLS/bin GOFLAGS=-mod=mod nice -n 10 go install "sigs.k8s.io/kind@$KIND_VERSION"
  mark_current kind "$KIND_VERSION"
fi

if ! is_current coredns "$COREDNS_VERSION"; then
  log "go install github.com/coredns/coredns@$COREDNS_VERSION (~200 CPU-s)"
  GOBIN=$KIND_TOOLS/bin CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 \
    go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  mark_current coredns "$COREDNS_VERSION"
fi

tools_stamp="$KUBE_VERSION $(stamp_of e2e/kind/tools)"
if ! is_current tools "$tools_stamp"; then
  log "building kubeadm $KUBE_VERSION and etcd $ETCD_TAG (~150 CPU-s)"
  v=k8s.io/component-base/version
  build() { # module_dir ldflags package
    (cd "$REPO/e2e/kind/tools/$1" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
       nice -n 10 go build -trimpath -ldflags "-s -w $2" -o "$KIND_TOOLS/bin/" "$3")
  }
  build kubeadm "-X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=34 -X $v.gitTreeState=clean" \
    k8s.io/kubernetes/cmd/kubeadm
  build etcd "" .
  mark_current tools "$tools_stamp"
fi

rootfs() { # name packages: a bookworm minbase rootfs tarball in the cache, once per package list
  local out=$KIND_TOOLS/cache/$1-rootfs.tar
  if ! is_current "$1-rootfs" "$2"; then
    log "mmdebstrap bookworm + $2"
    nice -n 10 mmdebstrap --quiet --variant=minbase --format=tar --include="$2" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$out.tmp"
    mv "$out.tmp" "$out"
    mark_current "$1-rootfs" "$2"
  fi
}
rootfs node "$NODE_PACKAGES"
rootfs proxy "$PROXY_PACKAGES"

node_stamp="$(cat "$KIND_TOOLS"/*.stamp "$K8S_TOOLS"/*.stamp | sha256sum | cut -c1-16) $(stamp_of e2e/kind/node e2e/k8s/make_image.py scripts/install-kind.sh)"
if ! is_current node-image "$node_stamp"; then
  log "node image $NODE_IMAGE"
  tmp=$(mktemp -d)
  kb=$K8S_TOOLS/bin
  img() { # name tag [make_image args...]: one image of the node's /kind/images
    local name=$1 tag=$2
    shift 2
    nice -n 10 python3 "$MAKE_IMAGE" --tag "$tag" --out "$tmp/$name.tar" "$@"
  }
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    img "$c" "$IMAGE_REPO/$c:$KUBE_VERSION" --add "$kb/$c:/usr/local/bin/$c:755"
  done
  img kube-proxy "$IMAGE_REPO/kube-proxy:$KUBE_VERSION" --base "$KIND_TOOLS/cache/proxy-rootfs.tar" \
    --add "$kb/kube-proxy:/usr/local/bin/kube-proxy:755"
  img etcd "$IMAGE_REPO/etcd:$ETCD_TAG" --add "$KIND_TOOLS/bin/etcd:/usr/local/bin/etcd:755"
  img coredns "$IMAGE_REPO/coredns:$COREDNS_VERSION" --add "$KIND_TOOLS/bin/coredns:/coredns:755" \
    --entrypoint /coredns
  # The node's files: the Kubernetes binaries, systemd units, containerd's config, kind's.
  adds=()
  add() { adds+=(--add "$1:$2:$3"); }
  for b in kubelet kubectl; do add "$kb/$b" "/usr/bin/$b" 755; done
  add "$KIND_TOOLS/bin/kubeadm" /usr/bin/kubeadm 755
  add "$NODE_SRC/entrypoint" /usr/local/bin/entrypoint 755
  add "$NODE_SRC/containerd.toml" /etc/containerd/config.toml 644
  for u in kubelet.service spoke-e2e-images.service; do
    add "$NODE_SRC/$u" "/etc/systemd/system/$u" 644
    add "$NODE_SRC/$u" "/etc/systemd/system/multi-user.target.wants/$u" 644
  done
  echo "$KUBE_VERSION" >"$tmp/version"
  add "$tmp/version" /kind/version 644
  add "$NODE_SRC/default-storage.yaml" /kind/manifests/default-storage.yaml 644
  : >"$tmp/empty-resolv.conf"
  add "$tmp/empty-resolv.conf" /kind/empty-resolv.conf 644
  for f in "$tmp"/*.tar "$K8S_TOOLS"/images/*.tar; do add "$f" "/kind/images/$(basename "$f")" 644; done
  nice -n 10 python3 "$MAKE_IMAGE" --tag "$NODE_IMAGE" --out "$tmp/node-image.tar" \
    --base "$KIND_TOOLS/cache/node-rootfs.tar" "${adds[@]}" \
    --entrypoint /usr/local/bin/entrypoint --env container=docker
  $SUDO mv "$tmp/node-image.tar" "$KIND_TOOLS/node-image.tar"
  rm -rf "$tmp"
  mark_current node-image "$node_stamp"
fi
log "all present in $KIND_TOOLS ($(took))"
