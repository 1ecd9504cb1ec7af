"""Tenants and their limits (docs/design.md §13), with real processes: a tenant over its
requests, tokens or concurrency gets 429 with a Retry-After that says when there is room,
while other tenants are served."""
import json
import os
import socket
import threading
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import Mocker, main  # noqa: E402
from test_gateway import Gateway, worker_config  # noqa: E402


def post(gw, key, body):
    """(status, parsed body, Retry-After header or None)."""
    req = urllib.request.Request(gw.url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read()), r.headers.get("Retry-After")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get("Retry-After")


class AdmissionTest(unittest.TestCase):
    def test_a_tenant_over_a_limit_waits_while_the_others_are_served(self):
        m = Mocker(speedup="1")
        gw = Gateway(config={
            "workers": [worker_config(m)],
            "api_keys": ["sk-plain"],
            "tenants": [
                {"name": "light", "api_keys": ["sk-light"], "limits": {"requests_per_min": 3}},
                {"name": "heavy", "api_keys": ["sk-heavy"], "limits": {"tokens_per_min": 1000}},
                {"name": "single", "api_keys": ["sk-single"], "limits": {"max_concurrent": 1}},
            ]})
        small = {"prompt": [7] * 20, "max_tokens": 2}
        try:
            # Requests per minute: 3, then 429 for about 20 s (one request's worth at 3/min).
            for _ in range(3):
                self.assertEqual(post(gw, "sk-light", small)[0], 200)
            status, body, retry = post(gw, "sk-light", small)
            self.assertEqual((status, body["error"]["type"]), (429, "rate_limit_exceeded"))
            self.assertIn(int(retry), (19, 20))
            self.assertIn("requests_per_min", body["error"]["message"])
            self.assertEqual(post(gw, "sk-plain", small)[0], 200)  # the others are served

            # Tokens per minute: 100 prompt + 400 max tokens each; the third waits for 500
            # tokens at 1000 a minute (the mocker generates all it may, so nothing is refunded).
            big = {"prompt": [9] * 100, "max_tokens": 400}
            began = time.time()
            for _ in range(2):
                self.assertEqual(post(gw, "sk-heavy", big)[0], 200)
            status, body, retry = post(gw, "sk-heavy", big)
            self.assertEqual(status, 429)
            # 500 tokens at 1000 a minute are 30 s, less what refilled since the first charge.
            self.assertLessEqual(int(retry), 30)
            self.assertGreaterEqual(int(retry), 30 - (time.time() - began) - 1)
            self.assertIn("tokens_per_min", body["error"]["message"])
            self.assertEqual(post(gw, "sk-light", small)[0], 429)  # (still waiting)
            self.assertEqual(post(gw, "sk-plain", small)[0], 200)

            # Concurrency: one at a time.
            stream = urllib.request.urlopen(urllib.request.Request(
                gw.url + "/v1/completions", data=json.dumps(
                    {"prompt": [5] * 20, "max_tokens": 3000, "stream": True}).encode(),
                headers={"Content-Type": "application/json",
                         "Authorization": "Bearer sk-single"}), timeout=30)
            stream.readline()
            status, body, retry = post(gw, "sk-single", small)
            self.assertEqual((status, retry), (429, "1"))
            self.assertIn("max_concurrent", body["error"]["message"])
            stream.close()
            gw.wait_metric("kvgate_tenant_in_flight", lambda v: v == 0, tenant="single")
            self.assertEqual(post(gw, "sk-single", small)[0], 200)

            # Unknown keys are not a tenant.
            self.assertEqual(post(gw, "sk-nobody", small)[0], 401)
            # Metrics by the configured names.
            for tenant, reason in [("light", "requests_per_min"), ("heavy", "tokens_per_min"),
                                   ("single", "max_concurrent")]:
                self.assertEqual(gw.metric("kvgate_tenant_rejected_total", tenant=tenant,
                                           reason=reason), 1 if tenant != "light" else 2)
            self.assertEqual(gw.metric("kvgate_tenant_admitted_total", tenant="default"), 2)
            self.assertEqual(gw.metric("kvgate_tenant_admitted_total", tenant="light"), 3)
        finally:
            gw.close()
            m.close()

    def test_with_every_worker_busy_requests_wait_in_priority_and_fair_order(self):
        m = Mocker(speedup="1")
        gw = Gateway(config={
            "workers": [worker_config(m)],
            "limits": {"worker_max_requests": 1, "queue_size": 4, "queue_timeout_ms": 3000},
            "tenants": [
                {"name": "a", "api_keys": ["sk-a"]},
                {"name": "b", "api_keys": ["sk-b"]},
                {"name": "vip", "api_keys": ["sk-vip"], "priority": 1},
            ]})

        def occupy(tokens):
            """A streaming request that keeps the only worker busy; returns it once running."""
            r = urllib.request.urlopen(urllib.request.Request(
                gw.url + "/v1/completions", data=json.dumps(
                    {"prompt": [5] * 20, "max_tokens": tokens, "stream": True}).encode(),
                headers={"Content-Type": "application/json", "Authorization": "Bearer sk-a"}),
                timeout=30)
            r.readline()
            return r

        try:
            # Each waiting request costs ~4,000 tokens, about one round-robin quantum.
            done, threads = [], []

            def send(key, tag):
                status = post(gw, key, {"prompt": [ord(tag[0])] * 4000, "max_tokens": 2})[0]
                done.append((tag, status))
            busy = occupy(200)  # ~1.2 s
            waiting = {"a": 0, "b": 0, "vip": 0}
            for key, tag in [("sk-a", "a1"), ("sk-a", "a2"), ("sk-b", "b1"), ("sk-vip", "vip")]:
                threads.append(threading.Thread(target=send, args=(key, tag)))
                threads[-1].start()
                # Arrival order: the next is sent once this one waits in the queue.
                tenant = key[3:]
                waiting[tenant] += 1
                gw.wait_metric("kvgate_queue_waiting", lambda v, n=waiting[tenant]: v == n,
                               tenant=tenant)
            status, body, retry = post(gw, "sk-b", {"prompt": [1] * 20, "max_tokens": 2})
            self.assertEqual((status, retry), (503, "1"))  # the queue holds 4
            self.assertIn("queue is full", body["error"]["message"])
            for t in threads:
                t.join(30)
            busy.close()
            # Priority first; then the tenants take turns, b's first (it had nothing waiting
            # when its request came, a had a1 already); within a tenant, arrival.
            self.assertEqual(done, [("vip", 200), ("b1", 200), ("a1", 200), ("a2", 200)])
            self.assertEqual(gw.metric("kvgate_queue_wait_seconds_count", tenant="a"), 2)
            self.assertEqual(gw.metric("kvgate_queue_waiting", tenant="a"), 0)

            # Waiting too long: 503 with Retry-After.
            busy = occupy(1500)
            began = time.time()
            status, body, retry = post(gw, "sk-b", {"prompt": [1] * 20, "max_tokens": 2})
            self.assertEqual((status, retry), (503, "1"))
            self.assertGreaterEqual(time.time() - began, 2.9)
            self.assertEqual(gw.metric("kvgate_queue_exits_total", tenant="b", reason="timeout"), 1)
            # A client that hangs up leaves the queue.
            sock = socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1])))
            body = json.dumps({"prompt": [1] * 20, "max_tokens": 2}).encode()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-b\r\n"
                         b"Content-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            time.sleep(0.3)
            sock.close()
            gw.wait_metric("kvgate_queue_exits_total", lambda v: v == 1, timeout=5, tenant="b",
                           reason="client_left")
            busy.close()
        finally:
            gw.close()
            m.close()

    def test_bad_tenant_configs_refuse_to_start(self):
        for tenants, why in [
            ([{"name": "a", "api_keys": []}], "no API key"),
            ([{"name": "a", "api_keys": ["k"]}, {"name": "a", "api_keys": ["j"]}], "name"),
            ([{"name": "a", "api_keys": ["k"]}, {"name": "b", "api_keys": ["k"]}], "another"),
            ([{"name": "a", "api_keys": ["k"], "limits": {"rpm": 3}}], "rpm"),
        ]:
            with self.assertRaises(AssertionError) as e:
                Gateway("--mock-workers", "1", config={"tenants": tenants})
            self.assertIn(why, str(e.exception))


if __name__ == "__main__":
    main()
