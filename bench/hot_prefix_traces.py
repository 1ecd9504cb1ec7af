#!/usr/bin/python3
"""Writes two Mooncake-style traces where a few prefixes are very hot, to check that a
routing policy spreads a hot prefix instead of herding onto its first holder:

  one.jsonl   every request starts with the same 30 blocks (15K tokens), then 4-10 of its own
  zipf.jsonl  50 such prefixes, picked with Zipf(1.2) popularity

4,000 requests each, Poisson arrivals 250 ms apart on average, 20-300 output tokens; the
same seed gives the same files. Usage: bench/hot_prefix_traces.py OUT_DIR
"""
import json
import os
import random
import sys

SHARED_BLOCKS = 30  # trace blocks of 512 tokens
REQUESTS = 4000


def write_trace(path, prefixes, zipf_exponent, rng):
    popularity = [1 / (rank + 1) ** zipf_exponent for rank in range(prefixes)]
    next_private = 10**6  # hash ids of blocks no other request shares
    t = 0.0
    with open(path, "w") as out:
        for _ in range(REQUESTS):
            t += rng.expovariate(1 / 250.0)
            prefix = rng.choices(range(prefixes), popularity)[0]
            ids = [prefix * 1000 + j for j in range(SHARED_BLOCKS)]
            own = rng.randint(4, 10)
            ids += range(next_private, next_private + own)
            next_private += own
            out.write(json.dumps({"timestamp": int(t),
                                  "input_length": len(ids) * 512 - rng.randint(0, 400),
                                  "output_length": rng.randint(20, 300),
                                  "hash_ids": list(ids)}) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    write_trace(os.path.join(sys.argv[1], "one.jsonl"), 1, 0, random.Random(1))
    write_trace(os.path.join(sys.argv[1], "zipf.jsonl"), 50, 1.2, random.Random(2))


if __name__ == "__main__":
    main()
