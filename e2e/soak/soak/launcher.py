"""Every process the soak starts, forked by a launcher that holds no file of a Spoke mount.

A child inherits the descriptors of the process that forks it, and closing one (exec closes
the close-on-exec ones) sends the agent a FLUSH. On a write-back volume a FLUSH of a file
open for writing waits for its held writes: for the agent, and for the hub. The soak's
writer threads hold such files, so an agent it forked after a kill would wait for its own
answer, and a hub restart it forked would wait for the hub. The launcher is started before
anything is mounted; requests and replies are JSON lines on its stdin and stdout.

  spawn {argv, log}      start argv, stdout and stderr appended to log -> {pid}
  run {argv, timeout}    run argv to its end -> {rc, stdout, stderr} (rc None: timed out)
  poll {pid}             -> {rc} (None while it runs)
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time


def serve():
    procs = {}
    out_lock = threading.Lock()

    def reply(rid, **kw):
        with out_lock:
            sys.stdout.write(json.dumps(dict(kw, id=rid)) + "\n")
            sys.stdout.flush()

    def handle(req):
        rid, op = req["id"], req["op"]
        try:
            if op == "spawn":
                with open(req["log"], "a") as logf:
                    p = subprocess.Popen(req["argv"], stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
                procs[p.pid] = p
                reply(rid, pid=p.pid)
            elif op == "run":
                try:
                    r = subprocess.run(req["argv"], capture_output=True, text=True,
                                       timeout=req.get("timeout"), stdin=subprocess.DEVNULL)
                    reply(rid, rc=r.returncode, stdout=r.stdout, stderr=r.stderr)
                except subprocess.TimeoutExpired:
                    reply(rid, rc=None, stdout="", stderr="timed out")
            elif op == "poll":
                reply(rid, rc=procs[req["pid"]].poll())
            else:
                reply(rid, error="unknown op " + op)
        except (OSError, KeyError) as e:
            reply(rid, error=str(e))

    for line in sys.stdin:
        threading.Thread(target=handle, args=(json.loads(line),), daemon=True).start()


class Completed:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


class Launched:
    """What the soak uses of subprocess.Popen, for a process the launcher started."""

    def __init__(self, launcher, pid):
        self.launcher, self.pid, self.returncode = launcher, pid, None

    def poll(self):
        if self.returncode is None:
            self.returncode = self.launcher.call("poll", pid=self.pid)["rc"]
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class Launcher:
    """The soak's side: thread-safe; every call waits at most its timeout plus 30 s."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        self.next_id = 0
        self.replies = {}
        self.arrived = threading.Condition(self.lock)
        threading.Thread(target=self._read, daemon=True, name="launcher").start()

    def _read(self):
        for line in self.proc.stdout:
            r = json.loads(line)
            with self.lock:
                self.replies[r["id"]] = r
                self.arrived.notify_all()

    def call(self, op, timeout=None, **kw):
        with self.lock:
            self.next_id += 1
            rid = self.next_id
            self.proc.stdin.write(json.dumps(dict(kw, op=op, id=rid, timeout=timeout)) + "\n")
            self.proc.stdin.flush()
            bound = (timeout or 0) + 30
            if not self.arrived.wait_for(lambda: rid in self.replies, timeout=bound):
                raise RuntimeError("launcher: no answer to %s within %d s" % (op, bound))
            r = self.replies.pop(rid)
        if "error" in r:
            raise OSError("launcher %s %s: %s" % (op, kw.get("argv", ""), r["error"]))
        return r

    def spawn(self, argv, log):
        return Launched(self, self.call("spawn", argv=argv, log=log)["pid"])

    def run(self, argv, timeout=60):
        r = self.call("run", argv=argv, timeout=timeout)
        if r["rc"] is None:
            raise subprocess.TimeoutExpired(argv, timeout)
        return Completed(r["rc"], r["stdout"], r["stderr"])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


if __name__ == "__main__":
    serve()
