"""The processes the soak starts: nfs-ganesha hub, WAN proxy, fuse keeper, cache agent, and the
agent's mounts."""
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request

from .launcher import Launcher

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



class Cluster:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        b = args.build_dir
        self.agent_bin = os.path.join(b, "cache-agent/agent/spoke-cache-agent")
        self.ctl_bin = os.path.join(b, "cache-agent/cli/spokectl")
        self.proxy_bin = os.path.join(b, "e2e/wan-proxy/spoke-wan-proxy")
        self.keeper_bin = os.path.join(b, "cache-agent/keeper/spoke-fuse-keeper")
        self.hub_script = os.path.join(args.source_dir, "scripts/spoke-hub")
        self.hub_dir = os.path.join(work, "hub")
        self.export = os.path.join(self.hub_dir, "export")
        self.agent_dir = os.path.join(work, "agent")
        self.cache_dir = os.path.join(self.agent_dir, "cache")
        self.socket = os.path.join(self.agent_dir, "agent.sock")
        self.keeper_socket = os.path.join(work, "keeper.sock") if not args.no_keeper else ""
        self.keeper = None
        self.control = os.path.join(work, "proxy-control.sock")
        self.ds_mnt = os.path.join(work, "mnt/dataset")
        self.sc_mnt = os.path.join(work, "mnt/scratch")
        self.agent = None
        self.proxy = None
        self.agent_lock = threading.Lock()
        self.agent_restarts = 0
        self.rss_max_kb = 0
        # Before anything is mounted: every later process is forked by it (launcher.py).
        self.launcher = Launcher()

    def missing(self):
        return [p for p in (self.agent_bin, self.ctl_bin, self.proxy_bin, self.hub_script,
                            self.keeper_bin) if not os.access(p, os.X_OK)]

    def start_keeper(self):
        """The keeper holds each mount's /dev/fuse fd, as the chart's does: a killed agent's
        successor takes the connections over and the mounts never go away."""
        if not self.keeper_socket:
            return
        self.keeper = self.launcher.spawn([self.keeper_bin, "--socket", self.keeper_socket],
                                          os.path.join(self.work, "keeper.log"))
        deadline = time.monotonic() + 10
        while not os.path.exists(self.keeper_socket):
            if time.monotonic() > deadline or self.keeper.poll() is not None:
                raise RuntimeError("spoke-fuse-keeper did not start")
            time.sleep(0.05)

    def start_hub(self):
        out = self.launcher.run([self.hub_script, "start", self.hub_dir] + self.hub_ports,
                                timeout=60)
        if out.returncode != 0:
            raise RuntimeError("spoke-hub start failed: " + out.stderr.strip())
        kv = dict(w.split("=", 1) for w in out.stdout.split())
        self.hub_ports = [kv["NFS_PORT"], kv["MOUNT_PORT"]]

    def stop_hub(self):
        self.launcher.run([self.hub_script, "stop", self.hub_dir], timeout=60)

    def start_proxy(self):
        self.wan_nfs, self.wan_mnt = free_port(), free_port()
        self.proxy = self.launcher.spawn(
            [self.proxy_bin, "--delay-ms", str(self.args.delay_ms),
             "--route", "127.0.0.1:%d=127.0.0.1:%s" % (self.wan_nfs, self.hub_ports[0]),
             "--route", "127.0.0.1:%d=127.0.0.1:%s" % (self.wan_mnt, self.hub_ports[1]),
             "--control-socket", self.control],
            os.path.join(self.work, "proxy.log"))
        deadline = time.monotonic() + 10
        while not os.path.exists(self.control):
            if time.monotonic() > deadline or self.proxy.poll() is not None:
                raise RuntimeError("spoke-wan-proxy did not start")
            time.sleep(0.05)

    def proxy_ctl(self, line):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.control)
            s.sendall(line.encode() + b"\n")
            reply = s.recv(4096).decode().strip()
        if not reply.startswith("ok"):
            raise RuntimeError("proxy control '%s': %s" % (line, reply))
        return reply

    def write_agent_config(self):
        os.makedirs(self.agent_dir, exist_ok=True)
        self.metrics_port = free_port()
        with open(os.path.join(self.agent_dir, "agent.yaml"), "w") as f:
            f.write("socket: %s\ncacheDir: %s\ncacheSizeBytes: 1Gi\nstateDir: %s/state\n"
                    "mountRoots: [%s]\n"
                    "metricsAddress: 127.0.0.1:%d\nlogLevel: info\n"
                    "hub: {connections: 4, inflightPerConnection: 16, "
                    "requestTimeoutSeconds: %d}\n"
                    "fuseKeeperSocket: \"%s\"\n"
                    % (self.socket, self.cache_dir, self.agent_dir, self.work, self.metrics_port,
                       self.args.hub_timeout, self.keeper_socket))

    def start_agent(self, timeout=30):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.agent = self.launcher.spawn(
            [self.agent_bin, "--config", os.path.join(self.agent_dir, "agent.yaml")],
            os.path.join(self.agent_dir, "agent.log"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.agent.poll() is not None:
                raise RuntimeError("spoke-cache-agent exited with %s" % self.agent.returncode)
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % self.metrics_port,
                                            timeout=2) as r:
                    if r.status == 200 and os.path.exists(self.socket):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("spoke-cache-agent did not become healthy in %d s" % timeout)

    def spokectl(self, *a, timeout=60):
        return self.launcher.run([self.ctl_bin, "--socket", self.socket] + list(a),
                                 timeout=timeout)

    def url(self, sub):
        if self.args.nfs_version == "4.1":
            return "nfs://127.0.0.1%s/%s?version=4.1&nfsport=%d" % (self.export, sub, self.wan_nfs)
        return "nfs://127.0.0.1%s/%s?nfsport=%d&mountport=%d" % (
            self.export, sub, self.wan_nfs, self.wan_mnt)

    def mount(self):
        for sub, mnt, extra in (
                ("dataset", self.ds_mnt, ["--mode", "dataset", "--consistency", "immutable",
                                          "--read-only"]),
                ("scratch", self.sc_mnt, ["--mode", "scratch"])):
            os.makedirs(mnt, exist_ok=True)
            r = self.spokectl("mount", self.url(sub), mnt, "--hub-timeout",
                              str(self.args.hub_timeout), *extra)
            if r.returncode != 0:
                raise RuntimeError("spokectl mount %s: %s%s" % (sub, r.stdout, r.stderr))

    def wait_mounts_restored(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.spokectl("status", timeout=10)
            if r.returncode == 0 and self.ds_mnt in r.stdout and self.sc_mnt in r.stdout:
                try:
                    os.stat(self.ds_mnt)
                    os.stat(self.sc_mnt)
                    return True
                except OSError:
                    pass
            time.sleep(0.2)
        return False

    def metric(self, name):
        """Sum of a metric's series in the agent's /metrics; None when unavailable."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                        timeout=5) as r:
                body = r.read().decode()
        except OSError:
            return None
        vals = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                if line.startswith(name + " ") or line.startswith(name + "{")]
        return sum(vals) if vals else None

    def kill_agent(self, timeout=30):
        """SIGKILL; returns None once the process is gone, or a description of why it is not
        after `timeout` (threads stuck in the kernel: the successor is started anyway, its
        takeover may release them). Never waits forever."""
        with self.agent_lock:
            self.agent.send_signal(signal.SIGKILL)
            try:
                self.agent.wait(timeout=timeout)
                return None
            except subprocess.TimeoutExpired:
                stuck = []
                for t in sorted(os.listdir("/proc/%d/task" % self.agent.pid)):
                    try:
                        with open("/proc/%d/task/%s/wchan" % (self.agent.pid, t)) as f:
                            stuck.append(f.read().strip() or "?")
                    except OSError:
                        pass
                return "pid %d still alive %d s after SIGKILL (threads waiting in: %s)" % (
                    self.agent.pid, timeout, ", ".join(sorted(set(stuck))))

    def restart_agent(self):
        with self.agent_lock:
            self.start_agent()
            self.agent_restarts += 1

    def sample_rss(self):
        try:
            with open("/proc/%d/status" % self.agent.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        kb = int(line.split()[1])
                        self.rss_max_kb = max(self.rss_max_kb, kb)
                        return kb
        except OSError:
            return None

    def stop_all(self):
        for mnt in (self.ds_mnt, self.sc_mnt):
            if self.agent and self.agent.poll() is None:
                try:
                    self.spokectl("unmount", mnt, timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        for p in (self.agent, self.proxy, self.keeper):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for mnt in (self.ds_mnt, self.sc_mnt):
            self.launcher.run(["umount", "-l", mnt], timeout=30)
        self.stop_hub()

