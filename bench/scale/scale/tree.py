"""Making the hub's trees and walking a mount."""

import os
import time

from .procfs import log

PER_DIR = 1000  # files per directory of the tree and of the churn set


def make_tree(root, files, big):
    """`files` empty files under root/tree (PER_DIR a directory) and `big` in root/big."""
    t = time.monotonic()
    os.makedirs(os.path.join(root, "tree"))
    for i in range(files):
        if i % PER_DIR == 0:
            d = os.path.join(root, "tree", "d%05d" % (i // PER_DIR))
            os.mkdir(d)
        os.close(os.open(os.path.join(d, "f%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    bigdir = os.path.join(root, "big")  # its own volume: the tree's walk does not list it
    os.makedirs(bigdir)
    for i in range(big):
        os.close(os.open(os.path.join(bigdir, "e%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    log("tree: %d files + %d-entry directory created on the hub in %.1f s"
        % (files, big, time.monotonic() - t))


def walk(top, vanished=None):
    """scandir + lstat of every entry; returns (entries, directories). With a list as
    vanished, an entry listed but gone by its lstat (ENOENT) is appended to it, not raised."""
    entries, dirs = 0, 0
    stack = [top]
    while stack:
        d = stack.pop()
        dirs += 1
        with os.scandir(d) as it:
            for e in it:
                try:
                    os.lstat(e.path)
                except FileNotFoundError:
                    if vanished is None:
                        raise
                    vanished.append(e.path)
                    continue
                entries += 1
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return entries, dirs
