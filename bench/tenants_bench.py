#!/usr/bin/python3
"""Two tenants on a saturated mock fleet (docs/design.md §13): a light tenant alone, then
beside a heavy one sending ten times its rate, through gateways with the overload queue
(busy workers take nothing new; waiting requests take turns between tenants by tokens) and
without it (every request goes straight to an engine). Prints the light tenant's TTFT
p50/p90 in each run, the ratio to alone, and what the heavy tenant got through.

Usage: bench/tenants_bench.py [--kvgate build/kvgate] [--seconds 20] [--light-rps 2]"""
import argparse
import http.client
import json
import re
import statistics
import subprocess
import tempfile
import threading
import time


def start_gateway(kvgate, queue, args):
    limits = dict(json.loads(args.limits), queue_size=100000, queue_timeout_ms=120000) \
        if queue else {}
    config = {"mock_workers": {"count": args.workers, "speedup": args.speedup},
              "tenants": [{"name": "light", "api_keys": ["sk-light"]},
                          {"name": "heavy", "api_keys": ["sk-heavy"]}],
              "limits": limits}
    path = tempfile.mktemp(suffix=".json")
    with open(path, "w") as f:
        json.dump(config, f)
    proc = subprocess.Popen([kvgate, "serve", "--port", "0", "--config", path],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(re.search(r":(\d+) ", proc.stdout.readline()).group(1))
    time.sleep(1.5)  # the mock workers' canaries
    return proc, port


def one(port, key, prompt_tag, results, args):
    """A streaming completion; appends (ttft seconds, ok) to results."""
    body = json.dumps({"prompt": [prompt_tag] * args.prompt_tokens,
                       "max_tokens": args.max_tokens, "stream": True})
    began = time.time()
    ttft, ok = None, False
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json",
                                                     "Authorization": f"Bearer {key}"})
        r = c.getresponse()
        if r.status == 200:
            for line in r:
                if line.startswith(b"data: ") and ttft is None:
                    ttft = time.time() - began
            ok = ttft is not None
        c.close()
    except OSError:
        pass
    results.append((ttft, ok, time.time()))


def tenant(port, key, rps, seconds, results, tag0, args):
    threads, interval, t0 = [], 1.0 / rps, time.time()
    i = 0
    while time.time() - t0 < seconds:
        t = threading.Thread(target=one, args=(port, key, tag0 + i % 50000, results, args))
        t.start()
        threads.append(t)
        i += 1
        time.sleep(max(0.0, t0 + i * interval - time.time()))
    for t in threads:
        t.join()


def run(kvgate, queue, light_rps, heavy_rps, seconds, args):
    proc, port = start_gateway(kvgate, queue, args)
    began = time.time()
    light, heavy = [], []
    try:
        ts = [threading.Thread(target=tenant, args=(port, "sk-light", light_rps, seconds, light, 1000, args))]
        if heavy_rps:
            ts.append(threading.Thread(target=tenant,
                                       args=(port, "sk-heavy", heavy_rps, seconds, heavy, 100000, args)))
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if args.show_queue:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/metrics")
            for line in c.getresponse().read().decode().splitlines():
                if line.startswith(("kvgate_queue_wait_seconds_sum", "kvgate_queue_wait_seconds_count")):
                    print("  ", line)
    finally:
        proc.terminate()
        proc.wait(30)
    def p(xs, q):
        xs = sorted(x for x, ok, _ in xs if ok)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")
    return {"light_p50": p(light, 0.5), "light_p90": p(light, 0.9),
            "light_ok": sum(ok for _, ok, _ in light), "light_sent": len(light),
            "heavy_ok": sum(ok for _, ok, _ in heavy), "heavy_sent": len(heavy),
            # The heavy tenant's throughput: its requests served per second until its last
            # one ended (capacity left over by the light tenant).
            "heavy_rps": sum(ok for _, ok, _ in heavy) / (max(t for _, _, t in heavy) - began)
            if heavy else 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvgate", default="build/kvgate")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--light-rps", type=float, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--speedup", type=float, default=1,
                    help="mock engines' speed (below 1: slower, so a large fleet saturates "
                         "at a rate one client machine can send)")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--limits", default='{"worker_max_requests": 4}',
                    help="the gateway's limits: (JSON) in the runs with the queue")
    ap.add_argument("--show-queue", action="store_true", help="print the queue's wait sums")
    ap.add_argument("--only-queue", action="store_true", help="skip the runs without the queue")
    a = ap.parse_args()
    heavy = 10 * a.light_rps
    rows = [("alone, queue", run(a.kvgate, True, a.light_rps, 0, a.seconds, a)),
            ("with heavy, queue", run(a.kvgate, True, a.light_rps, heavy, a.seconds, a)),
            ]
    if not a.only_queue:
        rows += [("alone, no queue", run(a.kvgate, False, a.light_rps, 0, a.seconds, a)),
                 ("with heavy, no queue", run(a.kvgate, False, a.light_rps, heavy, a.seconds, a))]
    alone = {"queue": rows[0][1]["light_p90"],
             "no queue": rows[-2][1]["light_p90"]}
    print(f"light {a.light_rps} req/s, heavy {heavy} req/s, {a.seconds} s, {a.workers} mock workers (speedup {a.speedup}), "
          f"{a.prompt_tokens} prompt + {a.max_tokens} generated tokens, limits {a.limits}")
    print(f"{'run':24} {'light p50':>10} {'light p90':>10} {'vs alone':>9} {'light ok':>9} {'heavy ok':>9} {'heavy req/s':>11}")
    for name, r in rows:
        base = alone["queue" if "no queue" not in name else "no queue"]
        print(f"{name:24} {r['light_p50']*1000:9.0f}ms {r['light_p90']*1000:9.0f}ms "
              f"{r['light_p90']/base:8.2f}x {r['light_ok']:4}/{r['light_sent']:<4} "
              f"{r['heavy_ok']:4}/{r['heavy_sent']:<4} {r['heavy_rps']:11.1f}")


if __name__ == "__main__":
    main()
