#!/usr/bin/python3
"""conversation.item.delete and .truncate keep the KV before the cut (docs/protocol.md "The
OpenAI GA flow"; gateway/gw_realtime.c, engine fg_session_truncate), over real sockets with
the gateway's own redis-server:

- delete: in a session of several items, the next response's cached_tokens is exactly the
  tokens before the deleted item (the head and the items before it), and its greedy output is
  that of a fresh session sent the edited conversation;
- truncate: an assistant reply cut to its first bytes keeps the cache up to the first token
  that changed (more than the items before the reply, no more than the reply's end), and the
  next reply is that of a fresh session sent the cut conversation;
- SIGKILL right after a delete's answer, then a restart and session.resume: the restored
  session continues from the cut cache (cached_tokens: the head before the cut, not the uncut
  conversation) with the edited conversation's reply;
- deepseek4 (v4-tiny), whose cache cannot be cut back: a delete is answered the same, and the next
  response prefills the edited conversation again (cached_tokens 0) with a fresh session's reply;
- the cut runs on gw_disk's worker: while one is held (debug.restore_gate_file, tests only)
  another session streams a whole response, the cut session's client gets no answer and is
  not read (its next response.create, sent at once, runs after the answer, in order);
- an out-of-band response.create (conversation "none") forks the session on gw_disk's worker
  too: while that is held another session streams, and the client's next event runs after the
  out-of-band response has begun; the response reads the session's cache (cached_tokens > 0).
"""
import asyncio
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DATA_DIR, Conn, Server, check, delta_text, eq, run_tests, user_item, wait_for  # noqa: E402

SETTINGS = {"instructions": "Be brief.", "temperature": 0, "max_output_tokens": 8}
# short items: every input stays below FG_SHORT_INPUT (64 tokens), so that a cache built over
# several turns and a fresh session's single prefill use one attention form (same bits)
ITEMS = ["Hi there.", "Open it.", "Close it."]


def cached(done):
    return done["usage"]["input_token_details"]["cached_tokens"]


async def prefilled_session(srv, texts):
    """A session with the items in its cache (prefill-only responses): (conn, item ids, input tokens
    of the cache after each prefill)."""
    c = await Conn.open(srv)
    await c.create_session(SETTINGS)
    ids, sizes = [], []
    for t in texts:
        ids.append((await c.add_user(t))["item"]["id"])
        _, _, done = await c.respond({"generate": False})
        sizes.append(done["usage"]["input_tokens"])
    return c, ids, sizes


async def fresh_reply(srv, items):
    """The greedy reply of a fresh session sent items (conversation.item.create each)."""
    c = await Conn.open(srv)
    await c.create_session(SETTINGS)
    for it in items:
        await c.add_item(it)
    _, out, done = await c.respond()
    await c.close()
    return out, done


def assistant_item(text):
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


async def test_delete_keeps_the_head():
    async with Server() as srv:
        c, ids, sizes = await prefilled_session(srv, ITEMS)
        await c.send({"type": "conversation.item.delete", "event_id": "d1", "item_id": ids[1]})
        eq((await c.expect("conversation.item.deleted"))["item_id"], ids[1], "deleted")
        _, out, done = await c.respond()
        eq(cached(done), sizes[0], "the cache kept the head and the first item, exactly: the tokens before the cut")
        check(cached(done) > 0, "a head was kept")
        ref_out, ref_done = await fresh_reply(srv, [user_item(ITEMS[0]), user_item(ITEMS[2])])
        eq(done["usage"]["input_tokens"], ref_done["usage"]["input_tokens"], "the same conversation's length")
        eq(out, ref_out, "the reply is a fresh session's on the edited conversation")
        check(out, "a reply")


async def ga_open(srv):
    """A GA connection (the session exists at connect) with SETTINGS."""
    c = await Conn.open(srv, subprotocols=("realtime",))
    await c.expect("session.created")
    await c.send({"type": "session.update", "session": SETTINGS})
    await c.expect("session.updated")
    return c


async def ga_add(c, item):
    await c.send({"type": "conversation.item.create", "item": item})
    added = await c.expect("conversation.item.added")
    await c.expect("conversation.item.done")
    return added["item"]["id"]


