"""The hub, the WAN proxy, the agent and the mounts of one scale run."""

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import spokebench

AGENT_YAML = ("socket: %s\ncacheDir: %s/cache\ncacheSizeBytes: 1Gi\nstateDir: %s/state\n"
              "mountRoots: [%s]\n"
              "metricsAddress: 127.0.0.1:%d\nlogLevel: info\n"
              "hub: {connections: 4, inflightPerConnection: 16, requestTimeoutSeconds: %d}\n"
              "fuseKeeperSocket: \"\"\n")  # no keeper (the default is a shared one)


def binaries(a):
    """{name: path} of the programs the run needs."""
    b = os.path.abspath(a.build_dir)
    return {"agent": os.path.join(b, "cache-agent/agent/spoke-cache-agent"),
            "ctl": os.path.join(b, "cache-agent/cli/spokectl"),
            "proxy": os.path.join(b, "e2e/wan-proxy/spoke-wan-proxy"),
            "hub": os.path.join(a.source_dir, "scripts/spoke-hub")}


def not_built(bins):
    """The first of bins that is not an executable, or None."""
    return next((x for x in bins.values() if not os.access(x, os.X_OK)), None)


class Bench:
    """Everything the run started; cleanup() stops and removes it."""

    def __init__(self, a, bins):
        self.a = a
        self.bins = bins
        self.work = tempfile.mkdtemp(prefix="spoke-scale-")
        self.hub_dir = os.path.join(self.work, "hub")
        self.sock = os.path.join(self.work, "agent.sock")
        self.procs = []
        self.mounts = []
        self.agent = None
        self.hub = {}  # spoke-hub start's NFS_PORT, MOUNT_PORT, EXPORT
        self.export = None
        self.wan = None  # (nfs port, mount port) of the proxy

    def ctl(self, *args, timeout=600):
        """spokectl's output; RuntimeError when it fails."""
        r = subprocess.run([self.bins["ctl"], "--socket", self.sock] + list(args),
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("spokectl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout

    def start_hub(self):
        """nfs-ganesha on loopback, with the Attr_Expiration_Time the options ask for."""
        env = dict(os.environ)
        if self.a.hub_attr_expiration >= 0:
            env["SPOKE_HUB_ATTR_EXPIRATION"] = str(self.a.hub_attr_expiration)
        r = spokebench.start_hub(self.bins["hub"], self.hub_dir, env=env, check=True)
        self.hub = spokebench.hub_vars(r.stdout)
        self.export = self.hub["EXPORT"]

    def start_proxy(self):
        """spoke-wan-proxy in front of the hub's NFS and MOUNT ports."""
        self.wan = (spokebench.free_port(), spokebench.free_port())
        routes = [("127.0.0.1:%d" % self.wan[0], "127.0.0.1:%s" % self.hub["NFS_PORT"]),
                  ("127.0.0.1:%d" % self.wan[1], "127.0.0.1:%s" % self.hub["MOUNT_PORT"])]
        self.procs.append(subprocess.Popen(
            spokebench.wan_proxy_argv(self.bins["proxy"], self.a.delay_ms, routes)))

    def start_agent(self):
        """The agent with a 1 GiB cache; waits (up to ~30 s) for /healthz and its socket."""
        metrics = spokebench.free_port()
        cfg = os.path.join(self.work, "agent.yaml")
        with open(cfg, "w") as f:
            f.write(AGENT_YAML % (self.sock, self.work, self.work, self.work, metrics,
                                  self.a.hub_timeout))
        self.agent = subprocess.Popen([self.bins["agent"], "--config", cfg],
                                      stdout=open(os.path.join(self.work, "agent.log"), "w"),
                                      stderr=subprocess.STDOUT)
        self.procs.insert(0, self.agent)
        for _ in range(300):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % metrics,
                                            timeout=2):
                    if os.path.exists(self.sock):
                        break
            except OSError:
                pass
            time.sleep(0.1)

    def url(self, volume):
        """The volume's URL through the WAN proxy."""
        return "nfs://127.0.0.1%s/%s?nfsport=%d&mountport=%d" % (self.export, volume,
                                                                  *self.wan)

    def target(self, volume):
        """The volume's mount point."""
        return os.path.join(self.work, volume)

    def make_targets(self, volumes):
        """The mount points, all made before the first mount."""
        for v in volumes:
            os.makedirs(self.target(v))

    def mount(self, volume, *flags):
        """Mounts the export's directory `volume` on work/volume; returns the target."""
        target = self.target(volume)
        self.ctl("mount", self.url(volume), target, *flags)
        self.mounts.append(target)
        return target

    def cleanup(self):
        """Unmounts, stops the agent and proxy, stops the hub, removes the work dir."""
        for m in self.mounts:
            subprocess.run([self.bins["ctl"], "--socket", self.sock, "unmount", m],
                           capture_output=True, timeout=120)
        for proc in self.procs:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for m in self.mounts:
            subprocess.run(["umount", "-l", m], capture_output=True)
        subprocess.run([self.bins["hub"], "stop", self.hub_dir], capture_output=True,
                       timeout=60)
        if self.a.keep_workdir:
            print("work dir kept: " + self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)
