# The e2e hub: nfs-ganesha serving NFSv3 on fixed ports (NFS 2049, MOUNT 20048), exporting a
# generated dataset with a SHA256SUMS file. Build context: e2e/kind.
#   docker build -t spoke-hub:e2e -f e2e/kind/hub.Dockerfile e2e/kind
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      nfs-ganesha nfs-ganesha-vfs rpcbind coreutils \
 && rm -rf /var/lib/apt/lists/*
COPY hub-entrypoint.sh /usr/local/bin/hub-entrypoint.sh
RUN chmod 0755 /usr/local/bin/hub-entrypoint.sh
EXPOSE 2049/tcp 20048/tcp
ENTRYPOINT ["/usr/local/bin/hub-entrypoint.sh"]