async def ga_respond(c):
    await c.send({"type": "response.create"})
    events = await c.recv_until("response.done")
    return delta_text(events), events[-1]["response"]


async def test_truncate_keeps_the_head():
    async with Server() as srv:
        c = await ga_open(srv)
        await ga_add(c, user_item(ITEMS[0]))
        out1, done1 = await ga_respond(c)
        reply = done1["output"][0]
        check(len(out1.encode()) >= 2, f"a reply to cut: {out1!r}")
        await ga_add(c, user_item(ITEMS[1]))
        await c.send({"type": "conversation.item.truncate", "item_id": reply["id"], "content_index": 0,
                      "audio_end_ms": 0, "text_end": 2})
        eq((await c.expect("conversation.item.truncated"))["item_id"], reply["id"], "truncated")
        await c.send({"type": "conversation.item.retrieve", "item_id": reply["id"]})
        kept_text = (await c.expect("conversation.item.retrieved"))["item"]["content"][0]["text"]
        check(out1.encode().startswith(kept_text.encode()) and len(kept_text.encode()) <= 2, f"cut: {kept_text!r}")
        out, done = await ga_respond(c)
        before = done1["usage"]["input_tokens"]  # the head, the first item and the reply marker
        check(before <= cached(done) < before + done1["usage"]["output_tokens"],
              f"the cache kept the items before the reply and its first tokens: {cached(done)} of "
              f"{before} + {done1['usage']['output_tokens']}")
        r = await ga_open(srv)
        for it in (user_item(ITEMS[0]), assistant_item(kept_text), user_item(ITEMS[1])):
            await ga_add(r, it)
        ref_out, ref_done = await ga_respond(r)
        eq(done["usage"]["input_tokens"], ref_done["usage"]["input_tokens"], "the same conversation's length")
        eq(out, ref_out, "the reply is a fresh session's on the cut conversation")


async def test_sigkill_after_delete_serves_the_cut():
    pdir = tempfile.mkdtemp(prefix="fg-items-")
    try:
        srv = Server(persistence={"dir": pdir})
        async with srv:
            c, ids, sizes = await prefilled_session(srv, ITEMS)
            sid = c.session_id
            ref_out, _ = await fresh_reply(srv, [user_item(ITEMS[0]), user_item(ITEMS[2])])
            await c.send({"type": "conversation.item.delete", "item_id": ids[1]})
            await c.expect("conversation.item.deleted")
            srv.kill()  # at once: only what the cut wrote before its answer is on disk
            last = c.last_seq
        async with Server(persistence={"dir": pdir}) as srv2:
            c2 = await Conn.open(srv2)
            await c2.resume(sid, last)
            _, out, done = await c2.respond()
            eq(cached(done), sizes[0], "restored from the cut cache: the tokens before the deleted item")
            eq(out, ref_out, "the restored session's reply is the edited conversation's")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_v4_falls_back_to_a_rebuild():
    async with Server(model={"path": os.path.join(DATA_DIR, "v4-tiny.gguf")}, log_level="debug") as srv:
        c, ids, sizes = await prefilled_session(srv, ITEMS)
        await c.send({"type": "conversation.item.delete", "item_id": ids[1]})
        eq((await c.expect("conversation.item.deleted"))["item_id"], ids[1], "deleted")
        eq([e["error"] for e in srv.log_events("session_cut_failed")], ["unsupported"],
           "the engine refused the cut (its state cannot be rewound)")
        _, out, done = await c.respond()
        eq(cached(done), 0, "prefilled again from the instructions")
        ref_out, _ = await fresh_reply(srv, [user_item(ITEMS[0]), user_item(ITEMS[2])])
        eq(out, ref_out, "the reply is a fresh session's on the edited conversation")


