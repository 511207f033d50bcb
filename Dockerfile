# syntax=docker/dockerfile:1
# Spoke image: spoke-csi-controller, spoke-csi-node, spoke-cache-agent, spokectl and
# spoke-warmup-controller (Go, static) in /usr/local/bin. The Helm chart picks the binary per container (no ENTRYPOINT here).
#
#   docker build -t spoke:dev .
#
# Build context: the repository root (see .dockerignore).

ARG DEBIAN_RELEASE=bookworm

# Go only serves the build: CMake runs `go mod download` at configure time to find the CSI
# spec's csi.proto in the module cache (proto/CMakeLists.txt).
FROM golang:1.26-bookworm AS go
# Rust builds the NFSv4.1 client library (cache-agent/remote/nfs4), linked into the agent and
# the controller.
FROM rust:1.95-bookworm AS rust

FROM debian:${DEBIAN_RELEASE} AS build
ARG CSI_SPEC_VERSION=v1.12.0
# Build dependencies only (the compile-relevant subset of scripts/install-deps.sh:
# no test frameworks, servers or tools).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git ca-certificates \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libnfs-dev liburing-dev libfuse3-dev \
      nlohmann-json3-dev libyaml-cpp-dev libcpp-httplib-dev libxxhash-dev \
      libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
COPY --from=go /usr/local/go /usr/local/go
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
ENV PATH=/usr/local/go/bin:/usr/local/cargo/bin:${PATH} \
    RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    GOPATH=/root/go \
    GOFLAGS=-mod=mod \
    CGO_ENABLED=0
# Own layer: the download is cached across source changes.
RUN go mod download -json "github.com/container-storage-interface/spec@${CSI_SPEC_VERSION}" >/dev/null
COPY warmup-controller/go.mod warmup-controller/go.sum /src/warmup-controller/
RUN cd /src/warmup-controller && go mod download
COPY cache-agent/remote/nfs4 /src/cache-agent/remote/nfs4
RUN cargo fetch --locked --manifest-path /src/cache-agent/remote/nfs4/Cargo.toml

WORKDIR /src
COPY . .
RUN cmake -S . -B build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DSPOKE_BUILD_TESTS=OFF \
      -DSPOKE_TEST_FAULTS=OFF \
      -DCSI_SPEC_VERSION="${CSI_SPEC_VERSION}" \
 && cmake --build build \
 && cmake --install build --prefix /out --strip \
 && for b in spoke-csi-controller spoke-csi-node spoke-cache-agent spokectl spoke-warmup-controller; do \
      test -x "/out/bin/$b" || { echo "cmake --install did not install bin/$b" >&2; exit 1; }; \
    done

FROM debian:${DEBIAN_RELEASE}-slim
# Runtime libraries of the binaries, plus:
#   fuse3        fusermount3, the fallback unmount of a FUSE session
#   util-linux   mount/umount for the node plugin's bind mounts
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libnfs13 liburing2 libfuse3-3 fuse3 \
      libyaml-cpp0.7 libxxhash0 libcpp-httplib0.11 libssl3 zlib1g ca-certificates util-linux \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/spoke-csi-controller /out/bin/spoke-csi-node \
                  /out/bin/spoke-cache-agent /out/bin/spokectl /out/bin/spoke-warmup-controller \
                  /usr/local/bin/
# Fail the image build, not the pod, when a runtime library is missing.
RUN if ldd /usr/local/bin/spoke-* /usr/local/bin/spokectl | grep "not found"; then \
      echo "missing runtime libraries (above)" >&2; exit 1; \
    fi

LABEL org.opencontainers.image.title="spoke" \
      org.opencontainers.image.description="Spoke CSI driver and NVMe cache agent for remote NFS datasets"
