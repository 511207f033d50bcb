#!/usr/bin/env python3
"""Writes a one-layer docker-archive image (what `ctr images import` loads) without a registry.

  make_image.py --tag localhost/x:1 --out x.tar [--base rootfs.tar] [--add SRC:DEST[:MODE]]...
                [--entrypoint /bin/x] [--env K=V]...

The layer is --base's members (a rootfs tarball, e.g. from mmdebstrap) followed by each --add
file. Files are owned by root; timestamps are kept so that an unchanged input gives the same
layer.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile


def layer_name(name):
    """A tar member's name as it goes into the layer: relative, no "./" prefix."""
    if name.startswith("./"):
        name = name[2:]
    return name.lstrip("/").rstrip("/")


def build_layer(path, base, adds):
    added = {dest.lstrip("/") for _, dest, _ in adds}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as layer:
        parents = set()
        if base:
            with tarfile.open(base) as rootfs:
                for member in rootfs:
                    name = layer_name(member.name)
                    if not name or name in added:
                        continue
                    member.name = name
                    if member.islnk():  # hard links name another member of the layer
                        member.linkname = layer_name(member.linkname)
                    parents.add(name)
                    data = rootfs.extractfile(member) if member.isreg() else None
                    layer.addfile(member, data)
        for src, dest, mode in adds:
            dest = dest.lstrip("/")
            parts = dest.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in parents:
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    layer.addfile(info)
                    parents.add(d)
            info = layer.gettarinfo(src, arcname=dest)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if mode is not None:
                info.mode = mode
            with open(src, "rb") as f:
                layer.addfile(info, f)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--base", help="rootfs tarball to start the layer from")
    p.add_argument("--add", action="append", default=[], help="SRC:DEST[:OCTAL_MODE]")
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    args = p.parse_args()

    adds = []
    for spec in args.add:
        fields = spec.split(":")
        if len(fields) not in (2, 3) or not fields[0] or not fields[1].startswith("/"):
            sys.exit(f"make_image: bad --add {spec!r}: want SRC:/ABS/DEST[:OCTAL_MODE]")
        if not os.path.isfile(fields[0]):
            sys.exit(f"make_image: --add {spec!r}: {fields[0]} is not a file")
        adds.append((fields[0], fields[1], int(fields[2], 8) if len(fields) == 3 else None))

    out_dir = os.path.dirname(os.path.abspath(args.out))
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        layer_path = os.path.join(tmp, "layer.tar")
        build_layer(layer_path, args.base, adds)
        diff_id = "sha256:" + sha256_of(layer_path)
        env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + args.env
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": env, "Entrypoint": args.entrypoint or None, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "e2e/k8s/make_image.py"}],
        }
        config_bytes = json.dumps(config, sort_keys=True).encode()
        config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
        manifest = [{"Config": config_name, "RepoTags": [args.tag], "Layers": ["layer.tar"]}]
        tmp_out = args.out + ".tmp"
        with tarfile.open(tmp_out, "w") as archive:
            for name, data in ((config_name, config_bytes),
                               ("manifest.json", json.dumps(manifest).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            archive.add(layer_path, arcname="layer.tar")
        os.replace(tmp_out, args.out)


if __name__ == "__main__":
    main()
