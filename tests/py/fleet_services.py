"""Real etcd and NATS servers (Debian's etcd-server and nats-server) for the fleet tests:
free ports, a temporary data directory, stopped (or killed) by PID, restartable in place."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from kvgate_test import KVGATE, free_port


def wait_until(predicate, timeout, what, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Service:
    """A server process restartable on the same ports and data."""

    def __init__(self, name):
        self.dir = tempfile.mkdtemp(prefix=f"kvgate-{name}-")
        self.log = open(os.path.join(self.dir, "log"), "a")
        self.proc = None

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def close(self):
        self.kill(signal.SIGTERM)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Etcd(Service):
    def __init__(self):
        super().__init__("etcd")
        self.port, self.peer_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.start()

    def start(self):
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.proc = subprocess.Popen(
            ["etcd", "--name", "t", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"t={peer}"],
            stdout=self.log, stderr=self.log)
        wait_until(self.healthy, 20, "etcd to start")

    def healthy(self):
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except OSError:
            return False

    def keys(self, prefix):
        out = subprocess.run(["etcdctl", "--endpoints", self.url, "get", "--prefix",
                              "--keys-only", prefix], capture_output=True, text=True, check=True)
        return sorted(k for k in out.stdout.split("\n") if k)


class Nats(Service):
    def __init__(self):
        super().__init__("nats")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.start()

    def start(self):
        self.proc = subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=self.log)
        import socket

        def accepting():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                return False
        wait_until(accepting, 20, "nats-server to start")


class Register:
    """A `kvgate register` sidecar for one mocker."""

    def __init__(self, etcd, mocker, *args):
        self.mocker = mocker
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [KVGATE, "register", "--etcd", etcd.url, "--url", mocker.url,
             "--kv-events", f"tcp://127.0.0.1:{mocker.events}",
             "--kv-replay", f"tcp://127.0.0.1:{mocker.replay}", *args],
            stdout=self.log, stderr=self.log)

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def close(self):
        """Stops it (if it still runs): it must withdraw and exit cleanly."""
        running = self.proc.poll() is None
        self.kill(signal.SIGTERM)
        out = self.output()
        self.log.close()
        if running:
            assert self.proc.returncode == 0, f"register exited {self.proc.returncode}: {out}"
            assert "Sanitizer" not in out, out
