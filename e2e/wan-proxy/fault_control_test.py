#!/usr/bin/env python3
"""Integration test of spoke-wan-proxy's fault controls (--control-socket).

  fault_control_test.py PATH/TO/spoke-wan-proxy

Starts a loopback echo server and the proxy in front of it (5 ms each way), then checks each
control: latency, bandwidth, blackhole (data held, then delivered), reset (open connections
aborted, new ones refused for the period), clear, status, and clear errors for bad commands.
Also checks that without faults the bytes pass unchanged, and that --link-mbytes caps the
whole link: two connections share it rather than each getting it. Exit 0 on success.
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EchoServer:
    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(c,), daemon=True).start()

    @staticmethod
    def _echo(c):
        with c:
            try:
                while data := c.recv(65536):
                    c.sendall(data)
            except OSError:
                pass


def control(path, line):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(line.encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.decode().strip()


def connect(port):
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def roundtrip(c, payload):
    """Sends payload, returns (echo, seconds)."""
    t0 = time.monotonic()
    c.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = c.recv(65536)
        if not chunk:
            raise ConnectionError("closed after %d bytes" % len(got))
        got += chunk
    return got, time.monotonic() - t0


failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def start_proxy(proxy_bin, port, target, *extra):
    proc = subprocess.Popen([proxy_bin, "--delay-ms", "5", "--route",
                             "127.0.0.1:%d=127.0.0.1:%d" % (port, target), *extra])
    for _ in range(100):
        try:
            connect(port).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("spoke-wan-proxy did not listen on %d" % port)


def check_link_cap(proxy_bin, echo):
    """--link-mbytes 0.5: 500 kB/s each way for all connections together. Two connections
    echoing 250 kB each at once move 500 kB each way, which takes at least ~1 s; with a cap
    per connection instead, each would finish in ~0.5 s. (Lower bounds only: a slow machine
    cannot make them fail.)"""
    r = subprocess.run([proxy_bin, "--delay-ms", "5", "--route", "127.0.0.1:1=127.0.0.1:2",
                        "--link-mbytes", "fast"], capture_output=True, text=True, timeout=10)
    check(r.returncode == 2 and "bad --link-mbytes 'fast'" in r.stderr,
          "a bad --link-mbytes is refused and named: " + r.stderr.strip().splitlines()[0])
    port = free_port()
    proc = start_proxy(proxy_bin, port, echo.port, "--link-mbytes", "0.5")
    try:
        payload = os.urandom(250_000)
        c = connect(port)
        got, t = roundtrip(c, payload)
        check(got == payload and t >= 0.45,
              "link cap, one connection: 250 kB echoed in %.2f s >= 0.45 s" % t)
        c.close()
        results = {}

        def run(k):
            conn = connect(port)
            results[k] = roundtrip(conn, payload)
            conn.close()

        t0 = time.monotonic()
        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        t = time.monotonic() - t0
        intact = all(results.get(k, (b"",))[0] == payload for k in range(2))
        check(intact and t >= 0.9,
              "link cap shared: two connections' 2 x 250 kB echoed in %.2f s >= 0.9 s" % t)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    proxy_bin = sys.argv[1]
    echo = EchoServer()
    port = free_port()
    work = tempfile.mkdtemp(prefix="spoke-wanproxy-test-")
    ctl = os.path.join(work, "control.sock")
    proc = subprocess.Popen([proxy_bin, "--delay-ms", "5", "--route",
                             "127.0.0.1:%d=127.0.0.1:%d" % (port, echo.port),
                             "--control-socket", ctl])
    try:
        for _ in range(100):
            if os.path.exists(ctl):
                try:
                    connect(port).close()
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        payload = os.urandom(200_000)

        c = connect(port)
        got, base = roundtrip(c, payload)
        check(got == payload, "no fault: bytes pass unchanged")
        check(control(ctl, "status") == "ok none", "status with no fault: 'ok none'")

        # Latency: 300 ms more each way -> a round trip of at least 600 ms.
        check(control(ctl, "latency 300 2") == "ok latency", "latency accepted")
        check("latency=300.000ms" in control(ctl, "status"), "status shows the latency")
        got, t = roundtrip(c, b"x" * 100)
        check(got == b"x" * 100 and t >= 0.6, "latency spike: round trip %.3f s >= 0.6 s" % t)
        check(control(ctl, "clear") == "ok clear", "clear accepted")
        check(control(ctl, "status") == "ok none", "clear ends every fault")

        # Bandwidth: 100 KiB/s each way -> 200 kB through both directions takes >= 1.9 s.
        check(control(ctl, "bandwidth 100 30") == "ok bandwidth", "bandwidth accepted")
        got, t = roundtrip(c, payload)
        check(got == payload and t >= 1.9, "bandwidth cap: 200 kB echoed in %.2f s >= 1.9 s" % t)
        control(ctl, "clear")

        # Blackhole: nothing arrives while it lasts, everything arrives (intact) after.
        # t0 before the command: the blackhole ends 1.5 s after the proxy took it, which is
        # after t0 + 1.5 (a t0 taken after the reply could come later than the proxy's start).
        t0 = time.monotonic()
        check(control(ctl, "blackhole 1.5") == "ok blackhole", "blackhole accepted")
        c2 = connect(port)  # a new connection is accepted, but nothing is forwarded either
        c.sendall(b"held")
        c2.sendall(b"new")
        c.settimeout(0.8)
        try:
            early = c.recv(16)
        except socket.timeout:
            early = None
        check(early is None, "blackhole: nothing forwarded while it lasts")
        c.settimeout(10)
        c2.settimeout(10)
        late = b""
        while len(late) < 4:
            late += c.recv(16)
        check(late == b"held" and time.monotonic() - t0 >= 1.5,
              "blackhole: held data delivered intact after it ends (%.2f s)"
              % (time.monotonic() - t0))
        check(c2.recv(16) == b"new", "blackhole: a connection accepted during it works after")
        c2.close()

        # Reset: open connections are aborted; for 1 s new ones are refused at once.
        reply = control(ctl, "reset 1")
        check(reply.startswith("ok reset") and "connections" in reply, "reset accepted: " + reply)
        try:
            c.sendall(b"after reset")
            data = c.recv(16)
            aborted = data == b""
        except OSError:
            aborted = True
        check(aborted, "reset: the open connection is aborted")
        try:
            c3 = connect(port)
            c3.settimeout(5)
            c3.sendall(b"z")
            refused = c3.recv(16) == b""
        except OSError:
            refused = True
        check(refused, "reset: a new connection during the period is aborted")
        time.sleep(1.2)
        c4 = connect(port)
        got, _ = roundtrip(c4, payload)
        check(got == payload, "after the reset period new connections work again")
        c4.close()

        # Bad commands: clear errors, and the faults stay off.
        for bad in ["latency", "latency -5 2", "latency 10 0", "bandwidth 10 99999",
                    "blackhole x", "reset 1 2", "frobnicate"]:
            r = control(ctl, bad)
            check(r.startswith("error "), "'%s' rejected: %s" % (bad, r))
        check(control(ctl, "status") == "ok none", "rejected commands injected nothing")
        check(proc.poll() is None, "the proxy is still running")
        check_link_cap(proxy_bin, echo)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        try:
            os.unlink(ctl)
        except OSError:
            pass
        os.rmdir(work)
    if failures:
        print("%d check(s) failed: %s" % (len(failures), "; ".join(failures)), file=sys.stderr)
        return 1
    print("all fault-control checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