async def test_cut_does_not_stall_others():
    tmp = tempfile.mkdtemp(prefix="fg-items-gate-")
    gate = os.path.join(tmp, "gate")
    try:
        async with Server(log_level="debug", debug={"restore_gate_file": gate}) as srv:
            c, ids, sizes = await prefilled_session(srv, ITEMS)
            await c.send({"type": "conversation.item.delete", "item_id": ids[1]})
            await c.send({"type": "response.create"})  # sent at once: runs after the cut's answer
            await wait_for(lambda: srv.log_events("session_cut_started"), "the cut started")
            o = await Conn.open(srv)
            await o.create_session({"temperature": 0, "max_output_tokens": 24})
            await o.add_user("Tell me a story.")
            events, _, done = await o.respond()
            check([e for e in events if e["type"] == "response.output_text.delta"] and done["status"],
                  f"a whole response streamed while the cut was held: {done}")
            eq(srv.log_events("session_cut_done"), [], "the held cut has not completed yet")
            await c.no_event(within=0.3)
            open(gate, "w").close()
            eq((await c.expect("conversation.item.deleted"))["item_id"], ids[1], "the answer, from the completion")
            events = [await c.expect("response.created")] + await c.recv_until("response.done")
            eq(cached(events[-1]["response"]), sizes[0], "the response after the cut, from the kept head")
            check(delta_text(events), "it replied")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)



async def test_oob_fork_does_not_stall_others():
    tmp = tempfile.mkdtemp(prefix="fg-items-gate-")
    gate = os.path.join(tmp, "gate")
    try:
        async with Server(log_level="debug", debug={"restore_gate_file": gate}) as srv:
            c = await ga_open(srv)
            await ga_add(c, user_item(ITEMS[0]))
            await ga_respond(c)
            await c.send({"type": "response.create", "response": {"conversation": "none", "max_output_tokens": 4}})
            await c.send({"type": "conversation.item.create", "item": user_item(ITEMS[1])})
            await wait_for(lambda: srv.log_events("session_oob_fork_started"), "the out-of-band fork started")
            o = await Conn.open(srv)
            await o.create_session({"temperature": 0, "max_output_tokens": 24})
            await o.add_user("Tell me a story.")
            events, _, done = await o.respond()
            check([e for e in events if e["type"] == "response.output_text.delta"] and done["status"],
                  f"a whole response streamed while the fork was held: {done}")
            eq(srv.log_events("session_oob_fork_done"), [], "the held fork has not completed yet")
            await c.no_event(within=0.3)
            open(gate, "w").close()
            got = await c.recv_until("conversation.item.done")
            types = [e["type"] for e in got]
            check("response.created" in types and types.index("response.created") < types.index("conversation.item.added"),
                  f"the item sent after the response.create follows the response's start: {types}")
            if "response.done" not in types:
                got += await c.recv_until("response.done")
            oob = got[-1]["response"] if got[-1]["type"] == "response.done" else \
                [e for e in got if e["type"] == "response.done"][0]["response"]
            eq(oob["conversation_id"], None, "out of band")
            check(cached(oob) > 0, f"the out-of-band context is a fork of the session's cache: {oob['usage']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# DeepSeek-V4's per-item prompt (docs/protocol.md "Prompt formats"): an item first closes what the one
# before left open, so after an edit the items next to it must open as in a fresh session of the same
# conversation. v4-tiny-chat has V4's markers; its cache cannot be cut back, so each edited session is
# prefilled again, and its input tokens and greedy reply must be a fresh session's.
V4_CHAT = os.path.join(DATA_DIR, "v4-tiny-chat.gguf")
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 21}'}


def v4_server(**kw):
    return Server(model={"path": V4_CHAT, "kv_budget_bytes": 64 << 20}, **kw)


async def v4_fresh(srv, items):
    """(input tokens, greedy reply) of a fresh GA session sent items."""
    r = await ga_open(srv)
    for it in items:
        await ga_add(r, it)
    out, done = await ga_respond(r)
    await r.close()
    return done["usage"]["input_tokens"], out


async def test_v4_truncate_after_a_call():
    async with v4_server() as srv:
        c = await ga_open(srv)
        ids = [await ga_add(c, it) for it in (user_item("Weather?"), CALL, assistant_item("It is sunny."))]
        await c.send({"type": "conversation.item.truncate", "item_id": ids[2], "content_index": 0,
                      "audio_end_ms": 0, "text_end": 2})
        eq((await c.expect("conversation.item.truncated"))["item_id"], ids[2], "truncated")
        await ga_add(c, user_item("Thanks."))
        out, done = await ga_respond(c)
        want = await v4_fresh(srv, [user_item("Weather?"), CALL, assistant_item("It"), user_item("Thanks.")])
        eq((done["usage"]["input_tokens"], out), want,
           "the cut message after the call closes the call block as a fresh session's does")


