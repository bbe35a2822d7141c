#!/usr/bin/env python3
"""corpus writes the goldens of the chat-template corpus: the Hugging Face
chat templates of @huggingface/ollama-utils, which scripts/fetch-fixtures.sh
extracts to .fixtures/templates (index.json names each file's model and
sha256).

Every template is rendered over the conversations of CASES, each with
add_generation_prompt true, the way chatgolden.py renders a fixture model:
vLLM's message normalization, then Python jinja2 configured as
transformers configures it (chatgolden.make_env). The special tokens are
the same for every template (SPECIAL) and the Go test gives the engine the
same ones.

The goldens hold no third-party text: per (template, case) the template's
sha256, the case id, and the SHA-256 and UTF-8 byte length of jinja2's
rendering, or the error type and message where jinja2 raised.

Usage, from the repository root, after `make fixtures`:

    python3 tools/chatgolden/corpus.py

Output: tokenize/testdata/corpus.cases.jsonl (the conversations, one
{"id", "body"} a line) and tokenize/testdata/corpus.golden.jsonl, one JSON
object per (template, case): {"template", "sha256", "id", "text_sha256" +
"text_bytes" | "error" + "error_type"}; a template jinja2 cannot compile has
one record with id "compile".
"""

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chatgolden  # noqa: E402

TEMPLATES = os.path.join(chatgolden.ROOT, ".fixtures", "templates")
TESTDATA = os.path.join(chatgolden.ROOT, "tokenize", "testdata")
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
    index = json.load(open(os.path.join(TEMPLATES, "index.json"), encoding="utf-8"))
    bodies = []
    with open(os.path.join(TESTDATA, "corpus.cases.jsonl"), "w", encoding="utf-8") as f:
        for cid, body in CASES:
            body_text = json.dumps(dict(body, add_generation_prompt=True), ensure_ascii=False)
            bodies.append((cid, body_text))
            f.write(json.dumps({"id": cid, "body": body_text}, ensure_ascii=False) + "\n")
    counts = {}
    with open(os.path.join(TESTDATA, "corpus.golden.jsonl"), "w", encoding="utf-8") as f:
        for entry in index:
            raw = open(os.path.join(TEMPLATES, entry["file"]), "rb").read()
            digest = hashlib.sha256(raw).hexdigest()
            if digest != entry["sha256"]:
                sys.exit("corpus: %s differs from index.json" % entry["file"])
            source = raw.decode("utf-8")
            head = {"template": entry["file"], "sha256": digest}
            try:
                compiled = env.from_string(source)
            except Exception as e:
                rec = dict(head, id="compile", error=str(e), error_type=type(e).__name__)
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                counts["compile_error"] = counts.get("compile_error", 0) + 1
                continue
            for cid, body_text in bodies:
                rec = dict(head, id=cid)
                try:
                    text = chatgolden.render(env, compiled, source, SPECIAL, json.loads(body_text)).encode("utf-8")
                    rec["text_sha256"], rec["text_bytes"] = hashlib.sha256(text).hexdigest(), len(text)
                except chatgolden.TemplateError as e:
                    rec["error"], rec["error_type"] = str(e), "TemplateError"
                except chatgolden.InputError as e:
                    rec["error"], rec["error_type"] = str(e), "InputError"
                except Exception as e:  # TypeError, UndefinedError, ...
                    rec["error"], rec["error_type"] = str(e), type(e).__name__
                kind = rec.get("error_type", "text")
                counts[kind] = counts.get(kind, 0) + 1
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print("corpus: %d templates; %s" % (len(index), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))


if __name__ == "__main__":
    main()
