#!/usr/bin/env bash
# Entry point of the e2e hub image: seed the export with a dataset, then run rpcbind and
# nfs-ganesha (NFSv3, fixed ports) in the foreground. The export directory should be a volume
# (emptyDir), not the image's overlay filesystem: ganesha's VFS backend needs file handles.
set -euo pipefail

EXPORT=${EXPORT_DIR:-/srv/export}
FILES=${DATASET_FILES:-64}           # files in the dataset
FILE_KIB=${DATASET_FILE_KIB:-3000}   # size of each file (not a multiple of the 1 MiB block)
STATE=/var/lib/spoke-hub

mkdir -p "$EXPORT/dataset" "$EXPORT/scratch" "$STATE/recovery" /run/rpcbind /var/run/ganesha

if [ ! -f "$EXPORT/dataset/SHA256SUMS" ]; then
  echo "hub: generating $FILES files of $FILE_KIB KiB in $EXPORT/dataset"
  for i in $(seq 0 $((FILES - 1))); do
    dir="$EXPORT/dataset/shard-$((i % 8))"
    mkdir -p "$dir"
    head -c "$((FILE_KIB * 1024))" /dev/urandom >"$dir/sample-$i.bin"
  done
  (cd "$EXPORT/dataset" && find . -type f -name '*.bin' -print0 | sort -z |
    xargs -0 sha256sum >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
fi

cat >"$STATE/ganesha.conf" <<CONF
NFS_CORE_PARAM {
  Protocols = 3;
  NFS_Port = 2049;
  MNT_Port = 20048;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Enable_UDP = false;
}
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $STATE/recovery; }
EXPORT {
  Export_Id = 1;
  Path = $EXPORT;
  Pseudo = /export;
  Protocols = 3;
  Transports = TCP;
  Access_Type = RW;
  Squash = No_Root_Squash;
  SecType = sys;
  FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
CONF

# ganesha registers NFSv3 with rpcbind at start-up and exits if it cannot.
rpcbind -f -w &
rpcbind=$!
for _ in $(seq 50); do [ -S /run/rpcbind.sock ] && break; sleep 0.1; done

ganesha.nfsd -F -f "$STATE/ganesha.conf" -L /dev/stdout -p "$STATE/ganesha.pid" &
ganesha=$!
stop() {
  kill -TERM "$ganesha" 2>/dev/null || true
  wait "$ganesha" || true
  kill -TERM "$rpcbind" 2>/dev/null || true
  exit 0
}
trap stop TERM INT
wait "$ganesha"
