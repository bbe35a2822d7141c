#!/usr/bin/env python3
"""chatgolden writes the chat-template goldens for package tokenize.

For every fixture model with a chat template it renders the conversations
of cases.py the way vLLM does: vLLM's message normalization (re-implemented
here independently of the Go code, from vllm/entrypoints/chat_utils.py),
then the template in Python jinja2 set up exactly as transformers sets it
up (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), transformers' tojson, raise_exception,
strftime_now with a fixed clock).

Usage, from the repository root, after scripts/fetch-fixtures.sh:

    python3 tools/chatgolden/chatgolden.py
    (cd tools/tokgolden && npm ci) && node tools/chatgolden/count.js   # token counts

or only the single-feature templates (features.py; no fixtures needed):

    python3 tools/chatgolden/chatgolden.py features

Output: tokenize/testdata/chat/<model>.golden.jsonl, one JSON object per
case: {"id", "body" (the request JSON text), "text" | "error" + "error_type"}.
count.js adds "tokens" (HF tokenizers, add_special_tokens per the body).
"""

import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
import features  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = ["qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"]
# The fixed clock the Go tests use as well (LoadOptions.Now).
NOW = datetime(2026, 3, 5, 14, 7, 9)


class TemplateError(Exception):
    pass


class InputError(Exception):
    pass


def make_env():
    # transformers' _compile_jinja_template
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- vLLM's content-format detection (_detect_content_format) ----

def _is_var_access(node, varname):
    if isinstance(node, nodes.Name):
        return node.ctx == "load" and node.name == varname
    return False


