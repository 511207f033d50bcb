#!/usr/bin/env bash
# Installs every Debian package and pinned Go/Python tool Spoke builds, tests and benchmarks
# with, on a fresh Debian bookworm machine. Idempotent: quick when everything is present.
#   scripts/install-deps.sh          everything scripts/test.sh uses
#   scripts/install-deps.sh --demo   only what scripts/demo.sh uses: the build, the hub and the
#                                    plot (no sanitizer compilers, test tools or Kubernetes)
set -euo pipefail

demo_only=0
if [ "${1:-}" = "--demo" ]; then demo_only=1; fi

# Pinned tool versions (bump deliberately, together with the tests that use them).
CSI_SPEC_VERSION=v1.12.0        # CSI spec whose csi.proto we compile
CSI_TEST_VERSION=v5.4.0         # csi-sanity built against spec v1.12.0
HELM_VERSION=v3.19.5
KUBE_VALIDATE_VERSION=1.31.0    # kubernetes-validate ships the API schemas offline
PJDFSTEST_VERSION=0.2.2         # POSIX conformance suite run on a scratch mount (tests/posix)

# The demo's set: build (the test libraries too: CMake finds them even when tests are off),
# the hub, and the plot.
DEMO_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl python3 python3-venv ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libnfs-dev libnfs-utils liburing-dev libfuse3-dev fuse3
  nlohmann-json3-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev libxxhash-dev libssl-dev zlib1g-dev libcli11-dev
  nfs-ganesha nfs-ganesha-vfs rpcbind
  gnuplot-nox iproute2 procps psmisc util-linux kmod
)
TEST_PACKAGES=(
  fio clang-format clang-tidy
  libacl1-dev  # pjdfstest (built with cargo below) links libacl
  # libFuzzer harnesses (fuzz/): clang 19 is the first whose concepts level lets libstdc++ 12
  # expose std::expected; libclang-rt holds libFuzzer and the sanitizer runtimes.
  clang-19 libclang-rt-19-dev
  # ThreadSanitizer (build/tsan in scripts/test.sh): Debian's TSan runtime symbolizes its reports
  # with /usr/bin/llvm-symbolizer-19; without it frames are bare addresses and the named entries
  # of scripts/tsan.supp match nothing.
  llvm-19
)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

APT_PACKAGES=("${DEMO_PACKAGES[@]}")
# CMake runs `go mod download` for csi.proto (proto/CMakeLists.txt). Debian's Go (1.19) does
# that; a newer Go already on PATH (e.g. /usr/local/go) is kept.
command -v go >/dev/null || APT_PACKAGES+=(golang-go)
[ $demo_only -eq 1 ] || APT_PACKAGES+=("${TEST_PACKAGES[@]}")
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt installing ${missing[*]}"
  $SUDO apt-get update -qq
  # Services must not start from postinst (no systemd here; tests start ganesha themselves).
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  $SUDO rm -f /usr/sbin/policy-rc.d
fi

# The CSI spec module (csi.proto is read from the module cache at build time).
go mod download -json "github.com/container-storage-interface/spec@${CSI_SPEC_VERSION}" >/dev/null
# spoke-warmup-controller's modules (pinned in its go.mod/go.sum). Its go.mod asks for Go 1.24:
# a Go of 1.21 or newer fetches that toolchain from the module proxy by itself (GOTOOLCHAIN
# auto); Debian bookworm's Go 1.19 cannot, so install a newer one first (e.g. in /usr/local/go).
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "${go_minor:-0}" -lt 21 ]; then
  echo "install-deps: $(go env GOVERSION) is too old for warmup-controller/ (needs Go >= 1.21 to fetch go1.24)" >&2
  exit 1
fi
(cd "$(dirname "$0")/../warmup-controller" && go mod download)
# The NFSv4.1 client (cache-agent/remote/nfs4, Rust) needs cargo with Rust >= 1.95 (rustup's
# toolchain; bookworm's cargo is too old); its crates, pinned by Cargo.lock, are fetched here.
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
rust_minor=$("$cargo" --version 2>/dev/null | sed -nE 's/^cargo 1\.([0-9]+).*/\1/p')
if [ "${rust_minor:-0}" -lt 95 ]; then
  echo "install-deps: the NFSv4.1 client needs cargo from Rust >= 1.95 (rustup); found: $("$cargo" --version 2>&1 || echo none)" >&2
  exit 1
fi
"$cargo" fetch --locked --quiet --manifest-path "$(dirname "$0")/../cache-agent/remote/nfs4/Cargo.toml"
if [ $demo_only -eq 1 ]; then
  echo "install-deps: the demo's set is present"
  exit 0
fi

# Go tools, pinned. GOBIN is project-independent so that repeated runs are no-ops.
export GOBIN="${GOBIN:-/usr/local/bin}"
gotool() { # name module@version
  local name=$1 mod=$2 stamp="/usr/local/share/spoke-tools/$1.version"
  if [ -x "$GOBIN/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$mod" ]; then return; fi
  echo "install-deps: go install $mod"
  GOFLAGS=-mod=mod go install "$mod"
  $SUDO mkdir -p "$(dirname "$stamp")"
  echo "$mod" | $SUDO tee "$stamp" >/dev/null
}
gotool csi-sanity "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@${CSI_TEST_VERSION}"
gotool helm "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"

# pjdfstest, pinned, in /usr/local/bin (tests/posix/run_pjdfstest.sh looks there first).
if [ "$(/usr/local/bin/pjdfstest --version 2>/dev/null)" != "pjdfstest ${PJDFSTEST_VERSION}" ]; then
  # It needs Rust 1.85+ (rustup's toolchain; bookworm's cargo is too old).
  cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
  if [ ! -x "$cargo" ]; then
    echo "install-deps: pjdfstest needs cargo (Rust >= 1.85, e.g. from rustup); none found" >&2
    exit 1
  fi
  echo "install-deps: cargo install pjdfstest ${PJDFSTEST_VERSION}"
  $SUDO "$cargo" install --locked --root /usr/local pjdfstest --version "${PJDFSTEST_VERSION}"
fi
# Its two dummy identities (tests/posix/pjdfstest.toml): nobody:nogroup exist on Debian;
# tests:tests is ours.
getent group tests >/dev/null || $SUDO groupadd --system tests
getent passwd tests >/dev/null ||
  $SUDO useradd --system --gid tests --no-create-home --home-dir / \
    --shell /usr/sbin/nologin --comment "Dummy user for pjdfstest" tests

# Python tool for offline Kubernetes schema validation, in its own venv.
VENV=/usr/local/share/spoke-tools/venv
# (pip's output is read whole first: `grep -q` closing the pipe early would fail pipefail.)
installed=$("$VENV/bin/pip" show kubernetes-validate 2>/dev/null || true)
if [ ! -x "$VENV/bin/kubernetes-validate" ] || \
   ! grep -qx "Version: ${KUBE_VALIDATE_VERSION}" <<<"$installed"; then
  echo "install-deps: pip install kubernetes-validate==${KUBE_VALIDATE_VERSION}"
  $SUDO python3 -m venv "$VENV"
  $SUDO "$VENV/bin/pip" install -q "kubernetes-validate==${KUBE_VALIDATE_VERSION}"
fi
"$(dirname "$0")/install-k8s.sh"  # one-node Kubernetes for e2e/k8s (pinned, built once)
"$(dirname "$0")/install-kind.sh" # Docker, kind and its node image for e2e/kind (built once)
echo "install-deps: all present"
