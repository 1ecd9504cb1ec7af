"""`kvgate events decode` against payloads built with Python's msgpack in the exact shapes
vLLM and SGLang publish (msgspec array_like / tag=True). Expected output is derived here from
the same Python values, independently of kvgate's code."""
import os
import random
import sys

import msgpack

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import json_lines, main, run  # noqa: E402

import unittest  # noqa: E402

U64 = (1 << 64) - 1
MEDIUM_TIER = {None: "device", "GPU": "device", "DEVICE": "device", "CPU": "host",
               "CPU_PINNED": "host", "CPU_TIER1": "host", "CPU_TIER2": "disk", "DISK": "disk",
               "NVME": "disk", "EXTERNAL": "external", "NETWORK": "external",
               "REMOTE": "external", "SHARED": "external", "WEIRD": "device"}


def fold(t):
    return t if t <= 0xFFFFFFFF else 1_000_000 + (t & ((1 << 30) - 1))


def hash_value(h):
    if isinstance(h, bytes):
        return int.from_bytes(h[-8:], "big")
    return h & U64


def stored(hashes, parent, tokens, block_size, medium="GPU", lora_name=None, positional=False,
           spec_kind=None, extra_keys=None):
    fields = [hashes, parent, tokens, block_size, None, medium, lora_name, extra_keys, 0,
              spec_kind]
    if positional:
        return ["BlockStored", *fields]
    names = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
             "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"]
    return {"type": "BlockStored", **dict(zip(names, fields))}


def expect_stored(hashes, parent, tokens, block_size, medium="GPU", lora_name=None,
                  eagle=False):
    if eagle:
        tokens = [p[0] for p in tokens] + [tokens[-1][1]]
    return {"event": "stored", "block_hashes": [hash_value(h) for h in hashes],
            "parent_hash": None if parent is None else hash_value(parent),
            "token_ids": [fold(t) for t in tokens], "block_size": block_size,
            "medium": MEDIUM_TIER[medium], "lora_name": lora_name, "is_eagle": eagle}


def decode(batch):
    return json_lines(run(["events", "decode"], msgpack.packb(batch, use_bin_type=True))[1])