def _is_attr_access(node, varname, key):
    if isinstance(node, nodes.Getitem):
        return _is_var_access(node.node, varname) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    if isinstance(node, nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node, varname, key=None):
    if isinstance(node, nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _iter_nodes_assign_var_or_elems(root, varname):
    yield root, varname
    related = {varname}
    for assign in root.find_all(nodes.Assign):
        lhs, rhs = assign.target, assign.node
        if not isinstance(lhs, nodes.Name):
            continue
        if any(_is_var_or_elems_access(rhs, n) for n in related):
            related.add(lhs.name)
            yield assign, lhs.name


def _iter_nodes_assign_messages_item(root):
    messages_varnames = [v for _, v in _iter_nodes_assign_var_or_elems(root, "messages")]
    for loop in root.find_all(nodes.For):
        if not isinstance(loop.target, nodes.Name):
            continue
        for varname in messages_varnames:
            if _is_var_or_elems_access(loop.iter, varname):
                yield loop, loop.target.name
                break


def _iter_nodes_assign_content_item(root):
    message_varnames = [v for _, v in _iter_nodes_assign_messages_item(root)]
    for loop in root.find_all(nodes.For):
        for varname in message_varnames:
            if _is_var_or_elems_access(loop.iter, varname, "content"):
                yield loop
                break


def detect_content_format(env, source):
    try:
        ast = env.parse(source)
    except Exception:
        return "string"
    try:
        next(_iter_nodes_assign_content_item(ast))
    except StopIteration:
        return "string"
    return "openai"


# ---- vLLM's message normalization ----

MM_TYPES = {"image_url", "input_image", "image_embeds", "image_pil", "image", "audio_url", "input_audio",
            "audio", "audio_embeds", "video_url", "video", "file"}


def conversation(messages, fmt):
    out = []
    for msg in messages:
        role = msg["role"]
        content = msg.get("content")
        if content is None:
            content = []
        elif isinstance(content, str):
            content = [{"type": "text", "text": content}]
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
                continue
            t = part.get("type")
            if t in ("text", "input_text"):
                texts.append(part["text"])
            elif t in MM_TYPES:
                raise InputError("multimodal")
            else:
                raise InputError("Unknown part type: %s" % t)
        if fmt == "openai" and not (role == "tool" and texts):
            m = {"role": role, "content": [{"type": "text", "text": t} for t in texts]}
        else:
            m = {"role": role, "content": "\n".join(texts)}
        if role == "assistant":
            if msg.get("tool_calls") is not None:
                calls = list(msg["tool_calls"])
                if calls:
                    m["tool_calls"] = calls
            reasoning = msg.get("reasoning")
            if reasoning is None:
                reasoning = msg.get("reasoning_content")
            if reasoning is not None:
                m["reasoning"] = reasoning
                m["reasoning_content"] = reasoning
        elif role == "tool":
            if "tool_call_id" in msg:
                m["tool_call_id"] = msg["tool_call_id"]
        if isinstance(msg.get("name"), str):
            m["name"] = msg["name"]
        out.append(m)
    # _postprocess_messages
    for m in out:
        if m["role"] == "assistant" and isinstance(m.get("tool_calls"), list):
            for item in m["tool_calls"]:
                args = item["function"].get("arguments")
                if args:
                    if not isinstance(args, (dict, list)):
                        item["function"]["arguments"] = json.loads(args)
                else:
                    item["function"]["arguments"] = {}
    return out


def dump_tools(tools):
    out = []
    for t in tools:
        fn = t["function"]
        f = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
        for k, v in fn.items():
            if k not in f:
                f[k] = v
        d = {"type": "function", "function": f}
        for k, v in t.items():
            if k not in d:
                d[k] = v
        out.append(d)
    return out


def special_tokens(cfg):
    out = {}
    for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            out[k] = v
    if cfg.get("additional_special_tokens"):
        out["additional_special_tokens"] = [x["content"] if isinstance(x, dict) else x for x in cfg["additional_special_tokens"]]
    return out


FN_KW = {"conversation", "tools", "documents", "chat_template", "add_generation_prompt", "continue_final_message",
         "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
         "return_assistant_tokens_mask", "tokenizer_kwargs"}


def render(env, compiled, source, special, body):
    add_gen = body.get("add_generation_prompt", True)
    cont = body.get("continue_final_message", False)
    if cont and add_gen:
        raise InputError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    fmt = detect_content_format(env, source)
    msgs = conversation(body["messages"], fmt)
    tools = dump_tools(body["tools"]) if body.get("tools") is not None else None
    kwargs = {}
    from jinja2 import meta
    template_vars = meta.find_undeclared_variables(env.parse(source))
    for k, v in (body.get("chat_template_kwargs") or {}).items():
        if k in ("chat_template", "tokenize"):
            raise InputError("Found unexpected chat template kwargs from request: {'%s'}" % k)
        if k in FN_KW or k in template_vars:
            kwargs[k] = v
    kwargs.pop("add_generation_prompt", None)
    kwargs.pop("continue_final_message", None)
    if body.get("documents") is not None:
        kwargs["documents"] = body["documents"]
    if body.get("reasoning_effort") is not None:
        kwargs["reasoning_effort"] = body["reasoning_effort"]
    if tools is not None:
        kwargs["tools"] = tools
    tools = kwargs.pop("tools", None)
    documents = kwargs.pop("documents", None)
    template_kwargs = {**special, **kwargs}
    try:
        text = compiled.render(messages=msgs, tools=tools, documents=documents, add_generation_prompt=add_gen,
                               **template_kwargs)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            raise TemplateError(str(e))
        raise
    if cont:
        final = msgs[-1]["content"]
        if isinstance(final, (list, tuple)):
            for block in reversed(final):
                if "text" in block:
                    final = block["text"]
                    break
            else:
                raise TemplateError("continue_final_message is set but we could not find any text to continue in the final message!")
        if final.strip() not in text:
            raise TemplateError("continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.")
        loc = text.rindex(final.strip())
        if text[loc:loc + len(final.lstrip())] == final:
            text = text[:loc + len(final.lstrip())]
        else:
            text = text[:loc + len(final.strip())]
    return text


def main():
    env = make_env()
    outdir = os.path.join(ROOT, "tokenize", "testdata", "chat")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "features.golden.jsonl"), "w", encoding="utf-8") as f:
        for fid, src in features.FEATURES:
            rec = {"id": fid, "template": src, "vars": features.V}
            try:
                rec["text"] = env.from_string(src).render(**json.loads(features.V))
            except jinja2.exceptions.TemplateError as e:
                rec["error"], rec["error_type"] = str(e), type(e).__name__
            except Exception as e:
                rec["error"], rec["error_type"] = str(e), type(e).__name__
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print("chatgolden: features: %d templates" % len(features.FEATURES))
    if sys.argv[1:] == ["features"]:
        return
    all_cases = cases.build()
    for model in MODELS:
        mdir = os.path.join(ROOT, ".fixtures", "models", model)
        cfg = json.load(open(os.path.join(mdir, "tokenizer_config.json")))
        source = cfg.get("chat_template")
        if not source:
            print("chatgolden: %s has no chat template, skipped" % model)
            continue
        compiled = env.from_string(source)
        special = special_tokens(cfg)
        n = 0
        with open(os.path.join(outdir, model + ".golden.jsonl"), "w", encoding="utf-8") as f:
            for cid, body_text in all_cases:
                body = json.loads(body_text)
                rec = {"id": cid, "body": body_text}
                try:
                    rec["text"] = render(env, compiled, source, special, body)
                except TemplateError as e:
                    rec["error"], rec["error_type"] = str(e), "TemplateError"
                except InputError as e:
                    rec["error"], rec["error_type"] = str(e), "InputError"
                except Exception as e:  # TypeError, UndefinedError, ...
                    rec["error"], rec["error_type"] = str(e), type(e).__name__
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
        print("chatgolden: %s: %d cases" % (model, n))


if __name__ == "__main__":
    main()
