"""Disaggregated prefill and decode (docs/design.md §12) with real processes: prefill and
decode mockers speaking vLLM's kv_transfer_params and SGLang's bootstrap protocol behind
one gateway, checked against an aggregated worker answering the same requests."""
import os
import sys
import threading
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import Mocker, formula_experts, free_port, main  # noqa: E402
from test_gateway import (EXPERTS, LAYERS, MOE, TOPK, Gateway, decode,  # noqa: E402
                          text_prompt, worker_config)

ENGINES = ["vllm", "sglang"]
ASKS = ["worker_id", "prefill_worker_id", "cached_blocks"]


class Fleet:
    """`prefills` prefill mockers and one decode mocker of `engine`, behind one gateway, and
    an aggregated mocker of the same engine behind another (the reference)."""

    def __init__(self, engine, prefills=1, limits=None):
        self.engine = engine
        self.prefill = []
        records = []
        for _ in range(prefills):
            port = free_port()
            m = Mocker("--engine", engine, "--role", "prefill", "--bootstrap-port", str(port), *MOE)
            self.prefill.append(m)
            records.append({**worker_config(m, engine), "role": "prefill", "bootstrap_port": port})
        self.decode = Mocker("--engine", engine, "--role", "decode", *MOE)
        records.append({**worker_config(self.decode, engine), "role": "decode"})
        model = {"moe_layers": LAYERS, "moe_top_k": TOPK}
        self.gw = Gateway(config={"workers": records, "model": model, "limits": limits or {}})
        self.whole = Mocker("--engine", engine, *MOE)
        self.reference = Gateway(config={"workers": [worker_config(self.whole, engine)],
                                         "model": model})

    def close(self):
        for g in (self.gw, self.reference):
            g.close()
        for m in self.prefill + [self.decode, self.whole]:
            m.close()


def text_of(result):
    if "chunks" in result:
        out = []
        for c in result["chunks"]:
            for ch in c["choices"]:
                out.append(ch.get("text") or (ch.get("delta") or {}).get("content") or "")
        return "".join(out)
    ch = result["response"]["choices"][0]
    return ch["text"] if "text" in ch else ch["message"]["content"]


def nvext_of(result):
    if "chunks" in result:
        return next(c["nvext"] for c in reversed(result["chunks"]) if "nvext" in c)
    return result["response"]["nvext"]


