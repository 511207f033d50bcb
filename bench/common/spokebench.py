"""Helpers the Python benchmark drivers share: free ports, the NFS hub, the WAN proxy, and a
rig of one hub, proxy and agent."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_s(pid):
    """utime + stime of a process (its threads included), seconds; None when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


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


class AgentRig:
    """One hub behind the WAN proxy and one agent with its mounts, in a work directory under
    /var/tmp: what the single-node benchmarks (cold fill, writes) stand on. Subclasses write
    the agent's config (agent_yaml) and use ctl(); cleanup() stops everything they started."""

    def __init__(self, build_dir, prefix, delay_ms, keep_workdir=False, cache_parent=None,
                 link_mbytes=0):
        b = os.path.abspath(build_dir)
        self.build_dir = build_dir
        self.agent_bin = os.path.join(b, "cache-agent/agent/spoke-cache-agent")
        self.ctl_bin = os.path.join(b, "cache-agent/cli/spokectl")
        self.proxy_bin = os.path.join(b, "e2e/wan-proxy/spoke-wan-proxy")
        self.link_bin = os.path.join(b, "bench/remote/spoke-remote-link-bench")
        self.hub = os.path.join(ROOT, "scripts/spoke-hub")
        self.delay_ms = delay_ms
        # The WAN link's bandwidth, MB/s each way, shared by every connection (0: no cap, so
        # that the machine's CPU bounds what the proxy carries).
        self.link_mbytes = link_mbytes
        self.keep_workdir = keep_workdir
        self.work = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
        self.hub_dir = os.path.join(self.work, "hub")
        self.sock = os.path.join(self.work, "agent.sock")
        # The agent's cacheDir: in the work directory (the root disk), or in cache_parent (a
        # faster disk, or /dev/shm to take the cache disk's write rate out of a figure).
        self.cache_dir = os.path.join(self.work, "cache")
        self.cache_elsewhere = cache_parent is not None
        if self.cache_elsewhere:
            self.cache_dir = tempfile.mkdtemp(prefix=prefix + "cache-", dir=cache_parent)
        self.procs = []   # every process started here (Popen), stopped by pid at the end
        self.mounts = []  # every mount target asked for
        self.hub_started = False

    def ctl(self, *args, timeout=900):
        r = subprocess.run([self.ctl_bin, "--socket", self.sock] + list(args),
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("spokectl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout

    def start(self, agent_yaml, ready=lambda: True):
        """Hub, proxy (self.url is the export's nfs:// URL with a %s for the sub-directory),
        then the agent from agent_yaml, waited for until its socket exists and ready()."""
        for x in (self.agent_bin, self.ctl_bin, self.proxy_bin, self.link_bin, self.hub):
            if not os.access(x, os.X_OK):
                raise RuntimeError("not built: %s (ninja -C %s spoke-cache-agent spokectl "
                                   "spoke-wan-proxy spoke-remote-link-bench)"
                                   % (x, self.build_dir))
        kv = hub_vars(start_hub(self.hub, self.hub_dir, check=True).stdout)
        self.hub_started = True
        self.export, self.ganesha_pid = kv["EXPORT"], int(kv["PID"])
        wan_nfs, wan_mnt = free_port(), free_port()
        self.proxy = subprocess.Popen(
            wan_proxy_argv(self.proxy_bin, self.delay_ms,
                           [("127.0.0.1:%d" % wan_nfs, "127.0.0.1:%s" % kv["NFS_PORT"]),
                            ("127.0.0.1:%d" % wan_mnt, "127.0.0.1:%s" % kv["MOUNT_PORT"])],
                           "--link-mbytes", "%g" % self.link_mbytes),
            stdout=open(os.path.join(self.work, "proxy.log"), "w"), stderr=subprocess.STDOUT)
        self.procs.append(self.proxy)
        self.url = "nfs://127.0.0.1%s/%%s?nfsport=%d&mountport=%d" % (self.export, wan_nfs,
                                                                      wan_mnt)
        # The same hub without the WAN: what the hub itself takes, for baselines.
        self.lan_url = "nfs://127.0.0.1%s/%%s?nfsport=%s&mountport=%s" % (
            self.export, kv["NFS_PORT"], kv["MOUNT_PORT"])
        with open(os.path.join(self.work, "agent.yaml"), "w") as f:
            f.write(agent_yaml)
        self.agent = subprocess.Popen(
            [self.agent_bin, "--config", os.path.join(self.work, "agent.yaml")],
            stdout=open(os.path.join(self.work, "agent.log"), "w"), stderr=subprocess.STDOUT)
        self.procs.insert(0, self.agent)
        for _ in range(200):
            if self.agent.poll() is not None:
                raise RuntimeError("the agent exited at start; see %s/agent.log" % self.work)
            try:
                if os.path.exists(self.sock) and ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the agent did not come up within 10 s")

    def cleanup(self, unmount_timeout=300, stop_timeout=60):
        for m in self.mounts:
            subprocess.run([self.ctl_bin, "--socket", self.sock, "unmount", m],
                           capture_output=True, timeout=unmount_timeout)
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=stop_timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for m in self.mounts:
            if os.path.ismount(m):
                subprocess.run(["umount", "-l", m], capture_output=True)
        if self.hub_started:
            subprocess.run([self.hub, "stop", self.hub_dir], capture_output=True, timeout=60)
        if self.keep_workdir:
            print("work dir kept: " + self.work, flush=True)
        else:
            shutil.rmtree(self.work, ignore_errors=True)
        if self.cache_elsewhere and not self.keep_workdir:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
