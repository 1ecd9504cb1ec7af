"""Render time of Python Jinja2 (transformers' configuration) for one chat request.
Usage: render_bench_reference.py MODEL_DIR REQUEST_JSON -> prints microseconds per render."""
import json
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
from render_reference import load, render  # noqa: E402

template, specials = load(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    request = json.load(f)
for _ in range(50):
    render(template, specials, json.loads(json.dumps(request)))
n = 1000
start = time.perf_counter()
for _ in range(n):
    render(template, specials, request)
print(f"{(time.perf_counter() - start) / n * 1e6:.2f}")