class DecodeTest(unittest.TestCase):
    def check(self, batch, ts, dp, expected_events):
        lines = decode(batch)
        self.assertEqual(lines[0], {"batch": {"ts": ts, "dp_rank": dp,
                                              "events": len(expected_events)}})
        self.assertEqual(lines[1:], expected_events)

    def test_vllm_map_form_int_hashes(self):
        rng = random.Random(1)
        hashes = [rng.randrange(-(1 << 63), 1 << 63) for _ in range(3)]
        tokens = [rng.randrange(0, 150_000) for _ in range(48)]
        self.check([1.25, [stored(hashes, -5, tokens, 16)], 0], 1.25, 0,
                   [expect_stored(hashes, -5, tokens, 16)])

    def test_vllm_positional_form_bytes_hashes_two_element_batch(self):
        rng = random.Random(2)
        hashes = [rng.randbytes(32) for _ in range(2)]
        parent = rng.randbytes(32)
        tokens = list(range(32))
        ev = stored(hashes, parent, tokens, 16, medium="CPU", positional=True)
        self.check([0.5, [ev]], 0.5, None, [expect_stored(hashes, parent, tokens, 16, "CPU")])

    def test_short_bytes_hash_is_left_padded(self):
        self.check([0, [["BlockRemoved", [b"\x01\x02"], "GPU"]]], 0, None,
                   [{"event": "removed", "block_hashes": [0x0102], "medium": "device"}])

    def test_batch_as_map_and_mixed_event_forms(self):
        tokens = [7] * 8
        batch = {"ts": 3.5, "events": [stored([1, 2], None, tokens, 4),
                                       ["BlockRemoved", [1], "DISK"],
                                       {"type": "AllBlocksCleared"},
                                       ["AllBlocksCleared"]],
                 "data_parallel_rank": 3, "unknown": [1, {"x": 2}]}
        self.check(batch, 3.5, 3, [expect_stored([1, 2], None, tokens, 4),
                                   {"event": "removed", "block_hashes": [1], "medium": "disk"},
                                   {"event": "cleared"}, {"event": "cleared"}])

    def test_events_ending_early_and_map_fields_omitted(self):
        # Older vLLM: only the first six positional fields; map form omits defaults.
        ev1 = ["BlockStored", [9], None, [1, 2], 2, None, "GPU"]
        ev2 = {"type": "BlockStored", "block_hashes": [10], "token_ids": [3, 4], "block_size": 2}
        ev3 = ["BlockRemoved", [9]]
        self.check([0, [ev1, ev2, ev3]], 0, None, [
            expect_stored([9], None, [1, 2], 2), expect_stored([10], None, [3, 4], 2),
            {"event": "removed", "block_hashes": [9], "medium": "device"}])

    def test_extra_trailing_fields_and_unknown_keys_are_ignored(self):
        ev = stored([1], None, [1, 2], 2, positional=True) + [None, "future", {"a": [1]}]
        evm = stored([2], 1, [3, 4], 2)
        evm["some_new_field"] = {"nested": [1, 2, 3]}
        self.check([0, [ev, evm], None, "extra batch field"], 0, None,
                   [expect_stored([1], None, [1, 2], 2), expect_stored([2], 1, [3, 4], 2)])

    def test_wide_ids_fold_only_above_u32(self):
        tokens = [0xFFFFFFFF, 0x100000000, (1 << 62) + 99, 5, (1 << 63) + 1, 2**64 - 1, 0, 1]
        self.check([0, [stored([1, 2], None, tokens, 4, positional=True)], 0], 0, 0,
                   [expect_stored([1, 2], None, tokens, 4)])
        # The folding is the one the design gives: 0xFFFFFFFF stays, 0x100000000 folds.
        lines = decode([0, [stored([1, 2], None, tokens, 4)], 0])
        self.assertEqual(lines[1]["token_ids"][:2], [0xFFFFFFFF, 1_000_000])

    def test_bigram_eagle_pairs(self):
        seq = [11, 12, 13, 14, 15]
        pairs = [[a, b] for a, b in zip(seq, seq[1:])]
        self.check([0, [stored([1], None, pairs, 4)]], 0, None,
                   [expect_stored([1], None, pairs, 4, eagle=True)])

    def test_media_and_lora(self):
        events, expected = [], []
        for i, medium in enumerate(MEDIUM_TIER):
            events.append(stored([i], None, [i, i], 2, medium=medium, lora_name="ad-%d" % i))
            expected.append(expect_stored([i], None, [i, i], 2, medium, "ad-%d" % i))
        self.check([0, events], 0, None, expected)

    def test_spec_kinds(self):
        keep = ["full_attention", "mla_attention", "sink_full_attention", None]
        drop = ["sliding_window", "mamba", "chunked_local"]
        events = [stored([1], None, [1], 1, spec_kind=k) for k in keep + drop]
        lines = decode([0, events])[1:]
        for i, k in enumerate(keep):
            self.assertEqual(lines[i]["event"], "stored")
        for j, k in enumerate(drop):
            line = lines[len(keep) + j]
            self.assertEqual(line["event"], "dropped")
            self.assertEqual(line["index"], len(keep) + j)
            self.assertIn(k, line["reason"])

    def test_invalid_events_are_isolated(self):
        good = stored([5], None, [1, 2], 2)
        bad = [
            ["BlockMoved", [1]],                                   # unknown tag
            stored([1], None, [1, -2], 2),                         # negative id
            stored([1], None, [1, 2.5], 2),                        # float id
            stored([1], None, [[1, 2], 3], 2),                     # pairs mixed with ints
            stored(["x"], None, [1, 2], 2),                        # hash of wrong type
            stored([1], None, [1, 2], "16"),                       # block_size wrong type
            ["BlockStored", [1], None],                            # truncated
            {"block_hashes": [1]},                                 # no type
            17,                                                    # not an event at all
            {"type": "BlockRemoved"},                              # removed without hashes
        ]
        events = []
        for b in bad:
            events += [good, b]
        lines = decode([0, events, None])[1:]
        self.assertEqual(len(lines), len(events))
        for i, line in enumerate(lines):
            if i % 2 == 0:
                self.assertEqual(line, expect_stored([5], None, [1, 2], 2))
            else:
                self.assertEqual(line["event"], "invalid", line)
                self.assertEqual(line["index"], i)
                self.assertTrue(line["error"])

    def test_vllm_salt_in_extra_keys_and_copy_counts(self):
        # vLLM: BlockStored.extra_keys is one tuple (or None) per block; a salted request's
        # first block has (lora_name?, mm ids..., cache_salt). BlockRemoved may carry
        # remaining_copy_counts, one per hash.
        tokens = list(range(32))
        salted = stored([1, 2], None, tokens, 16, lora_name="ad",
                        extra_keys=[("ad", "mm-hash", "salt-1"), None])
        lora_only = stored([3, 4], None, tokens, 16, lora_name="ad", extra_keys=[("ad",), None])
        child = stored([5], 2, tokens[:16], 16, extra_keys=[("not-a-root",)])
        removed = ["BlockRemoved", [1, 2], "GPU", 0, [1, 0]]
        bad = {"type": "BlockRemoved", "block_hashes": [1, 2], "medium": "GPU",
               "remaining_copy_counts": [1]}
        lines = decode([1.0, [salted, lora_only, child, removed, bad], 0])
        self.assertEqual(lines[1], {**expect_stored([1, 2], None, tokens, 16, lora_name="ad"),
                                    "cache_salt": "salt-1"})
        self.assertEqual(lines[2], expect_stored([3, 4], None, tokens, 16, lora_name="ad"))
        self.assertEqual(lines[3], expect_stored([5], 2, tokens[:16], 16))
        self.assertEqual(lines[4], {"event": "removed", "block_hashes": [1, 2],
                                    "medium": "device", "remaining_copy_counts": [1, 0]})
        self.assertEqual(lines[5]["event"], "invalid")
        self.assertIn("remaining_copy_counts", lines[5]["error"])

    def test_not_an_event_batch(self):
        for payload in [b"", b"\xc1", msgpack.packb(5), msgpack.packb([1]),
                        msgpack.packb([0, 5]), msgpack.packb({"ts": 1}),
                        msgpack.packb([0, []])[:-1], msgpack.packb([0, []]) + b"\x00"]:
            code, out, err = run(["events", "decode"], payload, check=False)
            self.assertNotEqual(code, 0, payload)
            self.assertEqual(out, "")
            self.assertIn("EventBatch", err)

    def test_shared_examples(self):
        examples = os.path.join(os.environ.get("KVGATE_SOURCE_DIR", "."), "../shared/examples/events")
        if not os.path.isdir(examples):
            self.skipTest("no ../shared/examples")
        import json
        for name in os.listdir(examples):
            if not name.endswith(".msgpack"):
                continue
            with open(os.path.join(examples, name), "rb") as f:
                got = json_lines(run(["events", "decode"], f.read())[1])
            with open(os.path.join(examples, name.replace(".msgpack", ".expected.jsonl"))) as f:
                want = [json.loads(line) for line in f if line.strip()]
            self.assertEqual(got, want, name)


if __name__ == "__main__":
    main()
