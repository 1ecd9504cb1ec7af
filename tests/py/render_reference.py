"""Reference chat-template rendering with Python Jinja2 (python3-jinja2), configured the way
transformers configures it, and given the variables docs/design.md §10 lists.
Usage: render_reference.py MODEL_DIR < requests.jsonl > prompts.jsonl"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def load(model_dir):
    config = {}
    if os.path.exists(os.path.join(model_dir, "tokenizer_config.json")):
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    template = config.get("chat_template")
    if template is None:
        with open(os.path.join(model_dir, "chat_template.jinja"), encoding="utf-8") as f:
            template = f.read()
    # Named templates: as transformers picks them, "tool_use" when the request has tools,
    # else "default".
    named = ({t["name"]: t["template"] for t in template} if isinstance(template, list)
             else {"default": template})
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def token(key):
        v = config.get(key)
        return v.get("content") if isinstance(v, dict) else v

    specials = {k: token(k) for k in ["bos_token", "eos_token", "unk_token", "pad_token"]}
    return {name: env.from_string(t) for name, t in named.items()}, specials


def render(templates, specials, request):
    template = templates["default"]
    if request.get("tools") is not None and "tool_use" in templates:
        template = templates["tool_use"]
    messages = request["messages"]
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    pass
    variables = dict(messages=messages, tools=request.get("tools"), documents=None,
                     add_generation_prompt=request.get("add_generation_prompt", True), **specials)
    variables.update(request.get("chat_template_kwargs") or {})
    return template.render(**variables)


def main():
    template, specials = load(sys.argv[1])
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = render(template, specials, json.loads(line))
        except Exception as e:  # the error text is what must match
            out = {"error": str(e)}
        sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
