"""`kvgate hash` against Python's xxhash (python3-xxhash), computed from docs/design.md §4."""
import json
import os
import random
import struct
import sys
import unittest

import xxhash

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import main, run  # noqa: E402

M = (1 << 64) - 1


def seed(lora=None, salt=None):
    s = 1337
    if lora:
        s += xxhash.xxh3_64_intdigest(lora.encode(), seed=0)
    if salt:
        s += xxhash.xxh3_64_intdigest(salt.encode(), seed=1)
    return s & M


def reference(tokens, bs, lora=None, salt=None, eagle=False):
    sd = seed(lora, salt)
    width = bs + 1 if eagle else bs
    local = []
    i = 0
    while i + width <= len(tokens):
        local.append(xxhash.xxh3_64_intdigest(struct.pack("<%dI" % width, *tokens[i:i + width]),
                                              seed=sd))
        i += bs
    seq = []
    for i, h in enumerate(local):
        seq.append(h if i == 0 else
                   xxhash.xxh3_64_intdigest(struct.pack("<QQ", seq[-1], h), seed=1337))
    return {"local": local, "sequence": seq}


class HashTest(unittest.TestCase):
    def hash(self, tokens, *args):
        return json.loads(run(["hash", *args], json.dumps(tokens).encode())[1])

    def test_vectors(self):
        rng = random.Random(5)
        for bs in [1, 4, 16, 64]:
            for n in [0, bs - 1, bs, 3 * bs + 1, 10 * bs]:
                tokens = [rng.randrange(0, 2**32) for _ in range(n)]
                self.assertEqual(self.hash(tokens, "--block-size", str(bs)), reference(tokens, bs))

    def test_lora_and_salt_seeds(self):
        tokens = list(range(100))
        for lora, salt in [("adapter", None), (None, "tenant-1"), ("a", "b"), ("", "")]:
            args = ["--block-size", "16"]
            if lora is not None:
                args += ["--lora-name", lora]
            if salt is not None:
                args += ["--cache-salt", salt]
            self.assertEqual(self.hash(tokens, *args), reference(tokens, 16, lora, salt))

    def test_eagle_windows(self):
        tokens = list(range(1000, 1049))  # 3 full windows of 17 with stride 16
        self.assertEqual(self.hash(tokens, "--block-size", "16", "--eagle"),
                         reference(tokens, 16, eagle=True))

    def test_bad_input(self):
        for bad in [b"", b"{}", b"[1, -1]", b"[1.5]", b"[4294967296]", b'["a"]']:
            code, _, err = run(["hash", "--block-size", "4"], bad, check=False)
            self.assertEqual(code, 1, bad)
            self.assertTrue(err)


if __name__ == "__main__":
    main()
