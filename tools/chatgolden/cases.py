"""The chat conversations chatgolden renders: hand-written scenarios plus
seeded random combinations. Each case is (id, request JSON text)."""

import json
import random

SYSTEMS = [
    "You are a helpful assistant.",
    "Tu es un assistant serviable. Réponds en français.",
    "你是一个乐于助人的助手。",
    "  Leading and trailing spaces, and a newline.\n",
    "Use <b>HTML</b> & \"quotes\" & 'apostrophes' \\ backslashes.",
]
USERS = [
    "Hello!",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "東京の天気はどうですか？",
    "Summarise: The quick brown fox jumps over the lazy dog. " * 3,
    "Emoji test 👩‍👩‍👧‍👦 🇫🇷 👍🏽 1️⃣ and RTL: مرحبا بالعالم שלום",
    "Code:\n```go\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n```",
    "   padded with spaces   ",
    "Numbers 1234567 3.14159 1e10 and a tab\tinside.",
    "Combining: e\u0301 a\u0308 and zero-width\u200bspace",
    "<tool_response>not really</tool_response>",
    "Line one\n\nLine three\n",
]
ASSISTANTS = [
    "Hi! How can I help you today?",
    "The capital of France is Paris.",
    "Waves fold and unfold\nsalt wind carries gull voices\nthe tide keeps its time",
    "晴れです。",
    "Sure.\n\n- item one\n- item two",
    "<think>\nThe user wants a short answer.\n</think>\n\nParis.",
    "  spaced answer  ",
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Recherche sur le web — résultats 🔎",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "threshold": {"type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.5},
                "filters": {"type": "object", "properties": {"site": {"type": "string"}, "after": {"type": ["string", "null"]}}},
            },
            "required": ["query"],
        },
    },
}
NO_DESC_TOOL = {"type": "function", "function": {"name": "ping"}}
STRICT_TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"], "additionalProperties": False},
        "strict": True,
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL, NO_DESC_TOOL, STRICT_TOOL]


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def scenarios():
    s = []
    add = lambda name, body: s.append((name, body))
    add("basic", {"messages": [{"role": "system", "content": SYSTEMS[0]}, {"role": "user", "content": USERS[0]}]})
    add("user_only", {"messages": [{"role": "user", "content": USERS[1]}]})
    add("no_gen_prompt", {"messages": [{"role": "user", "content": USERS[1]}, {"role": "assistant", "content": ASSISTANTS[1]}], "add_generation_prompt": False})
    turns = []
    for i in range(10):
        turns.append({"role": "user", "content": USERS[i % len(USERS)]})
        turns.append({"role": "assistant", "content": ASSISTANTS[i % len(ASSISTANTS)]})
    turns.append({"role": "user", "content": "And finally?"})
    add("ten_turns", {"messages": [{"role": "system", "content": SYSTEMS[0]}] + turns})
    add("tools_basic", {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER_TOOL]})
    add("tools_all_system", {"messages": [{"role": "system", "content": SYSTEMS[1]}, {"role": "user", "content": "Cherche 'go generics'."}], "tools": TOOLS})
    add("tool_call_string_args", {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
    ], "tools": [WEATHER_TOOL]})
    add("tool_call_dict_args", {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny in Paris."},
        {"role": "user", "content": "Thanks"},
    ], "tools": [WEATHER_TOOL]})
    add("parallel_calls", {"messages": [
        {"role": "system", "content": SYSTEMS[0]},
        {"role": "user", "content": "Weather in Paris and Tokyo, then search news."},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call("a", "get_weather", "{\"city\": \"Paris\"}"),
            call("b", "get_weather", "{\"city\": \"東京\", \"unit\": \"fahrenheit\"}"),
            call("c", "search", "{\"query\": \"news\", \"limit\": 3, \"threshold\": 1.0}"),
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "18C"},
        {"role": "tool", "tool_call_id": "b", "content": "75F"},
        {"role": "tool", "tool_call_id": "c", "content": "[\"headline one\", \"headline two\"]"},
    ], "tools": TOOLS})
    add("empty_args", {"messages": [
        {"role": "user", "content": "ping"},
        {"role": "assistant", "content": None, "tool_calls": [call("p", "ping", "")]},
        {"role": "tool", "tool_call_id": "p", "content": "pong"},
    ], "tools": [NO_DESC_TOOL]})
    add("floats_args", {"messages": [
        {"role": "user", "content": "numbers"},
        {"role": "assistant", "content": None, "tool_calls": [call("n", "calc", "{\"a\": 1.0, \"b\": 1e-07, \"c\": 100000000000000000.0, \"d\": -0.0, \"e\": 2.5e+20, \"f\": 0.0001, \"g\": 123456789.125, \"h\": [1, 2.0, null, true, false], \"i\": {\"nested\": \"é\\u2028x\"}}")]},
        {"role": "tool", "tool_call_id": "n", "content": "ok"},
    ], "tools": [STRICT_TOOL]})
    add("reasoning_last", {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic: 2+2=4."},
    ], "add_generation_prompt": False})
    add("reasoning_history", {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
        {"role": "user", "content": "3+3?"},
    ]})
    add("reasoning_field", {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning": "Arithmetic via the reasoning field."},
        {"role": "user", "content": "and 5+5?"},
    ]})
    add("think_in_content", {"messages": [{"role": "user", "content": "Capital?"}, {"role": "assistant", "content": ASSISTANTS[5]}, {"role": "user", "content": "Sure?"}]})
    add("think_in_content_last", {"messages": [{"role": "user", "content": "Capital?"}, {"role": "assistant", "content": ASSISTANTS[5]}], "add_generation_prompt": False})
    add("thinking_off", {"messages": [{"role": "user", "content": "Quick answer please."}], "chat_template_kwargs": {"enable_thinking": False}})
    add("thinking_on", {"messages": [{"role": "user", "content": "Think hard."}], "chat_template_kwargs": {"enable_thinking": True}})
    add("kwargs_unreferenced", {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"some_flag": 1, "add_generation_prompt": False}})
    add("content_parts_one", {"messages": [{"role": "user", "content": [{"type": "text", "text": "Part one only."}]}]})
    add("content_parts_many", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "System as parts."}]},
        {"role": "user", "content": [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}, {"type": "text", "text": " third "}]},
    ]})
    add("content_parts_assistant", {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Q"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A1"}, {"type": "text", "text": "A2"}]},
        {"role": "user", "content": "Q2"},
    ]})
    add("unicode_stress", {"messages": [
        {"role": "system", "content": SYSTEMS[4]},
        {"role": "user", "content": USERS[5] + " " + USERS[9] + " \u00a0nbsp \u3000ideographic"},
    ]})
    add("alternation_violation", {"messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]})
    add("assistant_first", {"messages": [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}]})
    add("system_only", {"messages": [{"role": "system", "content": SYSTEMS[0]}]})
    add("developer_role", {"messages": [{"role": "developer", "content": "Be terse."}, {"role": "user", "content": "hi"}]})
    add("name_field", {"messages": [{"role": "user", "content": "hi", "name": "alice"}, {"role": "assistant", "content": "hello alice", "name": "bot"}, {"role": "user", "content": "bye"}]})
    add("empty_content", {"messages": [{"role": "user", "content": ""}]})
    add("null_user_content", {"messages": [{"role": "user", "content": None}]})
    add("continue_final", {"messages": [{"role": "user", "content": "Tell me a story."}, {"role": "assistant", "content": "Once upon a time"}], "add_generation_prompt": False, "continue_final_message": True})
    add("continue_final_trailing_space", {"messages": [{"role": "user", "content": "Count:"}, {"role": "assistant", "content": "one, two, "}], "add_generation_prompt": False, "continue_final_message": True})
    add("continue_and_gen", {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "continue_final_message": True})
    add("whitespace_content", {"messages": [{"role": "user", "content": "\n\n  indented\n\n"}, {"role": "assistant", "content": "\nreply\n"}, {"role": "user", "content": "\t"}]})
    add("multi_system", {"messages": [{"role": "system", "content": "First system."}, {"role": "user", "content": "hi"}, {"role": "system", "content": "Second system."}, {"role": "user", "content": "again"}]})
    add("tool_result_as_parts", {"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", "{\"city\": \"Oslo\"}")]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "cold"}, {"type": "text", "text": "-5C"}]},
    ], "tools": [WEATHER_TOOL]})
    add("documents", {"messages": [{"role": "user", "content": "Use the docs."}], "documents": [{"title": "Doc A", "text": "Alpha."}, {"title": "Doc B", "text": "Beta."}]})
    add("long_message", {"messages": [{"role": "user", "content": ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 60)}]})
    add("empty_tool_calls", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello", "tool_calls": []}, {"role": "user", "content": "bye"}]})
    add("multi_step_tools", {"messages": [
        {"role": "user", "content": "Plan a trip."},
        {"role": "assistant", "content": "", "reasoning_content": "Need weather first.", "tool_calls": [call("w", "get_weather", "{\"city\": \"Rome\"}")]},
        {"role": "tool", "tool_call_id": "w", "content": "hot"},
        {"role": "assistant", "content": "", "reasoning_content": "Now search.", "tool_calls": [call("s", "search", "{\"query\": \"Rome hotels\"}")]},
        {"role": "tool", "tool_call_id": "s", "content": "Hotel list"},
    ], "tools": TOOLS})
    return s


def random_cases(n, seed=20260305):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        msgs = []
        if rnd.random() < 0.5:
            msgs.append({"role": "system", "content": rnd.choice(SYSTEMS)})
        turns = rnd.randint(1, 6)
        for t in range(turns):
            u = rnd.choice(USERS)
            if rnd.random() < 0.15:
                u = [{"type": "text", "text": x} for x in rnd.sample(USERS, rnd.randint(1, 3))]
            msgs.append({"role": "user", "content": u})
            if t < turns - 1 or rnd.random() < 0.2:
                a = {"role": "assistant", "content": rnd.choice(ASSISTANTS)}
                r = rnd.random()
                if r < 0.15:
                    a["reasoning_content"] = "Reasoning #%d: consider the options." % i
                elif r < 0.3:
                    cid = "call_%d_%d" % (i, t)
                    a["content"] = rnd.choice([None, "", "Calling a tool."])
                    a["tool_calls"] = [call(cid, "get_weather", json.dumps({"city": rnd.choice(["Paris", "Lima", "München", "Ōsaka"])}, ensure_ascii=False))]
                    msgs.append(a)
                    msgs.append({"role": "tool", "tool_call_id": cid, "content": rnd.choice(["sunny", "{\"t\": 3.0}", "rain 🌧"])})
                    a = {"role": "assistant", "content": "Done."}
                msgs.append(a)
        body = {"messages": msgs}
        if rnd.random() < 0.3:
            body["tools"] = rnd.sample(TOOLS, rnd.randint(1, len(TOOLS)))
        if rnd.random() < 0.2:
            body["chat_template_kwargs"] = {"enable_thinking": rnd.random() < 0.5}
        if msgs[-1]["role"] == "assistant":
            body["add_generation_prompt"] = False
        out.append(("random_%03d" % i, body))
    return out


def build():
    cs = scenarios() + random_cases(90)
    return [(cid, json.dumps(body, ensure_ascii=False)) for cid, body in cs]
