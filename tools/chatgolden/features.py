"""Single-feature templates for the gaps between the Go engine and Python
jinja2 that change counts. Each is (id, template, variables as JSON text)."""

import os

# tokenize/testdata/chat/jamba_like.jinja, which the Go tests also load.
JAMBA = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tokenize", "testdata", "chat", "jamba_like.jinja"),
             encoding="utf-8").read()

V = '{"none": null, "f1": 1.0, "f2": 1e-07, "f3": 1e16, "f4": 123456789012345.6, "f5": -0.0, "f6": 0.1, "f7": 2.5e-05, "i": 42, "s": "x", "t": true, "l": [1, 2.0, null, "a\'b", "q\\"", true], "d": {"z": 1, "a": {"b": [1.5, null]}, "m": "é\u2028<>&"}, "e": [], "ed": {}, "u": "日本\\n\\t\\u0001"}'

FEATURES = [
    ("none_print", "[{{ none }}]"),
    ("float_print", "{{ f1 }} {{ f2 }} {{ f3 }} {{ f4 }} {{ f5 }} {{ f6 }} {{ f7 }}"),
    ("int_print", "{{ i }} {{ t }}"),
    ("list_print", "{{ l }}"),
    ("dict_print", "{{ d }}"),
    ("string_filter", "{{ none|string }}|{{ f1|string }}|{{ l|string }}"),
    ("tojson_plain", "{{ d|tojson }} {{ l|tojson }} {{ e|tojson }} {{ ed|tojson }} {{ u|tojson }}"),
    ("tojson_indent", "{{ d|tojson(indent=4) }}\n{{ l|tojson(indent=2) }}\n{{ e|tojson(indent=2) }}"),
    ("tojson_indent_str", "{{ d|tojson(indent='\\t') }}"),
    ("tojson_separators", "{{ d|tojson(separators=(',', ':')) }}"),
    ("tojson_sort", "{{ d|tojson(sort_keys=true) }}"),
    ("tojson_ascii", "{{ d|tojson(ensure_ascii=true) }} {{ '😀'|tojson(ensure_ascii=true) }}"),
    ("tojson_floats", "{{ [f1, f2, f3, f4, f5, f6, f7]|tojson }}"),
    ("join_none", "{{ [1, none, 2.0, 'x']|join(', ') }}"),
    ("trim_none", "[{{ none|trim }}]"),
    ("ws_dash_after_expr", "Reasoning Effort: {{ s }}{%- if t %} yes{% endif %}"),
    ("ws_space_before_block", "{% for x in [1,2] %}{{ x }} {% endfor %}"),
    ("ws_leading_expr_space", "{{ s }} {% if t %}T{% endif %}"),
    ("ws_trim_blocks", "{% if t %}\nA\n{% endif %}\nB"),
    ("ws_lstrip", "    {% if t %}\n    X\n    {% endif %}\nY"),
    ("ws_nested_tags", "{% if t %}{% if t %}\n\nZ{% endif %}{% endif %}"),
    ("ws_comment", "a\n  {# c #}\nb {#- c -#} c"),
    ("ws_minus_both", "a   {{- s -}}   b\n\n{%- if t -%}\n\n c \n{%- endif -%}\n d"),
    ("ws_plus", "  {%+ if t %}k{% endif %}"),
    ("ws_trailing_newline", "end\n"),
    ("ws_crlf", "a\r\n{% if t %}\r\nb{% endif %}"),
    ("raw_block", "{% raw %}{{ not }}{% endraw %}!"),
    ("concat_none", "{{ 'a' ~ none ~ f1 }}"),
    ("concat_values", "{{ f1 ~ f3 ~ f4 ~ f5 ~ t ~ i ~ l ~ d ~ e ~ ed ~ missing }}"),
    ("concat_precedence", "{{ (i + 1) ~ f1 * 2 ~ -i }}|{{ f1 ~ s + s ~ f1 }}|{{ s ~ f1 - 0 if false else s ~ f6 * 10 }}|{{ 'x' ~ f1 if t else 'y' }}|{{ s ~ f1 == 'x1.0' }}|{{ not s ~ none }}"),
    ("concat_filters_tests", "{{ l|length ~ f1|round(2) ~ none|default('d', true) ~ (none is none) ~ (f1 is not string) }}"),
    ("concat_nested", "{{ [f1 ~ none, (s ~ f6)]|join(',') ~ {'k': f1 ~ ''}['k'] ~ d.a.b[0] ~ l[1:3] }}"),
    ("concat_statements", "{% set x = f1 ~ none %}{% if x ~ f1 == '1.0None1.0' %}eq{% endif %}{% for c in [f1 ~ 'a', none ~ 'b'] %}[{{ c }}]{% endfor %}{{ x }}"),
    ("concat_strings", "{{ 'a ~ b' ~ \"c'~\" ~ s }}"),
    ("concat_raise", "{{ raise_exception('bad ' ~ f1 ~ ' ' ~ none) }}"),
    ("concat_macro_kwargs", "{% macro m(a, b='q') %}{{ a ~ b }}{% endmacro %}{{ m(f1 ~ none, b=f6 ~ t) }}"),
    ("prec_unary_filter", "{{ -1|abs }} {{ -i|string }} {{ not t == false }} {{ 2 ** 3 ** 2 }} {{ 7 // 2 * 3 }} {{ -2 ** 2 }}"),
    ("prec_in_is", "{{ 'x' in s ~ 'y' }} {{ s ~ 'y' is string }} {{ not s in l }} {{ i is divisibleby 6 }} {{ none is none and t }}"),
    ("prec_ternary", "{{ 'a' if t else 'b' ~ 'c' }}|{{ ('a' if not t else 'b') ~ 'c' }}|{{ l[0] if l else none }}"),
    ("arith_values", "{{ i / 5 }} {{ i // 5 }} {{ i % 5 }} {{ f1 + i }} {{ i * f6 }} {{ 10 / 4 }} {{ 3 * 's' }}"),
    ("string_methods", "{{ s.upper() }} {{ '  a b '.strip() }} {{ 'a,b'.split(',') }} {{ 'ab'.startswith('a') }} {{ 'x{}y'.format(1) if false else 'q' }} {{ s.title() }} {{ 'a-b'.replace('-', '+') }}"),
    ("loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
    ("filters_misc", "{{ l|length }} {{ d|list }} {{ 'abc'|upper }} {{ [3,1,2]|sort }} {{ [1,2]|last }} {{ [1,2]|first }} {{ 'a'|default('b') }} {{ missing|default('z') }} {{ [1,2,3]|reverse|list }}"),
    ("dict_get", "{{ d.get('z') }} {{ d.get('nope') }} {{ d.get('nope', 5) }} {{ d['m'] }} {{ d.z }}"),
    ("format_filter", "{{ '%s|%d|%.2f'|format(f1, i, f6) }} {{ 'x%sy'|format(none) }} {{ '%s'|format(l) }}"),
    ("format_more", "{{ '%d%%|%r|%.1f|%f|%s and %s|%i'|format(5, s, 2.25, i, t, e, t) }}{{ '[INST] %s [/INST]'|format(u) }}"),
    ("map_select", "{{ [{'a': 1.5}, {'a': none}]|map(attribute='a')|list }} {{ l|select|list }} {{ l|reject('none')|list }} {{ [d]|selectattr('z')|list|length }}"),
    ("truth_filters", "{{ l|select()|list }} {{ l|reject|list }} {{ [d, {'z': 0}]|rejectattr('z')|list|length }} {{ [{'r': 'a'}, {'r': ''}]|selectattr( 'r' )|map(attribute='r')|join(',') }} {{ [{'r': none}, {'r': 1}]|selectattr('r', 'none')|list|length }} {{ l|select|map('string')|join('|') }}"),
    ("ns_loop", "{% set ns = namespace(n=0) %}{% for x in l %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"),
    ("capitalize", "{{ 'user'|capitalize }} {{ 'aSSISTANT two'|capitalize }} {{ ''|capitalize }} {{ 'x' ~ ('tool'|capitalize) }}"),
    ("str_title", "{{ 'user'.title() }} {{ 'aSSISTANT two-words'.title() }} {{ ''.title() }} {{ 'tool_call 3rd x'.title() }} {{ \"it's\".title() }}"),
    ("map_filter_name", "{{ [d, l, s]|map('tojson')|join(', ') }}|{{ ['  a ', 'b  ']|map('trim')|join('+') }}|{{ [1, 2.5, none]|map('string')|list }}|{{ ['a', 'b']|map('upper')|list }}"),
    ("dict_update_sandboxed", "{% set c = {'a': 1} %}{% set _ = c.update({'b': 2}) %}{{ c }}"),
    ("safe_markup", "{{ s|safe }}|{{ (d|tojson|safe) ~ '<' }}|{{ ('<a>'|safe) + '<b>&' }}|{{ ('<x>\"' + ('&'|safe) + \"'\") ~ '' }}|{% set m = l|tojson|safe %}{{ m }}|{{ m|length }}|{{ none|safe }}|{{ ('a'|safe)|string + '<' }}|{{ ('<'|safe) == '<' }}|{{ [s|safe, '>']|join }}|{{ (u|safe) ~ none }}"),
    ("safe_markup_written", "{{ '<x>' + ('&'|safe) + '&' }}{{ s + '<' + (s|safe) + '>' + (s|safe) }}{% set m = '<'|safe %}{{ 'a&' + m }}{{ d.m + m }}{% for x in [m] %}{{ '\"' + x }}{% endfor %}"),
    ("str_format_method", "{{ '<|image_{i:d}|>'.format(i=i) }}|{{ '{} and {}'.format(s, f1) }}|{{ '{0}{1}{0}'.format(l, none) }}|{{ '{{x}} {n:s} {t:d}'.format(n=s, t=t) }}|{{ '{}'.format(d) }}"),
    ("underscore_names", "{% set _x = s %}{% set _ = d.get('z') %}{{ _x }}{{ _ }}{% for _k, _v in d|items %}{{ _k }}{% endfor %}{% macro _m(_a) %}[{{ _a }}]{% endmacro %}{{ _m(_x) }}"),
    ("int_after_dot", "{{ l.0 }}|{{ d.a.b.0 }}|{{ [[1, [2, 3]]].0.1.1 }}|{{ [{'type': 't'}].0.type }}"),
    ("replace_filter", "{{ 'a_url_url'|replace('_url', '') }}|{{ s|replace('x', '<y>', 1) }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ f1|replace('.', ',') }}|{{ 'ab'|replace('', '-') }}|{{ none|replace('N', 'n') }}"),
    ("min_max_filters", "{{ [3, 1, 2]|min }} {{ [3, 1.5, 2]|max }} {{ [i, 7]|min }} {{ [true, 0]|min }} {{ [2, 2.0]|max }} [{{ []|min }}]"),
    ("raise", "{{ raise_exception('Custom failure: ' ~ s) }}"),
    ("strftime", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %-d') }}"),
    ("dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
    ("macro", "{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(f1) }}{{ m(none) }}"),
    ("set_block", "{% set x %}\n  body {{ f1 }}\n{% endset %}[{{ x }}]"),
    ("tojson_undefined", "{{ missing|tojson }}"),
    # Call argument unpacking (jinja2's parse_call_args): *x after the
    # positional arguments, keywords after it, **x last.
    ("call_star_args", "{% macro m(a, b, c='C') %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{% set p = [[1, s], [f1, none, t]] %}{{ m(*p[0]) }}{{ m(*p[1]) }}{{ m(i, *[s]) }}{{ m(*(l[:2])) }}{{ m(*'xy') }}{{ m(*p[0], c=d.z) }}{{ m(*missing, a=1, b=2) }}"),
    ("call_star_dict_keys", "{% macro m(a, b) %}{{ a }}-{{ b }}{% endmacro %}{{ m(*{'k1': 1, 'k2': 2}) }} {{ m('q', *d|list|first) }} {{ m(*d|list) if false else 'n' }}"),
    ("call_star_kwargs", "{% macro m(a, b='B', c='C') %}{{ a }}/{{ b }}/{{ c }}{% endmacro %}{{ m(**{'a': 1, 'c': none}) }} {{ m(s, **{'b': l[1]}) }} {{ m(*[i], c=f6, **{'b': t}) }} {{ namespace(**{'x': i}).x }}"),
    ("call_star_methods", "{{ 'a,b,c'.split(*[',', 1]) }} {{ range(*[1, 4])|list }}"),
    ("call_star_macro_list", "{%- macro sys(c) -%}<S>{{ c }}{%- endmacro -%}{%- macro turn(r, c, end='<E>') -%}<{{ r }}>{{ c }}{{ end }}{%- endmacro -%}{%- set ns = namespace(ms=[], ps=[]) -%}{%- for x in l -%}{%- if loop.first -%}{%- set ns.ms = ns.ms + [sys] -%}{%- set ns.ps = ns.ps + [[x]] -%}{%- else -%}{%- set ns.ms = ns.ms + [turn] -%}{%- set ns.ps = ns.ps + [['r' ~ loop.index, x]] -%}{%- endif -%}{%- endfor -%}{%- for i in range(ns.ms|length) -%}{{ ns.ms[i](*ns.ps[i]) }}{%- endfor -%}"),
    ("call_star_too_many", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(*[1, 2]) }}"),
    # A nested dict literal ends in `}}` (or a list of them in `}}]`)
    # inside an expression and inside {% set %}: the owned evaluator reads
    # it as jinja2 does; the engine's scanner would split the tag there.
    ("nested_dict_closer", "{{ {'a': {'b': 1}} }} {{ {'a': {'b': l[0]}}['a'] }} {{ {'q': {'r': s}}.q.r ~ '!' }}"
     "{% set c = {'x': {'y': s}} %}{{ c.x.y }} {{ c }}{% set e = [{'k': {'v': 2}}] %}{{ e[0].k.v }}"
     "{%- set n = namespace(m={'p': {'z': i}}) %}{{ n.m.p.z }}"),
    # The Jamba-like template (macros called through a list with
    # unpacking), over a conversation set in the template itself.
    ("jamba_like", "{%- set bos_token = '<|startoftext|>' -%}{%- set add_generation_prompt = t -%}"
     "{%- set tools = [{'type': 'function', 'function': {'name': 'f', 'parameters': d} }] -%}"
     "{%- set messages = [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': u}, "
     "{'role': 'assistant', 'content': s}, {'role': 'user', 'content': 'again ' ~ f1}] -%}" + JAMBA),
]
