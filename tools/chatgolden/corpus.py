#!/usr/bin/env python3
"""corpus writes the goldens of the chat-template corpus
(tokenize/testdata/corpus: real templates from public repositories, each
file's origin in origins.json).

Every template is rendered over the conversations of CASES, each with
add_generation_prompt true, the way chatgolden.py renders a fixture model:
vLLM's message normalization, then Python jinja2 configured as
transformers configures it (chatgolden.make_env). The special tokens are
the same for every template (SPECIAL) and the Go test gives the engine the
same ones.

Usage, from the repository root (no fixtures needed):

    python3 tools/chatgolden/corpus.py

Output: tokenize/testdata/corpus/goldens.jsonl, one JSON object per
(template, case): {"template", "id", "body", "text" | "error" +
"error_type"}; a template jinja2 cannot compile has one record with id
"compile".
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chatgolden  # noqa: E402

CORPUS = os.path.join(chatgolden.ROOT, "tokenize", "testdata", "corpus")
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Recherche sur le web — résultats",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
            "required": ["query"],
        },
    },
}

CODE = "Fix this:\n```python\ndef add(a, b):\n\treturn a - b\n```\nThanks!"

CASES = [
    ("plain", {"messages": [{"role": "user", "content": "What is the capital of France?"}]}),
    ("system", {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello!"},
    ]}),
    ("multi_turn", {"messages": [
        {"role": "system", "content": "Tu es un assistant serviable. Réponds en français."},
        {"role": "user", "content": "東京の天気はどうですか？ 👩‍👩‍👧 🇫🇷"},
        {"role": "assistant", "content": "晴れです。 Il fait beau."},
        {"role": "user", "content": CODE},
        {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a + b\n```"},
        {"role": "user", "content": "  And <b>why</b> & \"how\"?  \n"},
    ]}),
    ("tools", {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ], "tools": [WEATHER, SEARCH]}),
    ("tool_round_trip", {"messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "Xa9bC3d7e", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "Xa9bC3d7e", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."},
        {"role": "user", "content": "Thanks! And in Tokyo?"},
    ], "tools": [WEATHER]}),
    ("parallel_calls", {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris and 東京, and search the news."},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "Pa9bC3d7e", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "Tk9bC3d7e", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"東京\", \"unit\": \"fahrenheit\"}"}},
            {"id": "Sr9bC3d7e", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"news\", \"limit\": 3, \"ratio\": 0.5, \"tags\": [\"a\", null, true]}"}},
        ]},
        {"role": "tool", "tool_call_id": "Pa9bC3d7e", "content": "18C"},
        {"role": "tool", "tool_call_id": "Tk9bC3d7e", "content": "75F"},
        {"role": "tool", "tool_call_id": "Sr9bC3d7e", "content": "[\"headline one\", \"headline two\"]"},
    ], "tools": [WEATHER, SEARCH]}),
    ("content_parts", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "System as parts."}]},
        {"role": "user", "content": [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "An answer."}]},
        {"role": "user", "content": "Plain again."},
    ]}),
]


def main():
    env = chatgolden.make_env()
    names = sorted(n for n in os.listdir(CORPUS) if n.endswith(".jinja"))
    out = os.path.join(CORPUS, "goldens.jsonl")
    counts = {}
    with open(out, "w", encoding="utf-8") as f:
        for name in names:
            source = open(os.path.join(CORPUS, name), encoding="utf-8", newline="").read()
            try:
                compiled = env.from_string(source)
            except Exception as e:
                rec = {"template": name, "id": "compile", "error": str(e), "error_type": type(e).__name__}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                counts["compile_error"] = counts.get("compile_error", 0) + 1
                continue
            for cid, body in CASES:
                body = dict(body, add_generation_prompt=True)
                body_text = json.dumps(body, ensure_ascii=False)
                rec = {"template": name, "id": cid, "body": body_text}
                try:
                    rec["text"] = chatgolden.render(env, compiled, source, SPECIAL, json.loads(body_text))
                    kind = "text"
                except chatgolden.TemplateError as e:
                    rec["error"], rec["error_type"] = str(e), "TemplateError"
                except chatgolden.InputError as e:
                    rec["error"], rec["error_type"] = str(e), "InputError"
                except Exception as e:  # TypeError, UndefinedError, ...
                    rec["error"], rec["error_type"] = str(e), type(e).__name__
                kind = rec.get("error_type", "text")
                counts[kind] = counts.get(kind, 0) + 1
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print("corpus: %d templates; %s" % (len(names), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))


if __name__ == "__main__":
    main()
