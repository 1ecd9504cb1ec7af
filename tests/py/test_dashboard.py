"""Looking inside the gateway (docs/design.md §15): POST /admin/route/explain against what
the router then really does, GET /admin/decisions, the admin-key rules, the dashboard page
driven in headless Chromium (Debian's, through npm puppeteer-core), and the Grafana
dashboard in docs/ checked against the metrics the gateway really exports."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from fleet_services import Nats  # noqa: E402
from kvgate_test import Mocker, main  # noqa: E402
from test_gateway import Gateway, worker_config  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CHECK = os.path.join(ROOT, "tests", "js", "dashboard_check.js")
GRAFANA = os.path.join(ROOT, "docs", "grafana", "kvgate.json")


def browse(gw, workers, *extra):
    """Runs the page check in Chromium; returns what it saw."""
    out = subprocess.run(["node", CHECK, gw.url, str(workers), *extra], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout.strip().splitlines()[-1])


class ExplainTest(unittest.TestCase):
    def test_explanation_names_the_worker_the_request_then_goes_to(self):
        mockers = [Mocker() for _ in range(3)]
        gw = Gateway(config={"workers": [worker_config(m) for m in mockers],
                             "limits": {"worker_max_requests": 1}})
        try:
            prompt = [9] * 100  # 6 full blocks
            status, d = gw.post("/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                                    "nvext": {"extra_fields": ["worker_id"]}})
            self.assertEqual(status, 200, d)
            holder = d["nvext"]["worker_id"]
            gw.wait_metric("kvgate_index_size", lambda v: v >= 6, what="blocks")
            sent = sum(m.metric("kvgate_mocker_requests_total") for m in mockers)
            status, e = gw.post("/admin/route/explain", {"prompt": prompt + [1] * 20,
                                                         "max_tokens": 1})
            self.assertEqual(status, 200, e)
            self.assertEqual(e["policy"], "kv")
            self.assertEqual((e["prompt_tokens"], e["blocks"]), (120, 7))
            self.assertEqual(e["chosen"], holder)
            by_worker = {c["worker"]: c for c in e["candidates"]}
            self.assertEqual(set(by_worker), set(gw.worker_ids.values()))
            self.assertEqual(by_worker[holder]["overlap"]["device"], 6)
            self.assertTrue(by_worker[holder]["chosen"])
            self.assertEqual(min(by_worker.values(), key=lambda c: c["cost"])["worker"], holder)
            for c in by_worker.values():
                self.assertEqual(set(c["load"]), {"requests", "prefill_tokens", "decode_blocks"})
            # Explaining sent nothing and counted no load.
            self.assertEqual(sum(m.metric("kvgate_mocker_requests_total") for m in mockers), sent)
            self.assertEqual(sum(c["load"]["requests"] for c in e["candidates"]), 0)
            # The same body for real goes where the explanation said.
            status, d = gw.post("/v1/completions", {"prompt": prompt + [1] * 20, "max_tokens": 1,
                                                    "nvext": {"extra_fields": ["worker_id"]}})
            self.assertEqual(d["nvext"]["worker_id"], holder)
            # A chat body is explained too; the decisions log has both requests, newest first.
            status, e = gw.post("/admin/route/explain",
                                {"messages": [{"role": "user", "content": "hi"}]})
            self.assertEqual(status, 200, e)
            status, text = gw.request("GET", "/admin/decisions")
            decisions = json.loads(text)["decisions"]
            self.assertEqual([x["worker"] for x in decisions], [holder, holder])
            self.assertEqual(decisions[0]["overlap"]["device"], 6)
            self.assertEqual(decisions[1]["cached_blocks"], 0)
            self.assertGreater(int(decisions[0]["request_id"]), int(decisions[1]["request_id"]))
            # A busy worker is listed as busy, without a cost.
            r = gw.open_stream({"prompt": prompt, "max_tokens": 3000, "ignore_eos": True})
            r.readline()
            status, e = gw.post("/admin/route/explain", {"prompt": prompt, "max_tokens": 1})
            busy = [c for c in e["candidates"] if c["busy"]]
            self.assertEqual([(c["worker"], c["cost"]) for c in busy], [(holder, None)])
            # The streaming request's blocks count as cached where it went, before any event.
            self.assertEqual({c["worker"]: c["in_flight_blocks"] for c in e["candidates"]},
                             {w: 6 if w == holder else 0 for w in gw.worker_ids.values()})
            self.assertNotEqual(e["chosen"], holder)
            r.close()
            # Bad bodies get OpenAI-shaped 400s.
            for body in [b"not json", b"[1]", json.dumps({"prompt": 5}).encode()]:
                status, text = gw.request("POST", "/admin/route/explain", body)
                self.assertEqual(status, 400, text)
                self.assertEqual(json.loads(text)["error"]["type"], "invalid_request_error")
            # Workers list blocks per tier.
            status, text = gw.request("GET", "/admin/workers")
            blocks = {w["id"]: w["blocks"] for w in json.loads(text)["workers"]}
            self.assertGreaterEqual(blocks[holder]["device"], 7)  # the prompts' blocks
            self.assertEqual(blocks[holder]["host"], 0)
        finally:
            gw.close()
            for m in mockers:
                m.close()

    def test_admin_views_need_the_admin_key_when_there_is_one(self):
        gw = Gateway("--mock-workers", "1", config={"api_keys": ["sk-user"],
                                                    "admin_api_keys": ["sk-admin"]})
        try:
            body = {"prompt": "hello", "max_tokens": 1}
            for path, method in [("/admin/route/explain", "POST"), ("/admin/decisions", "GET")]:
                for headers, want in [(None, 401), ({"Authorization": "Bearer sk-user"}, 401),
                                      ({"Authorization": "Bearer sk-admin"}, 200)]:
                    status, text = gw.request(method, path, body if method == "POST" else None,
                                              headers)
                    self.assertEqual(status, want, (path, headers, text))
            status, text = gw.request("GET", "/dashboard")  # the page itself holds no data
            self.assertEqual(status, 200)
            self.assertIn("data-worker-id", text.replace("dataset.workerId", "data-worker-id"))
        finally:
            gw.close()


class DashboardTest(unittest.TestCase):
    def test_page_in_chromium_shows_workers_decisions_and_explanations(self):
        gw = Gateway("--mock-workers", "4")
        shot = os.environ.get("KVGATE_DASHBOARD_SCREENSHOT") or \
            os.path.join(gw.tmp, "dashboard.png")
        try:
            seen = browse(gw, 4, shot, "--load")
            self.assertEqual(seen["console_errors"], [])
            self.assertEqual(seen["page_errors"], [])
            self.assertEqual(seen["foreign_requests"], [])  # self-contained
            self.assertEqual(sorted(seen["worker_ids"]), sorted(gw.worker_ids.values()))
            self.assertEqual(seen["filtered_rows"], 1)
            self.assertGreaterEqual(len(seen["decision_ids"]), 6)
            self.assertEqual(len(set(seen["decision_ids"])), len(seen["decision_ids"]))
            self.assertGreater(float(seen["hit_rate_text"].rstrip("%")), 0)
            self.assertTrue(any(h.endswith("%") for h in seen["worker_hit_rates"]))
            self.assertEqual(seen["explain_rows"], 4)
            self.assertEqual(seen["explained"], seen["sent_to"])
            self.assertTrue(os.path.getsize(shot) > 10000)
        finally:
            gw.close()

    def test_page_stays_usable_with_500_workers(self):
        # 500 workers nobody serves: the table still lists every one and filters them.
        workers = [{"url": f"http://127.0.0.1:{p}", "engine": "vllm",
                    "kv_events": f"ipc:///tmp/kvgate-nowhere-{p}"}
                   for p in range(20000, 20500)]
        gw = Gateway(config={"workers": workers})
        try:
            seen = browse(gw, 500)
            self.assertEqual(seen["console_errors"], [])
            self.assertEqual(len(seen["worker_ids"]), 500)
            self.assertEqual(seen["filtered_rows"], 1)
            print(f"\n500 workers: table filled {seen['rows_ms']} ms after the page was asked "
                  "for", file=sys.stderr)
        finally:
            gw.close()


class GrafanaTest(unittest.TestCase):
    def test_every_expression_parses_and_uses_metrics_and_labels_the_gateway_exports(self):
        with open(GRAFANA) as f:
            dash = json.load(f)
        exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
        self.assertGreaterEqual(len(exprs), 15)
        # Valid PromQL: promtool checks them as recording rules ($__rate_interval is Grafana's).
        rules = {"groups": [{"name": "grafana", "rules": [
            {"record": f"kvgate:check_{i}", "expr": e.replace("$__rate_interval", "1m")}
            for i, e in enumerate(exprs)]}]}
        path = os.path.join(tempfile.mkdtemp(), "rules.yml")
        with open(path, "w") as f:
            json.dump(rules, f)  # YAML is a superset of JSON
        out = subprocess.run([shutil.which("promtool"), "check", "rules", path],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        # Every metric named exists, with the labels the expression uses.
        nats = Nats()  # (the replica metrics show with fleet mode on)
        gw = Gateway("--mock-workers", "2", "--nats", nats.url)
        try:
            for i in range(3):
                gw.post("/v1/completions", {"prompt": "grafana " * 40, "max_tokens": 2})
            gw.wait_metric("kvgate_worker_canary", lambda v: v == 2, result="ok")
            status, text = gw.request("GET", "/metrics")
        finally:
            gw.close()
            nats.close()
        families, labels = set(), {}
        for line in text.splitlines():
            m = re.match(r"# TYPE (\w+) (\w+)", line)
            if m:
                families.add(m.group(1))
                if m.group(2) == "histogram":
                    families |= {m.group(1) + s for s in ("_bucket", "_sum", "_count")}
                continue
            m = re.match(r"(\w+)\{([^}]*)\}", line)
            if m:
                labels.setdefault(m.group(1), set()).update(
                    re.findall(r'(\w+)="', m.group(2)))
        for e in exprs:
            names = re.findall(r"\bkvgate_\w+", e)
            for name in names:
                self.assertIn(name, families, e)
                for sel in re.findall(name + r"\{([^}]*)\}", e):
                    used = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", sel))
                    self.assertLessEqual(used, labels.get(name, set()), e)
            # Grouping labels: some metric of the expression has each (families with no
            # series yet show no labels: skip those expressions).
            if all(n in labels for n in names):
                have = set().union(*(labels[n] for n in names)) | {"le"}
                for grouping in re.findall(r"by \(([^)]*)\)", e):
                    self.assertLessEqual({g.strip() for g in grouping.split(",")}, have, e)


if __name__ == "__main__":
    main()