class DisaggregationTest(unittest.TestCase):
    def test_a_prefill_and_a_decode_worker_answer_as_one_aggregated_worker(self):
        for engine in ENGINES:
            with self.subTest(engine=engine):
                f = Fleet(engine)
                try:
                    ops = []
                    for i, (api, stream) in enumerate([("completions", False), ("completions", True),
                                                       ("chat", False), ("chat", True)]):
                        body = {"model": "kvgate-mock", "max_tokens": 6, "stream": stream,
                                "nvext": {"extra_fields": ASKS}}
                        if stream:
                            body["stream_options"] = {"include_usage": True}
                        if api == "chat":
                            body["messages"] = [{"role": "user", "content": text_prompt(f"c{i}", 1500)}]
                        else:
                            body["prompt"] = text_prompt(f"p{i}", 1500)
                        ops.append({"api": api, "body": body})
                    got, want = f.gw.openai(ops), f.reference.openai(ops)
                    for g, w in zip(got, want):
                        self.assertNotIn("error", g)
                        self.assertEqual(text_of(g), text_of(w))
                        n = nvext_of(g)
                        self.assertEqual(n["worker_id"], f.gw.worker_id(f.decode))
                        self.assertEqual(n["prefill_worker_id"], f.gw.worker_id(f.prefill[0]))
                    self.assertEqual(f.gw.metric("kvgate_pd_requests_total", path="disaggregated"), 4)

                    # Routed experts: rows for the whole sequence, value by value. The decode
                    # worker has none for the prompt it received: they come from the prefill
                    # worker's answer, stitched in front.
                    for i, (stream, start) in enumerate([(False, 0), (False, 7), (True, 0),
                                                         (True, 7)]):
                        if True:  # a fresh prompt each time: a held one skips the prefill phase
                            prompt = list(range(200 + 1000 * i, 200 + 1000 * i + 900))
                            _, gen = f.whole.post("/generate", {
                                "input_ids": prompt, "sampling_params": {"max_new_tokens": 5}})
                            body = {"prompt": prompt, "max_tokens": 5, "stream": stream,
                                    "nvext": {"extra_fields": ASKS + ["routed_experts"],
                                              "routed_experts_start": start}}
                            if stream:
                                chunks = f.gw.sse("/v1/completions", body)
                                n = next(c["nvext"] for c in reversed(chunks) if "nvext" in c)
                            else:
                                status, r = f.gw.post("/v1/completions", body)
                                self.assertEqual(status, 200, r)
                                n = r["nvext"]
                            self.assertEqual(n["prefill_worker_id"], f.gw.worker_id(f.prefill[0]))
                            np.testing.assert_array_equal(
                                decode(n["routed_experts"]),
                                formula_experts(prompt + gen["output_ids"], start, LAYERS, TOPK,
                                                EXPERTS))
                    self.assertEqual(f.gw.metric("kvgate_routed_experts_invalid_total"), 0)
                    # The decode worker alone returns only the rows it computed.
                    _, alone = f.decode.post("/v1/completions", {
                        "prompt": prompt, "max_tokens": 5, "return_routed_experts": True,
                        "kv_transfer_params": {"do_remote_prefill": True,
                                               "remote_block_ids": list(range(56))}})
                    if engine == "vllm":
                        self.assertIn("routed_experts", alone["choices"][0])
                finally:
                    f.close()

    def test_the_prefill_cache_serves_a_longer_prompt_and_a_held_one_skips_prefill(self):
        for engine in ENGINES:
            with self.subTest(engine=engine):
                f = Fleet(engine)
                try:
                    base = list(range(1000, 1000 + 1200))
                    status, r = f.gw.post("/v1/completions", {"prompt": base, "max_tokens": 2,
                                                              "nvext": {"extra_fields": ASKS}})
                    self.assertEqual((status, r["nvext"]["cached_blocks"]), (200, 0))
                    # What each worker now caches: the prefill worker every full block it
                    # computed, the decode worker the blocks it was sent ((len - 1) / 16).
                    held = len(base) // 16
                    sent = (len(base) - 1) // 16
                    f.gw.wait_metric("kvgate_index_size", lambda v: v >= held + sent, what="entries")
                    # Longer by more than pd.min_prefill_tokens: prefilled again, where the
                    # first part is cached; the prefill worker serves what was predicted.
                    before = f.prefill[0].metric("kvgate_mocker_prefix_cache_hit_tokens_total")
                    longer = base + list(range(5000, 5000 + 600))
                    status, r = f.gw.post("/v1/completions", {"prompt": longer, "max_tokens": 2,
                                                              "nvext": {"extra_fields": ASKS}})
                    self.assertEqual(status, 200, r)
                    self.assertEqual(r["nvext"]["prefill_worker_id"], f.gw.worker_id(f.prefill[0]))
                    self.assertEqual(r["nvext"]["cached_blocks"], held)
                    # (The worker's canary may repeat its 3-block prompt meanwhile: its hit
                    # counts too when it lands in this window, as under ASan's timing.)
                    hits = f.prefill[0].metric("kvgate_mocker_prefix_cache_hit_tokens_total") - before
                    self.assertIn(hits, (held * 16, held * 16 + 3 * 16))
                    # The decode worker now holds it all (its KV came over): no prefill phase.
                    f.gw.wait_metric("kvgate_index_size",
                                     lambda v: v >= 2 * ((len(longer) - 1) // 16), what="entries")
                    status, r = f.gw.post("/v1/completions", {"prompt": longer, "max_tokens": 2,
                                                              "nvext": {"extra_fields": ASKS}})
                    self.assertEqual((status, r["nvext"]["prefill_worker_id"]), (200, None))
                    self.assertEqual(f.gw.metric("kvgate_pd_requests_total", path="prefill_skipped"), 1)
                    self.assertEqual(f.gw.metric("kvgate_pd_requests_total", path="disaggregated"), 2)
                finally:
                    f.close()

    def test_dead_prefill_workers_cost_the_client_nothing(self):
        for engine in ENGINES:
            with self.subTest(engine=engine):
                # Slow health checks: the dead workers stay in routing, so requests meet them.
                f = Fleet(engine, prefills=2, limits={"health_interval_ms": 60000})
                try:
                    results, stop = [], threading.Event()

                    def client(tag):
                        i = 0
                        while not stop.is_set():
                            prompt = text_prompt(f"{tag}{i}", 1200)
                            _, want = f.reference.post("/v1/completions",
                                                       {"prompt": prompt, "max_tokens": 4})
                            status, r = f.gw.post("/v1/completions", {
                                "prompt": prompt, "max_tokens": 4,
                                "nvext": {"extra_fields": ASKS}})
                            results.append((status, r, want))
                            i += 1
                    threads = [threading.Thread(target=client, args=(t,)) for t in "ab"]
                    for t in threads:
                        t.start()
                    time.sleep(1)
                    for p in f.prefill:  # mid-run: both prefill workers die
                        p.kill()
                    time.sleep(1.5)
                    stop.set()
                    for t in threads:
                        t.join(30)
                    self.assertGreater(len(results), 4)
                    for status, r, want in results:
                        self.assertEqual(status, 200, r)
                        self.assertEqual(r["choices"][0]["text"], want["choices"][0]["text"])
                    # After they died, requests were served whole by the decode worker.
                    self.assertIsNone(results[-1][1]["nvext"]["prefill_worker_id"])
                    self.assertGreaterEqual(f.gw.metric("kvgate_pd_requests_total", path="fallback"), 1)
                    self.assertGreaterEqual(f.gw.metric("kvgate_pd_requests_total", path="disaggregated"), 1)
                    dead = [f.gw.worker_id(p) for p in f.prefill]
                    self.assertGreaterEqual(sum(f.gw.metric("kvgate_upstream_errors_total", worker=w)
                                                for w in dead), 2)
                finally:
                    f.close()

    def test_in_process_prefill_and_decode_workers(self):
        for engine in ENGINES:
            with self.subTest(engine=engine):
                gw = Gateway("--mock-workers", "1", "--mock-prefill-workers", "1",
                             "--mock-engine", engine, "--mock-speedup", "50")
                try:
                    status, r = gw.post("/v1/completions", {"prompt": list(range(10, 1010)),
                                                            "max_tokens": 3,
                                                            "nvext": {"extra_fields": ASKS}})
                    self.assertEqual(status, 200, r)
                    prefill, decode_ = gw.workers  # printed in this order, roles after
                    self.assertEqual(r["nvext"]["prefill_worker_id"], gw.worker_ids[prefill])
                    self.assertEqual(r["nvext"]["worker_id"], gw.worker_ids[decode_])
                    self.assertEqual(gw.metric("kvgate_pd_requests_total", path="disaggregated"), 1)
                finally:
                    gw.close()


if __name__ == "__main__":
    main()
