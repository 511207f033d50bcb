"""Helpers the Python benchmark drivers share: free ports, the NFS hub, the WAN proxy."""

import socket
import subprocess


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_hub(hub_script, hub_dir, prefix=(), env=None, timeout=60, check=False):
    """Runs `spoke-hub start HUB_DIR`; returns the finished process (stdout, stderr as text)."""
    return subprocess.run([*prefix, hub_script, "start", hub_dir], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=timeout, env=env,
                          check=check)


def hub_vars(stdout):
    """The KEY=VALUE words spoke-hub start prints (NFS_PORT, MOUNT_PORT, EXPORT)."""
    return dict(w.split("=", 1) for w in stdout.split() if "=" in w)


def wan_proxy_argv(proxy_bin, delay_ms, routes, *extra):
    """spoke-wan-proxy with a one-way delay and LISTEN=TARGET routes, then `extra` flags."""
    argv = [proxy_bin, "--delay-ms", str(delay_ms)]
    for listen, target in routes:
        argv += ["--route", f"{listen}={target}"]
    return [*argv, *extra]
