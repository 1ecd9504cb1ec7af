"""Helpers shared by the Python integration tests (run with Debian's /usr/bin/python3)."""
import json
import os
import socket
import subprocess
import unittest
import urllib.error
import urllib.request

KVGATE = os.environ.get("KVGATE_BIN", os.path.join(os.path.dirname(__file__), "../../build/kvgate"))


def run(args, stdin=b"", check=True, timeout=60):
    """Runs kvgate with `args`; returns (exit code, stdout text, stderr text)."""
    p = subprocess.run([KVGATE, *args], input=stdin, capture_output=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"kvgate {' '.join(args)} exited {p.returncode}: {p.stderr.decode()}")
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mocker:
    """A `kvgate mocker` process with KV events and replay on free ports. Pass `ports` (from
    a previous Mocker) to restart one in the same place."""

    def __init__(self, *args, ports=None, speedup="50", events=True):
        self.args = args
        # A port free_port() found can be taken by another process before the mocker binds
        # it (tests run in parallel): then the mocker exits at once, and new ports are tried.
        for attempt in range(5):
            self.port, self.events, self.replay = ports or (free_port(), free_port(), free_port())
            # events=False: an engine whose KV events were never enabled (the ports stay
            # reserved for a gateway config that expects them).
            event_args = ["--kv-events", f"tcp://127.0.0.1:{self.events}",
                          "--kv-replay", f"tcp://127.0.0.1:{self.replay}"] if events else []
            self.proc = subprocess.Popen(
                [KVGATE, "mocker", "--port", str(self.port), "--speedup", speedup,
                 *event_args, *args],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if self.proc.stdout.readline():  # the "listening" line
                break
            self.proc.wait(10)
            error = self.proc.stderr.read()
            self.proc.stdout.close()
            self.proc.stderr.close()
            if ports is not None or attempt == 4:
                raise AssertionError(f"mocker did not start: {error}")
        self.url = f"http://127.0.0.1:{self.port}"

    def post(self, path, body, raw=False):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                text = r.read().decode()
                return r.status, text if raw else json.loads(text)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read().decode())

    def sse(self, path, body):
        status, text = self.post(path, body, raw=True)
        events = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]", events
        return [json.loads(e) for e in events[:-1]]

    def metric(self, name):
        """Sum of the samples of `name` on its /metrics."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if not line.startswith("#") and line.split("{")[0].split(" ")[0] == name)

    @property
    def ports(self):
        return self.port, self.events, self.replay

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()



def formula_experts(tokens, start, layers, top_k, experts):
    """The mocker's routed experts (docs/design.md §8), rows [start, len(tokens) - 1)."""
    import numpy as np
    rows = max(0, len(tokens) - 1 - start)
    out = np.zeros((rows, layers, top_k), dtype=np.int64)
    for r in range(rows):
        p = start + r
        for l in range(layers):
            for k in range(top_k):
                out[r, l, k] = (tokens[p] * 31 + p * 17 + l * 7 + k * 13) % experts
    return out


def main():
    unittest.main(verbosity=2)
