"""Helpers shared by the Python integration tests (run with Debian's /usr/bin/python3)."""
import json
import os
import subprocess
import unittest

KVGATE = os.environ.get("KVGATE_BIN", os.path.join(os.path.dirname(__file__), "../../build/kvgate"))


def run(args, stdin=b"", check=True, timeout=60):
    """Runs kvgate with `args`; returns (exit code, stdout text, stderr text)."""
    p = subprocess.run([KVGATE, *args], input=stdin, capture_output=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"kvgate {' '.join(args)} exited {p.returncode}: {p.stderr.decode()}")
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main():
    unittest.main(verbosity=2)
