"""The template engine feature by feature against Python Jinja2: each case is a small
template (as chat_template.jinja) rendered with variables passed as chat_template_kwargs."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from kvgate_test import main, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
V = {"xs": [3, 1, 2], "s": "  Hello, World  ", "d": {"b": 2, "a": 1}, "n": None, "t": True,
     "users": [{"name": "ann", "age": 31, "admin": True}, {"name": "bob", "age": 25}],
     "u": "naïve 東京 ✓", "f": 2.5, "neg": -7, "nested": {"k": [1, {"z": "deep"}]}}

CASES = [
    "{{ xs }}|{{ d }}|{{ n }}|{{ t }}|{{ f }}|{{ s }}|{{ undefined_name }}|",
    "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}:{{ x }} {% endfor %}",
    "{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for x in xs %}{% set outer = loop %}{% for y in [1, 2] %}{{ outer.index }}{{ loop.index }}{{ loop.previtem }}{{ loop.last }} {% endfor %}{% endfor %}",
    "{% for x in xs %}{{ loop.nope is defined }}{{ loop.depth }}{{ loop.revindex0 }}{% endfor %}[{{ loop }}]",
    "{% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% set a = 1 %}{% for x in xs %}{% set a = a + x %}{% endfor %}{{ a }}",
    "{% set ns = namespace(total=0, names='') %}{% for x in xs %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }}",
    "{% set block %}inside {{ xs|length }}{% endset %}[{{ block }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('ann') }} {{ greet('bob', punct='?') }}",
    "{% macro box() %}<{{ caller() }}>{% endmacro %}{% call box() %}content{% endcall %}",
    # Scoping is lexical: a macro sees the top level as it is when called, not its caller's
    # loop variables or loop-scoped sets; a caller body sees its call site.
    "{% macro m() %}[{{ x }}|{{ y }}|{{ item }}]{% endmacro %}{% set x = 1 %}{{ m() }}{% for item in xs %}{% set y = 2 %}{{ m() }}{% endfor %}{% set x = 3 %}{{ m() }}",
    "{% set x = 1 %}{% macro m() %}[{{ x }}]{% endmacro %}{% set x = 3 %}{{ m() }}{% for i in xs %}{% set x = 7 %}{{ m() }}{% endfor %}",
    "{% macro box(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% for x in xs %}{% set label = 'n' ~ x %}{% call box('b') %}{{ x }}{{ label }}{{ tag }}{% endcall %}{% endfor %}",
    "{% macro countdown(n) %}{{ n }}{% if n > 0 %},{{ countdown(n - 1) }}{% endif %}{% endmacro %}{{ countdown(3) }}",
    # Runaway recursion and values nested past Python's recursion limit fail with Python's
    # messages (and a macro may still nest 150 deep; Jinja2 in its sandbox stops near 195).
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% macro f(n) %}{% if n < 150 %}{{ f(n + 1) }}{% else %}{{ n }}{% endif %}{% endmacro %}{{ f(0) }}",
    "{% set ns = namespace(x=[]) %}{% for i in range(1200) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
    "{% set ns = namespace(x=[]) %}{% for i in range(1200) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
    "{% filter upper %}shout {{ s|trim }}{% endfilter %}",
    "{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join(',') }}",
    "{{ xs|first }} {{ xs|last }} {{ xs|length }} {{ xs|sum }} {{ xs|min }} {{ xs|max }} {{ xs|reverse|list }}",
    "{{ s|trim }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ s|replace('l', 'L') }}",
    "{{ d|tojson }} {{ xs|tojson }} {{ nested|tojson }} {{ u|tojson }} {{ n|tojson }} {{ 'a\"b\\\\c\\n'|tojson }}",
    "{{ nested|tojson(indent=2) }}",
    "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }}",
    "{{ d|dictsort }} {{ d|items|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('zz', 'no') }}",
    "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|list|length }}",
    "{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ [1, 2, 2, 3, 1]|unique|list }}",
    "{{ missing|default('dflt') }} {{ ''|default('e', true) }} {{ n|default('x') }}",
    "{{ '42'|int + 1 }} {{ '2.5'|float }} {{ neg|abs }} {{ 3.14159|round(2) }} {{ 7|string ~ '!' }}",
    "{{ 'one two  three'|wordcount }} {{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'x\\ny'|indent(3, true) }}",
    "{{ xs|batch(2)|list }} {{ 'ab'|center(6) }}| {{ '<a&b>'|e }}",
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.rsplit('-', 1) }}",
    "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ 'HeLLo'.upper() }} {{ 'HeLLo'.lower() }} {{ '{} and {}'.format(1, 'b') }}",
    "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ xs[:2] }} {{ 'hello'[1:4] }} {{ u[0:5] }} {{ d['a'] }} {{ nested.k[1].z }}",
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 ~ 2 ~ 'x' }}",
    "{{ 1 < 2 and 2 < 3 }} {{ not t }} {{ 1 in xs }} {{ 5 not in xs }} {{ 'ell' in 'hello' }} {{ 'a' in d }} {{ xs == [3, 1, 2] }} {{ n or 'fallback' }} {{ t and 'yes' }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if n else 'no' }} {{ 'only-if' if n }}|",
    "{{ n is none }} {{ s is string }} {{ d is mapping }} {{ xs is iterable }} {{ f is number }} {{ missing is defined }} {{ missing is undefined }} {{ xs is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ t is true }} {{ 1 is equalto 1 }} {{ d.zz is defined }} {{ t is boolean }}",
    "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1, b='x') }}",
    "{{ range(10, 0, -3)|list }} {{ range(5, 5)|list }} {{ range(100000)|length }} {{ range(0, 300000, 3)|last }}",
    "{{ range(0, 300000, 2)|length }}",
    "{{ 'ab' * 3 }}|{{ 2 * 'xy' }}|{{ [1, 'a'] * 2 }}|{{ 3 * [0] }}|{{ 'q' * 0 }}|{{ [1] * -2 }}|{{ xs * 2 }}|{{ ('' * 1000000000000)|length }}|{{ [] * 1000000000000 }}",
    "a\n  {% if t %}\n    yes\n  {% endif %}\nb\n{# comment #}\nc\n  {%- if t -%}  trimmed  {%- endif %}\nd",
    "line1\n    {% for x in xs %}\n    - {{ x }}\n    {% endfor %}\nend\n",
    "{%+ if t %}  keep{% endif %}|  {{ 'x' }}  |{{- ' y ' -}}|\n{{ 'z' }}",
    "{% if xs|length > 2 %}many{% elif xs %}some{% else %}none{% endif %}",
    "{{ u|length }} {{ u|upper }} {{ u|reverse }} {{ u[1] }}",
    "{% set x = [1, 2] %}{% set y = x + [3] %}{{ y }} {{ x }} {{ [1, 'a', none, true, 2.0, {'k': [1]}] }}",
    "{{ \"It's\" }} {{ ['it\\'s', \"q\\\"q\"] }} {{ {'a': 'b'} }}",
    "{{ raise_exception('custom failure: ' ~ xs|length) }}",
    "{{ xs.nope() }}",
    "{% for m in users %}{{ m.name ~ ('!' if m.admin) }}{% endfor %}",
    "{{ s + '|' + u + '|' ~ f ~ '|' + 'x' }} {{ 'a' + 'b' ~ 1 + 2 }} {{ xs + [4] }} {{ f + 1 + 2 }}",
    "{{ 'a' + s + 1 }}",
    "{{ s + undefined_name }}",
    "{{ d.zz + 1 }}",
    "{{ 2 * xs[7] }}",
    # Globals are defined like variables (Llama 3.x: `if strftime_now is defined`).
    "{{ strftime_now is defined }} {{ raise_exception is defined }} {{ namespace is callable }} {{ nope is defined }}",
    "{% if strftime_now is defined %}{{ strftime_now('%Y-%m-%d') }}{% else %}fallback{% endif %}",
    # Python %-formatting (`format` filter: Llama 4-style pythonic tool calls).
    "{{ '%s-%d'|format('a', 7) }} {{ '%s'|format(xs) }} {{ '%r|%s'|format('q', n) }} {{ '%5.2f|%-6s|%06d|%+d|%x|%X|%o|%%|%c'|format(f, 'ab', 42, 3, 255, 255, 8, 65) }}",
    "{{ '%e %g %G %.3e %10.4f'|format(12345.678, 0.0001, 1e20, f, -f) }} {{ '%(a)s=%(b)d'|format(a='k', b=2) }} {{ '%i %s %s'|format(t, t, d) }}",
    "{{ '%s %s'|format('only one') }}",
    "{{ '%d'|format('x') }}",
    # Undefined is iterable, empty, and passes through filters as Jinja2's Undefined does.
    "{{ missing is iterable }} {{ missing is sequence }} {{ missing is mapping }} {% for x in missing %}never{% else %}empty{% endfor %} {{ missing|list }} {{ missing|length }} {{ missing|items|list }} {{ missing|join(',') }}|{{ missing|default([])|length }}",
    "{{ d.nope is iterable }} {{ n is iterable }} {{ 3 is iterable }} {{ s is iterable }} {{ d|items is iterable }}",
    "{% macro ty(spec) %}{% if spec.type == 'array' %}list[{{ ty(spec|items) }}]{% elif spec.type is iterable and spec.type is not string %}Union[{% for t in spec.type %}{{ ty({'type': t}) }}{{ ',' if not loop.last }}{% endfor %}]{% elif spec.type is string %}{{ {'string': 'str', 'integer': 'int', 'number': 'float', 'boolean': 'bool', 'object': 'dict'}[spec.type] }}{% else %}Any{% endif %}{% endmacro %}{{ ty({'type': 'array', 'items': {'type': 'string'}}) }} {{ ty({'type': ['string', 'null']}) }} {{ ty({'type': 'integer'}) }} {{ ty({}) }}",
    # Filters and methods tool templates use, with their less common arguments.
    "{{ 'hello big world'|wordcount }} {{ \"it's o'neil\"|title }} {{ 'ÉCOLE été'|capitalize }} {{ 'ab'|center(7) }}|{{ 'abc'|center(2) }}",
    "{{ 'a\nb\n\nc'|indent(2, first=true) }}|{{ 'a\nb\n\nc'|indent(2, blank=true) }}|{{ 'a\nb'|indent('> ') }}|{{ 'x'|indent(width=4, first=true) }}",
    "{{ users|map(attribute='name')|join('/') }} {{ users|map(attribute='missing', default='?')|list }} {{ xs|map('string')|join }} {{ users|selectattr('age', 'gt', 26)|map(attribute='name')|list }} {{ users|selectattr('admin', 'defined')|list|length }} {{ users|rejectattr('age', 'lt', 30)|map(attribute='name')|first }}",
    "{{ xs|select('gt', 1)|list }} {{ xs|select('equalto', 2)|list }} {{ xs|select|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ ['a', 'bb', 'c']|select('ne', 'bb')|list }}",
    "{{ d|dictsort(reverse=true) }} {{ {'B': 1, 'a': 2, 'c': 0}|dictsort }} {{ {'B': 1, 'a': 2, 'c': 0}|dictsort(true) }} {{ {'b': 1, 'a': 2, 'c': 0}|dictsort(by='value') }}",
    "{% for g in users|groupby('admin') %}{{ g.grouper }}:{{ g.list|map(attribute='name')|join }};{% endfor %} {% for k, items in [{'t': 'x', 'v': 1}, {'t': 'y', 'v': 2}, {'t': 'x', 'v': 3}]|groupby('t') %}{{ k }}={{ items|map(attribute='v')|list }} {% endfor %}",
    "{% for g in users|groupby('admin', default=false) %}{{ g.grouper }}:{{ g.list|map(attribute='name')|join }};{{ g }} {% endfor %}{% for g in [{'k': 'B'}, {'k': 'b'}, {'k': 'a'}]|groupby('k') %}{{ g }}{% endfor %}",
    "{{ [1, 2, 3, 4, 5]|batch(2, 'fill')|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3, 4, 5, 6, 7]|slice(3, 0)|list }} {{ ['A', 'a', 'b', 'B']|unique|list }} {{ ['A', 'a', 'b']|unique(case_sensitive=true)|list }} {{ users|unique(attribute='admin')|list|length }}",
    "{{ users|min(attribute='age') }} {{ users|max(attribute='age') }} {{ ['b', 'A', 'c']|min }} {{ ['b', 'A', 'c']|max(case_sensitive=true) }} {{ users|sum(attribute='age') }} {{ xs|sum(start=10) }} {{ [[1], [2]]|sum(start=[]) }}",
    "{{ nested|tojson(indent=1, sort_keys=true) }} {{ {'b': [1, 2], 'a': none}|tojson(separators=(',', ':'), sort_keys=true) }} {{ u|tojson(ensure_ascii=true) }}",
    "{{ 'a,b,c,d'.split(',', 2) }} {{ 'a b  c d'.split(none, 1) }} {{ 'a,b,c,d'.rsplit(',', 2) }} {{ '  a b  '.rsplit() }} {{ 'a,b'.split(',', -1) }} {{ 'abc'.split('b', 0) }}",
    "{{ 'hello'.startswith(('x', 'he')) }} {{ 'hello'.startswith('l', 2) }} {{ 'hello'.endswith('ll', 0, 4) }} {{ 'hello'.startswith(()) }}",
    "{{ xs[::2] }} {{ xs[::-2] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-1:0:-2] }} {{ 'abcdef'[5:1:-1] }} {{ [1, 2, 3, 4, 5][-2:] }} {{ 'abc'[10:] }}|{{ xs[1:2:0] if false }}",
    "{{ 'a-b'.replace('-', '+', 1) }} {{ 'Hello'.swapcase() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }} {{ 'x'.center(5, '*') }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }} {{ '7'.zfill(3) }} {{ 'a b'.partition(' ') }} {{ ', '.join(['x', 'y']) }} {{ 'abc'.isalpha() }} {{ '12'.isdigit() }} {{ 'Ab'.islower() }} {{ '  '.isspace() }} {{ 'tEsT'.casefold() if false }}",
]


class TemplateFeatures(unittest.TestCase):
    def test_features_match_jinja2(self):
        with tempfile.TemporaryDirectory() as d:
            lines, dirs = [], []
            for i, tpl in enumerate(CASES):
                case_dir = os.path.join(d, str(i))
                os.mkdir(case_dir)
                with open(os.path.join(case_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
                    f.write(tpl)
                dirs.append(case_dir)
            req = json.dumps({"messages": [], "chat_template_kwargs": V}, ensure_ascii=False) + "\n"
            failures = []
            for tpl, case_dir in zip(CASES, dirs):
                ref = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "render_reference.py"),
                                      case_dir], input=req.encode(), capture_output=True)
                self.assertEqual(ref.returncode, 0, ref.stderr.decode())
                want = json.loads(ref.stdout.decode())
                req_file = os.path.join(case_dir, "req.jsonl")
                with open(req_file, "w", encoding="utf-8") as f:
                    f.write(req)
                _, out, _ = run(["template", "--model-dir", case_dir, "--request", req_file,
                                 "--jsonl"])
                got = json.loads(out)
                if got != want:
                    failures.append((tpl, want, got))
            self.assertEqual(failures, [], f"{len(failures)} of {len(CASES)} differ")


if __name__ == "__main__":
    main()
