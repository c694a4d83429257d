#!/usr/bin/env python3
"""Writes tests/chat/v4_vectors.json: conversations and the prompt DeepSeek's
own DeepSeek-V4 encoder (encoding_dsv4.py, encode_messages) makes of each.
Run by hand when the cases change (the encoder is in no package registry, so
the checked-in file is what the ctest compares flashgate's renderer with):

    /usr/bin/python3 tests/chat/make_v4_vectors.py /path/to/encoding_dsv4.py

Each case is written in flashgate's terms (fg_chat_conv: messages, declared
tools, thinking, add_generation_prompt) and handed to the encoder the way
docs/protocol.md "Prompt formats" says flashgate maps it: the tools on the
first message when it is a system message, else on an empty system message
put at the head; thinking_mode "thinking" or "chat"; drop_thinking left at
its default (True); no reasoning effort, no context.
"""
import importlib.util
import json
import os
import sys

WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "parameters": {"type": "object",
                          "properties": {"city": {"type": "string", "description": "Ville é, 東京"},
                                         "days": {"type": "integer"}},
                          "required": ["city"]}}
SEARCH = {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


CASES = [
    {"name": "chat_single", "messages": [{"role": "user", "content": "Hello"}]},
    {"name": "chat_system_multi_turn",
     "messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "Name a prime."},
                  {"role": "assistant", "content": "7"},
                  {"role": "user", "content": "Another, larger than 1000?"}]},
    {"name": "chat_ends_with_assistant", "add_generation_prompt": False,
     "messages": [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]},
    {"name": "chat_reasoning_not_written",
     "messages": [{"role": "user", "content": "Is 91 prime?"},
                  {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No: 7 * 13."},
                  {"role": "user", "content": "And 97?"}]},
    {"name": "thinking_single", "thinking": True, "messages": [{"role": "user", "content": "Hello"}]},
    {"name": "thinking_drops_past_reasoning", "thinking": True,
     "messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Is 91 prime?"},
                  {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No."},
                  {"role": "user", "content": "And 97?"},
                  {"role": "assistant", "reasoning_content": "Not divisible by 2, 3, 5, 7.", "content": "Yes."},
                  {"role": "user", "content": "Thanks"}]},
    {"name": "thinking_keeps_last_reasoning", "thinking": True, "add_generation_prompt": False,
     "messages": [{"role": "user", "content": "Is 91 prime?"},
                  {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No."}]},
    {"name": "thinking_assistant_without_reasoning", "thinking": True, "add_generation_prompt": False,
     "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]},
    {"name": "system_mid_conversation",
     "messages": [{"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello."},
                  {"role": "system", "content": "Answer in French."},
                  {"role": "user", "content": "Thanks"}]},
    {"name": "consecutive_users_merged",
     "messages": [{"role": "user", "content": "first"}, {"role": "user", "content": ""},
                  {"role": "user", "content": "third"}]},
    {"name": "only_system", "add_generation_prompt": False,
     "messages": [{"role": "system", "content": "Setup."}]},
    {"name": "tools_with_system", "tools": [WEATHER, SEARCH],
     "messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "Weather in Paris?"}]},
    {"name": "tools_without_system_thinking", "thinking": True, "tools": [WEATHER],
     "messages": [{"role": "user", "content": "Weather in Paris?"}]},
    {"name": "tools_system_not_first", "tools": [SEARCH],
     "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                  {"role": "system", "content": "late"}, {"role": "user", "content": "find cats"}]},
    {"name": "calls_outputs_answer_chat", "tools": [WEATHER, SEARCH],
     "messages": [{"role": "system", "content": "Use tools."},
                  {"role": "user", "content": "Weather in Paris and Tokyo, and search news?"},
                  {"role": "assistant", "tool_calls": [
                      call("get_weather", '{"city": "Paris", "days": 3}'),
                      call("get_weather", '{"city":"東京","days":1,"units":null}'),
                      call("search", '{"q":"news \\"today\\"\\n", "filters": {"lang": ["en", "fr"], "safe": true, '
                                     '"min": 0.1, "max": 1e20, "neg": -0.0, "big": 12345678901234567, "s": "é\\u0001"}}')]},
                  {"role": "tool", "content": "18C, cloudy"},
                  {"role": "tool", "content": "25C, sunny"},
                  {"role": "tool", "content": "[]"},
                  {"role": "assistant", "content": "Paris 18C, Tokyo 25C; no news."},
                  {"role": "user", "content": "Thanks"}]},
    {"name": "calls_outputs_thinking_keeps_all", "thinking": True, "tools": [WEATHER],
     "messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "reasoning_content": "Need the tool.",
                   "tool_calls": [call("get_weather", '{"city": "Paris"}')]},
                  {"role": "tool", "content": "18C"},
                  {"role": "assistant", "reasoning_content": "Got it.", "content": "18C in Paris."},
                  {"role": "user", "content": "And tomorrow?"},
                  {"role": "assistant", "content": "Let me check.",
                   "tool_calls": [call("get_weather", '{"city": "Paris", "days": 2}')]},
                  {"role": "tool", "content": "20C"}]},
    {"name": "output_then_user_merged", "tools": [SEARCH],
     "messages": [{"role": "user", "content": "find cats"},
                  {"role": "assistant", "tool_calls": [call("search", "{}")]},
                  {"role": "tool", "content": "no results"},
                  {"role": "user", "content": "try dogs"}]},
    {"name": "content_and_calls", "tools": [SEARCH], "add_generation_prompt": False,
     "messages": [{"role": "user", "content": "find cats"},
                  {"role": "assistant", "content": "Searching.",
                   "tool_calls": [call("search", '{"q": "cats", "n": [1, 2.5, {"a": null}]}')]}]},
    {"name": "typed_markers_stay_text", "thinking": True, "add_generation_prompt": False,
     "messages": [{"role": "user", "content": "say <｜User｜> and <think> and </think> and ｜DSML｜"},
                  {"role": "assistant", "reasoning_content": "<｜Assistant｜>?", "content": "<｜end▁of▁sentence｜>"}]},
]


def to_reference(case):
    msgs = [dict(m) for m in case["messages"]]
    tools = case.get("tools")
    if tools:
        decl = [{"type": "function", "function": t} for t in tools]
        if msgs and msgs[0]["role"] == "system":
            msgs[0]["tools"] = decl
        else:
            msgs.insert(0, {"role": "system", "content": "", "tools": decl})
    return msgs


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_v4_vectors.py /path/to/encoding_dsv4.py")
    spec = importlib.util.spec_from_file_location("encoding_dsv4", sys.argv[1])
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)
    out = []
    for case in CASES:
        mode = "thinking" if case.get("thinking") else "chat"
        prompt = enc.encode_messages(to_reference(case), thinking_mode=mode)
        out.append({"name": case["name"], "thinking": bool(case.get("thinking")),
                    "add_generation_prompt": case.get("add_generation_prompt", True),
                    "tools": case.get("tools", []), "messages": case["messages"], "prompt": prompt})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "v4_vectors.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in out))
        f.write("\n]\n")
    print(f"{path}: {len(out)} cases")


if __name__ == "__main__":
    main()
