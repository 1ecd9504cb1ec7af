"""Reference chat-template rendering with Python Jinja2 (python3-jinja2), configured the way
transformers configures it, and given the variables docs/design.md §10 lists, the messages
normalized as vLLM hands them to the template (content format read from the template).
Usage: render_reference.py MODEL_DIR < requests.jsonl > prompts.jsonl"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes as jn
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def loops_over_content(env, source):
    """True when the template iterates a message's content (vLLM's "openai" format)."""
    ast = env.parse(source)

    aliases = {"messages"}  # names holding the message list (loop_messages = messages[1:])

    def is_messages(n):
        if isinstance(n, jn.Name):
            return n.name in aliases
        if isinstance(n, jn.Getitem) and isinstance(n.arg, jn.Slice):
            return is_messages(n.node)
        if isinstance(n, jn.Filter) and n.node is not None:
            return is_messages(n.node)
        return False

    while True:
        more = {a.target.name for a in ast.find_all(jn.Assign)
                if isinstance(a.target, jn.Name) and is_messages(a.node)} - aliases
        if not more:
            break
        aliases |= more
    message_vars = {f.target.name for f in ast.find_all(jn.For)
                    if isinstance(f.target, jn.Name) and is_messages(f.iter)}
    message_vars |= {a.target.name for a in ast.find_all(jn.Assign)
                     if isinstance(a.target, jn.Name) and isinstance(a.node, jn.Getitem)
                     and not isinstance(a.node.arg, jn.Slice) and is_messages(a.node.node)}

    def is_content(n):
        if isinstance(n, jn.Getattr) and n.attr == "content":
            base = n.node
        elif isinstance(n, jn.Getitem) and isinstance(n.arg, jn.Const) and n.arg.value == "content":
            base = n.node
        else:
            return False
        return isinstance(base, jn.Name) and base.name in message_vars

    content_vars = {a.target.name for a in ast.find_all(jn.Assign)
                    if isinstance(a.target, jn.Name) and is_content(a.node)}
    return any(is_content(f.iter) or (isinstance(f.iter, jn.Name) and f.iter.name in content_vars)
               for f in ast.find_all(jn.For))


MEDIA = {"image_url": "image", "input_image": "image", "image_pil": "image",
         "image_embeds": "image", "audio_url": "audio", "input_audio": "audio",
         "audio_embeds": "audio", "video_url": "video"}
TEXT_FIELD = {"text": "text", "input_text": "text", "output_text": "text",
              "refusal": "refusal", "thinking": "thinking"}


def vllm_messages(messages, as_parts):
    """The messages as vLLM passes them to the template."""
    out = []
    for m in messages:
        content = m.get("content")
        parts = []  # ("text", str) or ("media", modality)
        for p in ([] if content is None else [content] if isinstance(content, str) else content):
            if isinstance(p, str):
                parts.append(("text", p))
            elif p.get("type") is None:
                key = next(k for k in ("image_url", "audio_url", "video_url", "input_audio") if k in p)
                parts.append(("media", MEDIA[key]))
            elif p["type"] in TEXT_FIELD:
                text = p.get(TEXT_FIELD[p["type"]])
                if isinstance(text, str):
                    parts.append(("text", text))
            else:
                parts.append(("media", MEDIA[p["type"]]))
        text_only = all(kind == "text" for kind, _ in parts)
        if not as_parts or (m["role"] == "tool" and text_only):
            value = "\n".join(v for kind, v in parts if kind == "text")
        else:
            value = [{"type": "text", "text": v} if kind == "text" else {"type": v}
                     for kind, v in parts]
        msg = {"role": m["role"], "content": value}
        if m["role"] == "assistant":
            calls = m.get("tool_calls")
            if calls is not None:
                if isinstance(calls, list):
                    calls = json.loads(json.dumps(calls))
                    for c in calls:
                        fn = c.get("function") if isinstance(c, dict) else None
                        if not isinstance(fn, dict):
                            continue
                        args = fn.get("arguments")
                        if isinstance(args, str):
                            try:
                                fn["arguments"] = json.loads(args)
                            except ValueError:
                                fn["arguments"] = {}
                        elif not isinstance(args, (dict, list)):
                            fn["arguments"] = {}
                    if calls:
                        msg["tool_calls"] = calls
                else:
                    msg["tool_calls"] = calls
            if m.get("reasoning") is not None:
                msg["reasoning"] = m["reasoning"]
                msg["reasoning_content"] = m["reasoning"]
        elif m["role"] == "tool" and "tool_call_id" in m:
            msg["tool_call_id"] = m["tool_call_id"]
        for key in ("name", "task"):
            if isinstance(m.get(key), str):
                msg[key] = m[key]
        if m["role"] == "developer":
            msg["tools"] = m.get("tools")
        out.append(msg)
    return out


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
    return {name: (env.from_string(t), loops_over_content(env, t))
            for name, t in named.items()}, specials


def render(templates, specials, request):
    template, as_parts = templates["default"]
    if request.get("tools") is not None and "tool_use" in templates:
        template, as_parts = templates["tool_use"]
    messages = vllm_messages(request["messages"], as_parts)
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
