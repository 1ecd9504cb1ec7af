"""`kvgate replay` end to end: the report's JSON contract (docs/design.md §10), determinism for
a seed, the plots, and errors."""
import json
import os
import re
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import main, run  # noqa: E402

POLICIES = ["kv", "round_robin", "random", "least_loaded", "approx"]


def strip_wall(report):
    for p in report["policies"]:
        p.pop("wall_seconds")
    return report


class ReplayTest(unittest.TestCase):
    def replay(self, *args):
        return self.replay_args("--requests", "600", "--workers", "3", "--num-blocks", "2048",
                                "--seed", "7", *args)

    def replay_args(self, *args):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            run(["replay", "--out", out, *args], timeout=300)
            with open(out) as f:
                return json.load(f)

    def test_report_contract_and_determinism(self):
        a = self.replay()
        self.assertEqual(a["trace"]["path"], "synthetic")
        self.assertGreater(a["trace"]["requests"], 0)
        self.assertTrue(0 < a["trace"]["bound_reuse"] <= a["trace"]["ideal_reuse"] < 1)
        self.assertEqual([p["policy"] for p in a["policies"]], POLICIES)
        for p in a["policies"]:
            self.assertEqual(p["requests"], a["trace"]["requests"])
            self.assertTrue(0 <= p["reuse"] <= a["trace"]["bound_reuse"] + 1e-9)
            for key in ["ttft_ms", "itl_ms", "e2e_ms"]:
                q = p[key]
                self.assertTrue(0 <= q["p50"] <= q["p90"] <= q["p99"], (key, q))
            self.assertGreater(p["throughput_rps"], 0)
        self.assertEqual(strip_wall(a), strip_wall(self.replay()))
        # The kv policy's weights are in the report, as given.
        self.assertEqual(a["kv_policy"]["reuse_weight"], 8)
        b = self.replay("--policy", "kv", "--reuse-weight", "3", "--decode-weight", "0.5")
        self.assertEqual((b["kv_policy"]["reuse_weight"], b["kv_policy"]["decode_weight"]), (3, 0.5))

    def test_reuse_never_beats_one_pooled_cache_under_overload(self):
        # Every prompt is unique, so no request can be served from cache (bound_reuse 0), and
        # the engines are too small for the load: sequences are preempted mid-prefill and
        # readmitted. Their own recomputed blocks must not count as cache hits (vLLM counts
        # cached tokens once, at first scheduling).
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "t.jsonl")
            with open(trace, "w") as f:
                for i in range(48):
                    f.write(json.dumps({"timestamp": i * 10, "input_length": 6000, "output_length": 32,
                                        "hash_ids": list(range(i * 100, i * 100 + 12))}) + "\n")
            out = os.path.join(d, "r.json")
            run(["replay", "--trace", trace, "--workers", "2", "--num-blocks", "600", "--out", out],
                timeout=300)
            with open(out) as f:
                report = json.load(f)
        self.assertEqual(report["trace"]["bound_reuse"], 0)
        for p in report["policies"]:
            self.assertEqual(p["requests"], 48)
            self.assertEqual(p["reuse"], 0, p["policy"])

    def test_policy_subset_and_plots(self):
        with tempfile.TemporaryDirectory() as d:
            code, out, _ = run(["replay", "--requests", "300", "--workers", "2", "--policy",
                                "kv,approx", "--plot", d, "--seed", "1"], timeout=300)
            self.assertIn("kv", out)
            self.assertIn("approx", out)
            for name in ["ttft_cdf.svg", "reuse.svg"]:
                root = ET.parse(os.path.join(d, name)).getroot()
                self.assertTrue(root.tag.endswith("svg"))
            # One page gathers them: a row per policy with the JSON report's figures.
            with open(os.path.join(d, "index.html")) as f:
                page = f.read()
            rows = re.findall(r"<tr><td>(\w+)</td><td>(\d+)</td>", page)
            self.assertEqual([r[0] for r in rows], ["kv", "approx"])
            self.assertEqual({int(r[1]) for r in rows}, {300})
            self.assertIn("<img src='ttft_cdf.svg'", page)
            self.assertIn("<img src='reuse.svg'", page)

    def test_capacity_is_the_fastest_speed_that_meets_the_slo(self):
        slo = 400
        fleet = ["--requests", "400", "--workers", "2", "--num-blocks", "2048", "--seed", "3"]
        a = self.replay_args(*fleet, "--policy", "kv,round_robin", "--capacity",
                             "--slo-ttft-p90-ms", str(slo))
        self.assertEqual(a["capacity"], {"slo_ttft_p90_ms": slo})
        for p in a["policies"]:
            lo, hi = p["capacity_speed"], p["capacity_exceeded_at"]
            self.assertTrue(0 < lo < hi <= lo * 1.02 + 1e-9, p)
            # The row is the run at capacity: within the SLO.
            self.assertLessEqual(p["ttft_ms"]["p90"], slo)
            self.assertEqual(p["requests"], a["trace"]["requests"])
            self.assertGreater(p["reuse_at_half_capacity"], 0)
            # Replayed on their own, the two ends of the bracket fall either side of the SLO,
            # and the run at capacity is the one reported.
            at = self.replay_args(*fleet, "--policy", p["policy"], "--speed", repr(lo))
            above = self.replay_args(*fleet, "--policy", p["policy"], "--speed", repr(hi))
            self.assertEqual(at["policies"][0]["ttft_ms"], p["ttft_ms"])
            self.assertGreater(above["policies"][0]["ttft_ms"]["p90"], slo)
            half = self.replay_args(*fleet, "--policy", p["policy"], "--speed", repr(lo / 2))
            self.assertEqual(half["policies"][0]["reuse"], p["reuse_at_half_capacity"])
        code, _, err = run(["replay", "--capacity", "--url", "http://127.0.0.1:1"], check=False)
        self.assertEqual(code, 2)
        self.assertIn("offline", err)

    def test_mooncake_trace_and_errors(self):
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "t.jsonl")
            with open(trace, "w") as f:
                f.write('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n')
                f.write('{"timestamp": 50, "input_length": 700, "output_length": 3, "hash_ids": [1, 2]}\n')
            out = os.path.join(d, "r.json")
            run(["replay", "--trace", trace, "--workers", "1", "--policy", "kv", "--out", out])
            with open(out) as f:
                report = json.load(f)
            # By hand: request 2 reuses 512 + 64 of the first prompt's 600 tokens in blocks
            # of 16: min(600 // 16 * 16 = 592, (700 - 1) // 16 * 16 = 688) = 592 tokens.
            self.assertAlmostEqual(report["trace"]["ideal_reuse"], 592 / 1300)
            self.assertAlmostEqual(report["policies"][0]["reuse"], 592 / 1300)
            code, _, err = run(["replay", "--trace", trace, "--url", "http://127.0.0.1:1"],
                               check=False)
            self.assertEqual(code, 1)
            self.assertIn("no request succeeded", err)
            with open(trace, "a") as f:
                f.write("not json\n")
            code, _, err = run(["replay", "--trace", trace], check=False)
            self.assertEqual(code, 1)
            self.assertIn(":3:", err)
        code, _, err = run(["replay", "--policy", "kv,best"], check=False)
        self.assertEqual(code, 2)
        self.assertIn("best", err)

    def test_live_against_the_gateway_reaches_ideal_reuse(self):
        """Requests spaced out in time, so each finds its prefix's events already indexed:
        the gateway's kv routing then serves exactly what one infinite cache would."""
        from test_gateway import Gateway
        requests = [([1, 2, 3], 96), ([1, 2, 4], 90), ([5, 6], 64), ([1, 2, 3, 7], 128),
                    ([5, 6, 8], 96), ([9], 32)]
        gw = Gateway("--mock-workers", "2", "--mock-speedup", "20")
        try:
            with tempfile.TemporaryDirectory() as d:
                trace = os.path.join(d, "t.jsonl")
                with open(trace, "w") as f:
                    for i, (ids, n) in enumerate(requests):
                        f.write(json.dumps({"timestamp": 300 * i, "input_length": n,
                                            "output_length": 4, "hash_ids": ids}) + "\n")
                out = os.path.join(d, "r.json")
                run(["replay", "--url", gw.url, "--trace", trace, "--trace-block-size", "32",
                     "--out", out], timeout=60)
                with open(out) as f:
                    report = json.load(f)
        finally:
            gw.close()
        (live,) = report["policies"]
        self.assertEqual(live["policy"], "live")
        self.assertEqual(live["requests"], len(requests))
        self.assertGreater(report["trace"]["ideal_reuse"], 0.3)
        self.assertAlmostEqual(live["reuse"], report["trace"]["ideal_reuse"])
        self.assertGreater(live["ttft_ms"]["p50"], 0)
        self.assertGreater(live["e2e_ms"]["p50"], live["ttft_ms"]["p50"])


if __name__ == "__main__":
    main()
