"""The processes of a run: spawning and ending them, the agents, spokectl, the mounts."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import nodes
from spokebench import free_port

from .config import MIB
from .util import Failure, http_get, is_mountpoint, log, tail


class Processes:
    """Experiment's process, agent and mount methods."""

    def spawn(self, argv, log_path, **kw):
        """Starts argv with its output appended to log_path; cleanup ends it."""
        with open(log_path, "ab") as lf:
            p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def end_process(self, p, grace_s=10.0):
        """SIGTERM (to its group when it leads one), SIGKILL after grace_s; reaps it."""
        if p.poll() is None:
            try:
                group = p.pid if os.getpgid(p.pid) == p.pid else None
            except ProcessLookupError:
                group = None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM) if group else p.terminate()
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                log(f"pid {p.pid} ({os.path.basename(p.args[0])}) ignored SIGTERM; SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL) if group else p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def agent_dir(self, name):
        """The agent's directory: agent.yaml, cache, state, socket, logs."""
        return f"{self.work}/{name}"

    def metrics_port(self, name):
        """The port of the agent's metricsAddress (from its agent.yaml)."""
        with open(f"{self.agent_dir(name)}/agent.yaml") as f:
            for line in f:
                if line.startswith("metricsAddress: 127.0.0.1:"):
                    return int(line.rsplit(":", 1)[1])
        raise Failure(f"agent {name}: no metricsAddress in agent.yaml")

    def agent_get(self, name, path, timeout=2.0):
        """GET on the agent's metrics server (in its network namespace), or None."""
        url = f"http://127.0.0.1:{self.metrics_port(name)}{path}"
        ns = self.agent_ns.get(name)
        if ns is None:
            return http_get(url, timeout)
        try:
            return nodes.in_netns(ns, lambda: http_get(url, timeout), timeout + 3)
        except (nodes.NetError, OSError) as e:
            log(f"agent {name}: GET {path} in namespace {ns}: {e}")
            return None

    def start_agent(self, name, cache_bytes, read_ahead=64 * MIB, policy=None, ns=None,
                    extra_cfg=""):
        """Fresh dirs unless they exist (then it is a restart on the same cache and state).
        ns: run it in that network namespace (its metricsAddress is that namespace's
        loopback); extra_cfg: more agent.yaml lines (peers)."""
        d = self.agent_dir(name)
        os.makedirs(f"{d}/cache", exist_ok=True)
        os.makedirs(f"{d}/state", exist_ok=True)
        cfg = f"{d}/agent.yaml"
        if not os.path.exists(cfg):
            self.write_agent_config(cfg, d, cache_bytes, read_ahead, policy, extra_cfg)
        prefix = nodes.nsenter(ns) if ns else []
        p = self.spawn([*prefix, self.agent_bin, "--config", cfg], f"{d}/agent.log")
        self.agents[name] = p
        if ns:
            self.agent_ns[name] = ns
        self.wait_agent(name, p, ns)

    def write_agent_config(self, cfg, d, cache_bytes, read_ahead, policy, extra_cfg):
        """agent.yaml (readAheadMaxBytes is at least one block; prefetch-off agents get one:
        unused)."""
        read_ahead = min(read_ahead, cache_bytes // 2)  # the agent requires <= cache / 2
        with open(cfg, "w") as f:
            f.write(f"socket: {d}/agent.sock\ncacheDir: {d}/cache\n"
                    f"cacheSizeBytes: {cache_bytes}\nblockSizeBytes: 1048576\n"
                    f"stateDir: {d}/state\nmountRoots: [{self.work}]\nmetricsAddress: 127.0.0.1:{free_port()}\n"
                    "logLevel: info\nhub: {connections: 4, inflightPerConnection: 128, "
                    "requestTimeoutSeconds: 10}\n"
                    f"readAheadMaxBytes: {read_ahead}\n"
                    f"evictionPolicy: {policy or self.a.eviction_policy}\n"
                    "fuseKeeperSocket: \"\"\n"  # no keeper (the default is a shared one)
                    + extra_cfg)

    def wait_agent(self, name, p, ns):
        """Until the agent's socket exists and /healthz answers (10 s at most)."""
        d = self.agent_dir(name)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(f"{d}/agent.sock") and self.agent_get(
                    name, "/healthz", 0.5) is not None:
                return
            if p.poll() is not None:
                sys.stderr.write(tail(f"{d}/agent.log", 20))
                raise Failure(f"agent {name} exited at start (exit {p.returncode})")
            time.sleep(0.05)
        sys.stderr.write(tail(f"{d}/agent.log", 20))
        raise Failure(f"agent {name} did not come up within 10 s"
                      + (f" (in namespace {ns})" if ns else ""))

    def stop_agent(self, name):
        """Ends the agent (if running) and forgets it."""
        p = self.agents.pop(name, None)
        if p is not None:
            self.end_process(p)

    def ctl(self, name, *args, output=None):
        """spokectl against agent `name`; returns its exit code (output appended to a file)."""
        argv = [self.ctl_bin, "--socket", f"{self.agent_dir(name)}/agent.sock", *args]
        dest = open(output, "ab") if output else subprocess.DEVNULL
        try:
            return subprocess.run(argv, stdout=dest, stderr=subprocess.STDOUT, timeout=120,
                                  stdin=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            log(f"spokectl {args[0]} on agent {name} did not answer within 120 s")
            return 124
        finally:
            if output:
                dest.close()

    def hub_bytes(self, name):
        """Sum of every series of the agent's spoke_hub_read_bytes_total, or None."""
        if name not in self.agents:
            return None
        return self.metric_sum(name, "spoke_hub_read_bytes_total")

    def metric_sum(self, name, metric, body=None):
        """Sum of every series of `metric` in the agent's /metrics (or `body`), or None."""
        if body is None:
            try:
                body = self.agent_get(name, "/metrics")
            except (OSError, Failure):
                return None
        if body is None:
            return None
        vals = [float(l.split()[-1]) for l in body.splitlines()
                if l.startswith((f"{metric} ", f"{metric}{{"))]
        return sum(vals) if vals else None

    def wan_stats(self):
        """[up, down]: the WAN proxy's byte counters, or ["-", "-"]."""
        try:
            with open(f"{self.work}/wan.stats") as f:
                s = f.read().split()
            return s if len(s) == 2 else ["-", "-"]
        except OSError:
            return ["-", "-"]

    def mount(self, name, url, target, *flags):
        """Mounts and returns the seconds it took."""
        os.makedirs(target, exist_ok=True)
        self.mounts.append(target)
        t0 = time.monotonic()
        rc = self.ctl(name, "mount", url, target, "--mode", "dataset", *flags,
                      output=f"{self.agent_dir(name)}/spokectl.log")
        if rc != 0:
            sys.stderr.write(tail(f"{self.agent_dir(name)}/spokectl.log", 20))
            sys.stderr.write(tail(f"{self.agent_dir(name)}/agent.log", 20))
            raise Failure(f"mount {name} failed (spokectl exit {rc})")
        if not os.path.isfile(f"{target}/MANIFEST"):
            raise Failure(f"mount {name}: no MANIFEST under {target}")
        return time.monotonic() - t0

    def force_unmount(self, target):
        """Lazy unmount by fusermount3, else umount."""
        for argv in (["fusermount3", "-uz", target], ["umount", "-l", target]):
            if subprocess.run(argv, stderr=subprocess.DEVNULL).returncode == 0:
                return

    def unmount(self, name, target):
        """Unmount through the agent; forced when that fails and it is still mounted."""
        if self.ctl(name, "unmount", target) != 0 and is_mountpoint(target):
            self.force_unmount(target)