async def test_v4_delete_the_last_item():
    async with v4_server() as srv:
        c = await ga_open(srv)
        ids = [await ga_add(c, it) for it in (user_item("Weather?"), CALL)]
        await c.send({"type": "conversation.item.delete", "item_id": ids[1]})
        eq((await c.expect("conversation.item.deleted"))["item_id"], ids[1], "deleted")
        await ga_add(c, user_item("Hello again."))
        out, done = await ga_respond(c)
        want = await v4_fresh(srv, [user_item("Weather?"), user_item("Hello again.")])
        eq((done["usage"]["input_tokens"], out), want,
           "the next item follows the user turn left open, not the deleted call")


async def test_v4_delete_a_call_between_items():
    async with v4_server() as srv:
        c = await ga_open(srv)
        ids = [await ga_add(c, it) for it in (user_item("Weather?"), CALL, OUTPUT)]
        await c.send({"type": "conversation.item.delete", "item_id": ids[1]})
        eq((await c.expect("conversation.item.deleted"))["item_id"], ids[1], "deleted")
        out, done = await ga_respond(c)
        want = await v4_fresh(srv, [user_item("Weather?"), OUTPUT])
        eq((done["usage"]["input_tokens"], out), want, "the output after the cut opens as in a fresh session")


async def test_v4_delete_a_call_before_a_reply():
    """The reply generated after a call opened by closing the call block; with the call deleted its
    opening is the one after the user turn, and the next prompt is a fresh session's."""
    eos = "<\uff5cend\u2581of\u2581sentence\uff5c>"
    async with v4_server(debug={"scripted_output": ["Sunny." + eos, "Bye." + eos, "Bye." + eos]}) as srv:
        c = await ga_open(srv)
        ids = [await ga_add(c, it) for it in (user_item("Weather?"), CALL)]
        out, _ = await ga_respond(c)
        eq(out, "Sunny.", "the scripted reply")
        await c.send({"type": "conversation.item.delete", "item_id": ids[1]})
        eq((await c.expect("conversation.item.deleted"))["item_id"], ids[1], "deleted")
        await ga_add(c, user_item("Thanks."))
        _, done = await ga_respond(c)
        want, _ = await v4_fresh(srv, [user_item("Weather?"), assistant_item("Sunny."), user_item("Thanks.")])
        eq(done["usage"]["input_tokens"], want, "the reply after the cut opens after the user turn")


async def test_v4_restored_after_a_call():
    """A session whose last item is a call, saved with the call in its cache and restored by a
    restarted gateway: the output item closes the call block as in the session that never stopped."""
    pdir = tempfile.mkdtemp(prefix="fg-items-v4-")
    try:
        async with v4_server(persistence={"dir": pdir}) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            await c.add_user("Weather?")
            await c.add_item(CALL)
            _, _, done = await c.respond({"generate": False})
            held = done["usage"]["input_tokens"]
            sid, last = c.session_id, c.last_seq
            await c.close()
        async with v4_server(persistence={"dir": pdir}) as srv2:
            c2 = await Conn.open(srv2)
            await c2.resume(sid, last)
            await c2.add_item(OUTPUT)
            _, out, done = await c2.respond()
            check(0 < held - 1 <= cached(done) <= held,
                  f"restored with the call in its cache (but maybe its last token): {cached(done)} of {held}")
            ref = await Conn.open(srv2)
            await ref.create_session(SETTINGS)
            for it in (user_item("Weather?"), CALL, OUTPUT):
                await ref.add_item(it)
            _, ref_out, ref_done = await ref.respond()
            eq((done["usage"]["input_tokens"], out), (ref_done["usage"]["input_tokens"], ref_out),
               "the restored session's prompt and reply are those of one that never stopped")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
