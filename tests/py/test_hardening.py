"""What adversarial clients and misbehaving engines can do to `kvgate serve`, with real
processes and raw sockets: authentication before the body, keys files that would turn
authentication off, a worker that answers /health but hangs every request, clients that
leave or stop reading, running out of file descriptors, and Retry-After on overload."""
import http.client
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import KVGATE, Mocker, main  # noqa: E402
from test_gateway import Gateway, worker_config  # noqa: E402


def raw_request(port, data, read=True, timeout=5):
    """Sends `data` on a fresh connection; returns the reply (until close or timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    if not read:
        return s
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and b"Content-Length" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
                if len(body) >= n:
                    break
    except socket.timeout:
        pass
    s.close()
    return out


def port_of(gw):
    return int(gw.url.rsplit(":", 1)[1])


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class TruncatingEngine:
    """A fake engine that starts an SSE stream, sends half an event and dies."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                if data.startswith(b"GET /health"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                part = b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"te'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n"
                             + f"{len(part):x}\r\n".encode() + part + b"\r\n")
                time.sleep(0.1)
                conn.shutdown(socket.SHUT_RDWR)

    def close(self):
        self.listener.close()


class HardeningTest(unittest.TestCase):
    def test_a_stream_cut_inside_an_event_ends_with_a_well_formed_error_event(self):
        engine = TruncatingEngine()
        gw = Gateway(config={"workers": [{"url": engine.url}]})
        try:
            with gw.open_stream({"prompt": "x", "max_tokens": 5}) as r:
                text = r.read().decode()
            events = [e for e in text.split("\n\n") if e.strip()]
            last = events[-1]
            self.assertTrue(last.startswith("data: "), text)
            error = json.loads(last[len("data: "):])["error"]  # a whole JSON object
            self.assertIn("mid-stream", error["message"])
            self.assertEqual(gw.metric("kvgate_requests_total", status="502"), 1)
            self.assertEqual(gw.metric("kvgate_requests_total", status="200"), 0)
        finally:
            gw.close()
            engine.close()

    def test_admission_comes_before_reading_the_prompt(self):
        m = Mocker()
        gw = Gateway(config={"workers": [worker_config(m)], "limits": {"max_in_flight": 0}})
        try:
            # Not even valid JSON: over the limit, it is not parsed, let alone tokenized.
            status, text = gw.request("POST", "/v1/completions", b"{not json")
            self.assertEqual(status, 429, text)
        finally:
            gw.close()
            m.close()

    def test_api_keys_are_checked_before_the_body_and_the_scheme_is_case_insensitive(self):
        m = Mocker()
        gw = Gateway(config={"workers": [worker_config(m)], "api_keys": ["k1"]})
        try:
            status, _ = gw.post("/v1/completions", {"prompt": "hi", "max_tokens": 1},
                                headers={"Authorization": "bearer k1"})
            self.assertEqual(status, 200)
            status, r = gw.post("/v1/completions", {"prompt": "hi", "max_tokens": 1},
                                headers={"Authorization": "Bearer k2"})
            self.assertEqual(status, 401)
            self.assertEqual(r["error"]["type"], "authentication_error")
            # 30 MB announced, not one byte sent: the 401 comes anyway, right away.
            start = time.time()
            reply = raw_request(port_of(gw), b"POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
                                b"Content-Length: 30000000\r\n\r\n")
            self.assertTrue(reply.startswith(b"HTTP/1.1 401"), reply[:200])
            self.assertLess(time.time() - start, 2)
        finally:
            gw.close()
            m.close()

    def test_a_keys_file_without_keys_refuses_to_start(self):
        with tempfile.TemporaryDirectory() as tmp:
            keys = os.path.join(tmp, "keys")
            with open(keys, "w") as f:
                f.write("# keys go here\n\n")
            p = subprocess.run([KVGATE, "serve", "--port", "0", "--api-keys-file", keys],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("holds no API key", p.stderr)

    def test_a_worker_that_hangs_every_request_leaves_routing_despite_passing_health_checks(self):
        hang, ok = Mocker("--fault-hang-every", "1"), Mocker()
        gw = Gateway("--policy", "round_robin", config={
            "workers": [worker_config(hang), worker_config(ok)],
            "limits": {"non_streaming_timeout_ms": 400, "health_interval_ms": 100,
                       "unhealthy_after": 2}})
        try:
            for i in range(8):
                status, r = gw.post("/v1/completions", {"prompt": f"x {i}", "max_tokens": 1})
                self.assertEqual(status, 200, r)
            # Health checks pass every 100 ms; only its failed requests take it out.
            with open(os.path.join(gw.tmp, "stderr.log")) as f:
                log = f.read()
            self.assertIn(f"worker {gw.worker_id(hang)}", log)
            self.assertIn("is unhealthy after 2 failed requests", log)
        finally:
            gw.close()
            hang.close()
            ok.close()

    def test_a_client_that_leaves_a_non_streaming_request_stops_the_engine_work(self):
        m = Mocker(speedup="1")  # real-time steps: 2000 tokens take seconds
        gw = Gateway(config={"workers": [worker_config(m)]})
        try:
            body = json.dumps({"prompt": "long", "max_tokens": 2000}).encode()
            s = raw_request(port_of(gw), b"POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
                            b"Content-Type: application/json\r\nContent-Length: "
                            + str(len(body)).encode() + b"\r\n\r\n" + body, read=False)
            gw.wait_metric("kvgate_requests_in_flight", lambda v: v == 1)
            s.close()
            # The gateway lets go at once, and the engine stops generating.
            gw.wait_metric("kvgate_requests_in_flight", lambda v: v == 0, timeout=3)
            deadline = time.time() + 3
            while time.time() < deadline:
                with socket.create_connection(("127.0.0.1", m.port)) as c:
                    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    text = b""
                    while chunk := c.recv(65536):
                        text += chunk
                if b"kvgate_mocker_aborted_total 1" in text:
                    break
                time.sleep(0.05)
            self.assertIn(b"kvgate_mocker_aborted_total 1", text)
            self.assertEqual(gw.metric("kvgate_upstream_retries_total"), 0)  # nobody to answer
        finally:
            gw.close()
            m.close()

    def test_a_client_that_stops_reading_a_stream_does_not_make_the_gateway_buffer_it(self):
        m = Mocker(speedup="1000000")  # tokens as fast as the socket takes them
        # Resident memory must show what the gateway holds: under AddressSanitizer, freed
        # memory would otherwise sit in its quarantine (up to 256 MB) and count too.
        asan = os.environ.get("ASAN_OPTIONS")
        os.environ["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "quarantine_size_mb=1"
        try:
            gw = Gateway(config={"workers": [worker_config(m)],
                                 "limits": {"client_buffer_bytes": 1 << 20}})
        finally:
            if asan is None:
                del os.environ["ASAN_OPTIONS"]
            else:
                os.environ["ASAN_OPTIONS"] = asan
        try:
            before = rss_kb(gw.proc.pid)
            body = json.dumps({"prompt": "stream", "max_tokens": 150000, "stream": True}).encode()
            s = raw_request(port_of(gw), b"POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
                            b"Content-Type: application/json\r\nContent-Length: "
                            + str(len(body)).encode() + b"\r\n\r\n" + body, read=False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            time.sleep(4)  # the stream is ~30 MB; the client reads none of it
            grown_mb = (rss_kb(gw.proc.pid) - before) / 1024
            self.assertLess(grown_mb, 16, f"the gateway grew {grown_mb:.0f} MB")
            s.close()
            gw.wait_metric("kvgate_requests_in_flight", lambda v: v == 0, timeout=5)
        finally:
            gw.close()
            m.close()

    def test_overload_answers_carry_retry_after(self):
        m = Mocker()
        gw = Gateway(config={"workers": [worker_config(m)], "limits": {"max_in_flight": 0}})
        try:
            body = b'{"prompt": "hi"}'
            reply = raw_request(port_of(gw), b"POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
                                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                                + body)
            self.assertTrue(reply.startswith(b"HTTP/1.1 429"), reply[:200])
            self.assertIn(b"\r\nRetry-After: 1\r\n", reply)
        finally:
            gw.close()
            m.close()

    def test_running_out_of_descriptors_is_not_blamed_on_workers_and_does_not_spin(self):
        m = Mocker()
        limit = 64

        def low_fd_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        gw = Gateway(config={"workers": [worker_config(m)],
                             "limits": {"unhealthy_after": 1, "health_interval_ms": 200}},
                     preexec_fn=low_fd_limit)
        held = []
        try:
            status, _ = gw.post("/v1/completions", {"prompt": "warm", "max_tokens": 1})
            self.assertEqual(status, 200)
            for _ in range(limit + 20):  # more idle connections than it has descriptors
                held.append(socket.create_connection(("127.0.0.1", port_of(gw))))
            time.sleep(0.3)
            cpu = cpu_seconds(gw.proc.pid)
            time.sleep(1)
            self.assertLess(cpu_seconds(gw.proc.pid) - cpu, 0.5, "accept loop spins")
            for s in held:
                s.close()
            held.clear()
            time.sleep(0.5)
            # Its own shortage did not take the worker out of routing.
            self.assertEqual(gw.metric("kvgate_worker_healthy", worker=gw.worker_id(m)), 1)
            status, _ = gw.post("/v1/completions", {"prompt": "again", "max_tokens": 1})
            self.assertEqual(status, 200)
            # Nor was it flagged: a canary that met the shortage waited it out.
            gw.wait_metric("kvgate_worker_canary", lambda v: v == 1, worker=gw.worker_id(m),
                           result="ok")
        finally:
            for s in held:
                s.close()
            gw.close()
            m.close()

    def test_a_worker_that_joins_while_descriptors_are_out_is_subscribed_once_they_are_back(self):
        """Its KV-event stream is the gateway's first ZMQ socket (libzmq aborts a process
        that cannot start its I/O thread) and cannot be opened until descriptors free up."""
        m, eventless = Mocker(), Mocker()
        limit = 64
        prompt = list(range(100, 100 + 4 * 16 + 3))
        gw = Gateway("--block-size", "16", config={"workers": [{"url": eventless.url}]},
                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        held = []
        admin = http.client.HTTPConnection("127.0.0.1", port_of(gw), timeout=10)
        try:
            status, _ = m.post("/v1/completions", {"prompt": prompt, "max_tokens": 1})
            self.assertEqual(status, 200)  # the worker holds the prompt's blocks already
            admin.request("GET", "/health")  # accepted before descriptors run out
            admin.getresponse().read()
            for _ in range(limit + 20):
                held.append(socket.create_connection(("127.0.0.1", port_of(gw))))
            time.sleep(0.3)
            record = {"url": m.url, "engine": "vllm",
                      "kv_events": f"tcp://127.0.0.1:{m.events}",
                      "kv_replay": f"tcp://127.0.0.1:{m.replay}"}
            admin.request("POST", "/admin/workers", json.dumps(record),
                          {"Content-Type": "application/json"})
            reply = admin.getresponse()
            added = json.loads(reply.read())
            self.assertEqual(reply.status, 201, added)
            time.sleep(1)  # its subscription is tried, and waits
            for s in held:
                s.close()
            held.clear()
            deadline = time.time() + 10
            while (gw.metric("kvgate_worker_healthy", worker=added["id"]) < 1
                   and time.time() < deadline):
                time.sleep(0.1)
            status, r = gw.post("/v1/completions", {
                "prompt": prompt, "max_tokens": 1,
                "nvext": {"extra_fields": ["worker_id", "cached_blocks"]}})
            self.assertEqual(status, 200, r)
            # Routed once the replay of what it held was in: the prefix was predicted cached.
            self.assertEqual((r["nvext"]["worker_id"], r["nvext"]["cached_blocks"]),
                             (added["id"], 4))
        finally:
            admin.close()
            for s in held:
                s.close()
            gw.close()
            m.close()
            eventless.close()


if __name__ == "__main__":
    main()
