#!/usr/bin/python3
"""Every client event over a real connection, with the server's answers and their order
(docs/protocol.md "Client events", "Server events", "A conversation").

session.create (defaults, every field, fork_from), session.update, conversation.item.create
(user/assistant/system messages, function_call, function_call_output), response.create
(generate: false, per-response overrides of every sampling field), response.cancel,
session.close (also during a response); a 3-turn conversation's cached_tokens; items added
while a response runs; instructions changed after items exist.

Greedy sampling (temperature 0) wherever texts are compared. Run: /usr/bin/python3 test_protocol_flow.py [test names]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (SESSION_ID_RE, SESSION_KEYS, Conn, Server, check, check_response_events,  # noqa: E402
                     delta_text, eq, log, run_tests, user_item)

DEFAULT_MAX = 16  # sessions.default_max_output_tokens in these servers: short responses


def server(**kw):
    kw.setdefault("sessions", {})
    kw["sessions"].setdefault("default_max_output_tokens", DEFAULT_MAX)
    return Server(**kw)


async def greedy_run(srv, items, response=None, session=None):
    """A fresh session with these items and one greedy response: (text, done)."""
    c = await Conn.open(srv)
    try:
        await c.create_session(dict({"temperature": 0}, **(session or {})))
        for it in items:
            await c.add_item(it)
        _, text, done = await c.respond(response)
        return text, done
    finally:
        await c.close()


# ---------------------------------------------------------------- session.create / update


async def test_session_create_defaults():
    async with server() as srv:
        c = await Conn.open(srv)
        await c.send({"type": "session.create", "event_id": "c1"})
        ev = await c.expect("session.created")
        eq(ev["event_id"], "evt_1", "event_id of the first event")
        eq(ev["sequence_number"], 1, "sequence_number of session.created")
        eq(list(ev.keys()), ["type", "event_id", "sequence_number", "session"], "session.created's fields")
        s = ev["session"]
        eq(list(s.keys()), SESSION_KEYS, "session fields (and their order)")
        check(SESSION_ID_RE.match(s["id"]), f"session id {s['id']}")
        eq({k: v for k, v in s.items() if k != "id"},
           {"object": "realtime.session", "instructions": "", "temperature": 1, "top_p": 1, "top_k": 0, "min_p": 0,
            "seed": None, "max_output_tokens": DEFAULT_MAX, "stop": []}, "default settings")
        await c.close()
        # "session": null is the same as no session object
        c = await Conn.open(srv)
        await c.send({"type": "session.create", "session": None})
        ev = await c.expect("session.created")
        eq(ev["session"]["temperature"], 1, "temperature with session: null")
        eq(ev["session"]["max_output_tokens"], DEFAULT_MAX, "max_output_tokens with session: null")
        await c.close()


async def test_session_create_all_fields():
    async with server() as srv:
        c = await Conn.open(srv)
        settings = {"instructions": "You are a terse assistant. ✓", "temperature": 0.7, "top_p": 0.95, "top_k": 40,
                    "min_p": 0.05, "seed": 42, "max_output_tokens": 512, "stop": ["\nUser:", "END"]}
        ev = await c.create_session(dict(settings, unknown_field={"ignored": True}), event_id="c1")
        s = ev["session"]
        eq({k: s[k] for k in settings}, settings, "settings echoed by session.created")
        await c.close()
        # the edges: one stop string, "inf", seed 2^53, temperature 2, top_p 1 (off)
        c = await Conn.open(srv)
        ev = await c.create_session({"stop": "\n\n", "max_output_tokens": "inf", "seed": 2 ** 53, "temperature": 2,
                                     "top_p": 1, "top_k": 1000000, "min_p": 0.0, "instructions": ""})
        s = ev["session"]
        eq(s["stop"], ["\n\n"], "a single stop string becomes a list")
        eq(s["max_output_tokens"], 32768, "\"inf\" is the server's limit")
        eq(s["seed"], 2 ** 53, "seed")
        eq((s["temperature"], s["top_p"], s["top_k"], s["min_p"]), (2, 1, 1000000, 0), "sampling edges")
        await c.close()


async def test_session_update():
    async with server() as srv:
        c = await Conn.open(srv)
        created = (await c.create_session({"instructions": "A", "temperature": 0.7, "top_p": 0.95, "top_k": 40,
                                           "min_p": 0.05, "seed": 42, "stop": ["\nUser:"]}))["session"]
        await c.send({"type": "session.update", "event_id": "c2", "session": {"temperature": 0, "stop": []}})
        ev = await c.expect("session.updated")
        eq(ev["sequence_number"], 2, "session.updated's sequence_number")
        want = dict(created, temperature=0, stop=[])
        eq(ev["session"], want, "settings after the update (absent fields kept)")
        # null = absent: nothing changes; an empty object changes nothing either
        ev = await c.update({"temperature": None, "seed": None, "instructions": None})
        eq(ev["session"], want, "null fields leave the settings as they are")
        ev = await c.update({})
        eq(ev["session"], want, "an empty update")
        # every field at once
        new = {"instructions": "B is new", "temperature": 1.5, "top_p": 0.5, "top_k": 7, "min_p": 0.25, "seed": 7,
               "max_output_tokens": 3, "stop": ["x", "yy"]}
        ev = await c.update(new)
        eq(ev["session"], dict(created, **new), "every field updated")
        eq(ev["session"]["id"], created["id"], "the id does not change")
        # the new max_output_tokens and temperature apply to the next response
        await c.add_user("hello")
        await c.update({"temperature": 0, "stop": []})
        _, _, done = await c.respond()
        check(done["usage"]["output_tokens"] <= 3, f"session max_output_tokens 3 applies: {done['usage']}")
        await c.close()


# ---------------------------------------------------------------- items


async def test_conversation_items():
    async with server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0})
        items = [
            {"type": "message", "role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "héllo ✓ 😀"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                             {"type": "text", "text": ""},
                                                             {"type": "output_text", "text": "c"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "{\"temp_c\":18}"},
        ]
        ids = []
        for n, it in enumerate(items):
            sent = dict(it, id="client-chosen-id")  # ignored by the server
            await c.send({"type": "conversation.item.create", "event_id": f"i{n}", "item": sent})
            ev = await c.expect("conversation.item.added")
            eq(list(ev.keys()), ["type", "event_id", "sequence_number", "item"], "item.added's fields")
            got = dict(ev["item"])
            iid = got.pop("id")
            check(iid.startswith("item_") and iid != "client-chosen-id", f"server-made item id {iid}")
            eq(got, it, f"item {n} echoed as sent")
            ids.append(iid)
        eq(len(set(ids)), len(ids), "item ids are unique")
        # the conversation is usable: a response over all of it
        events, text, done = await c.respond({"max_output_tokens": 4})
        check(done["status"] in ("completed", "incomplete"), f"status {done['status']}")
        check(done["output"][0]["id"] not in ids, "the assistant item has a new id")
        await c.close()


async def test_function_call_turn():
    """The documented tool-calling turn: a response, the client records the call and its
    output, and a second response runs over them; sequence numbers as in the docs' example."""
    async with server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"instructions": "You can call get_weather.", "temperature": 0})
        ev = await c.add_user("weather in Paris?")
        eq(ev["sequence_number"], 2, "item.added seq")
        events, _, done1 = await c.respond({"max_output_tokens": 6})
        eq(events[0]["sequence_number"], 3, "response.created seq")
        ev = await c.add_item({"type": "function_call", "call_id": "call_1", "name": "get_weather",
                               "arguments": "{\"city\":\"Paris\"}"})
        eq(ev["sequence_number"], events[-1]["sequence_number"] + 1, "function_call item seq")
        await c.add_item({"type": "function_call_output", "call_id": "call_1", "output": "{\"temp_c\":18}"})
        _, _, done2 = await c.respond({"max_output_tokens": 6})
        u1, u2 = done1["usage"], done2["usage"]
        check(u2["input_tokens"] > u1["total_tokens"], f"the tool items are input of the 2nd response: {u1} {u2}")
        eq(u2["input_token_details"]["cached_tokens"], u1["total_tokens"] - 1, "cached tokens of the 2nd response")
        await c.close()


# ---------------------------------------------------------------- responses


async def test_response_events():
    async with server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0})
        await c.add_user("Hello there")
        events, text, done = await c.respond({"max_output_tokens": 12}, event_id="r1")
        eq(events[0]["sequence_number"], 3, "response.created follows item.added")
        check(done["id"].startswith("resp_"), "response id")
        deltas = [e for e in events if e["type"] == "response.output_text.delta"]
        check(deltas, "at least one delta")
        u = done["usage"]
        eq(u["input_token_details"]["cached_tokens"], 0, "the first response has nothing cached")
        check(1 <= u["output_tokens"] <= 12, f"output_tokens {u}")
        if done["status"] == "incomplete":
            eq(done["status_details"], {"type": "incomplete", "reason": "max_output_tokens"}, "status_details")
            eq(u["output_tokens"], 12, "an incomplete response used all its tokens")
        else:
            eq(done["status"], "completed", "status")
        eq(len(done["output"]), 1, "one output item")
        eq(list(done["output"][0].keys()), ["id", "type", "role", "content"], "output item fields")
        # a second response ids: new response and item ids
        _, _, done2 = await c.respond({"max_output_tokens": 2})
        check(done2["id"] != done["id"], "a new response id")
        check(done2["output"][0]["id"] != done["output"][0]["id"], "a new item id")
        await c.close()


async def test_response_announces_assistant_item():
    """docs: response.create is answered by response.created, conversation.item.added (the
    assistant message, empty), the deltas, then response.done; the deltas and the output
    item carry that item's id."""
    async with server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0})
        await c.add_user("Hello there")
        events, text, done = await c.respond({"max_output_tokens": 4})
        types = [e["type"] for e in events]
        check(len(events) >= 2 and types[1] == "conversation.item.added",
              f"the second event of a response must be the assistant's conversation.item.added; got {types}")
        item = events[1]["item"]
        eq(item, {"id": done["output"][0]["id"], "type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": ""}]}, "the announced assistant item")
        await c.close()


async def test_generate_false():
    async with server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0})
        await c.add_user("Warm the cache with this.")
        await c.send({"type": "response.create", "event_id": "g1", "response": {"generate": False}})
        events = await c.recv_until("response.done")
        eq([e["type"] for e in events], ["response.created", "response.done"], "a prefill-only response's events")
        check_response_events(events, generate=False)
        r = events[-1]["response"]
        eq(r["status"], "completed", "status")
        eq(r["status_details"], None, "status_details")
        eq(r["output"], [], "output of generate:false")
        u = r["usage"]
        eq(u["output_tokens"], 0, "output_tokens")
        eq(u["input_token_details"]["cached_tokens"], 0, "cached_tokens of the first prefill")
        check(u["input_tokens"] > 0, "input_tokens")
        # the next response finds all of it cached
        _, _, done = await c.respond({"max_output_tokens": 3})
        eq(done["usage"]["input_token_details"]["cached_tokens"], u["input_tokens"],
           "after generate:false the history is cached")
        # a prefill with nothing new: still completed, nothing to compute
        await c.add_user("more")
        _, _, d2 = await c.respond({"generate": False})
        eq(d2["usage"]["output_tokens"], 0, "second prefill output_tokens")
        eq(d2["usage"]["input_token_details"]["cached_tokens"], done["usage"]["total_tokens"] - 1,
           "the prefill's cached tokens: everything but the last sampled token")
        await c.close()


async def test_response_overrides():
    async with server() as srv:
        prompt = [user_item("Tell me a long story about the sea.")]
        greedy, gdone = await greedy_run(srv, prompt, {"max_output_tokens": 40})
        check(len(greedy) > 8, f"greedy text too short to test with: {greedy!r}")
        c = await Conn.open(srv)
        # session: random sampling, 7 tokens; overrides make one response greedy and longer
        await c.create_session({"temperature": 1.0, "max_output_tokens": 7})
        await c.add_item(prompt[0])
        _, text, done = await c.respond({"temperature": 0, "max_output_tokens": 40})
        eq(text, greedy, "temperature 0 + max_output_tokens 40 as overrides == a greedy session")
        # the overrides were for that response only: back to the session's 7 tokens
        _, _, d2 = await c.respond()
        check(d2["usage"]["output_tokens"] <= 7, f"session max_output_tokens after an override: {d2['usage']}")
        await c.close()

        # each sampling filter at its most selective is greedy
        for name, over in [("top_k", {"top_k": 1}), ("top_p", {"top_p": 1e-9}), ("min_p", {"min_p": 0.999999})]:
            c = await Conn.open(srv)
            await c.create_session({"temperature": 1.0, "seed": 5})
            await c.add_item(prompt[0])
            _, text, _ = await c.respond(dict(over, max_output_tokens=40))
            eq(text, greedy, f"{name} override at its most selective == greedy")
            await c.close()

        # seeds: the same seed gives the same text; the override wins over the session's
        async def seeded(session_seed, response=None):
            c = await Conn.open(srv)
            await c.create_session({"temperature": 1.0, "seed": session_seed, "max_output_tokens": 24})
            await c.add_item(prompt[0])
            _, t, _ = await c.respond(response)
            await c.close()
            return t
        a = await seeded(42)
        eq(await seeded(42), a, "same seed, same text")
        b = await seeded(43)
        check(b != a, "another seed gives another text (24 sampled tokens)")
        eq(await seeded(43, {"seed": 42}), a, "a response's seed overrides the session's")

        # stop: generation ends before the stop string, which is not sent
        k = next((i for i in range(4, len(greedy) - 3)
                  if all(32 <= ord(ch) < 127 for ch in greedy[i - 1:i + 3]) and greedy.find(greedy[i:i + 3]) == i),
                 None)
        check(k is not None, f"no ASCII stop string to cut this text with: {greedy!r}")
        stop = greedy[k:k + 3]
        text, done = await greedy_run(srv, prompt, {"max_output_tokens": 40, "stop": [stop]})
        eq(text, greedy[:k], f"text with the response stop {stop!r}")
        eq(done["status"], "completed", "a stop string completes the response")
        text, done = await greedy_run(srv, prompt, {"max_output_tokens": 40}, session={"stop": stop})
        eq(text, greedy[:k], f"text with the session stop {stop!r}")
        # a response's stop list replaces the session's
        text, done = await greedy_run(srv, prompt, {"max_output_tokens": 40, "stop": []}, session={"stop": stop})
        eq(text, greedy, "\"stop\": [] in response.create clears the session's stop strings for that response")


async def test_max_output_tokens_beyond_context():
    """docs: max_output_tokens is [1, 32768] or "inf" (= 32768) whatever the model; a response
    that reaches the context window ends incomplete (context_length). The tiny model's context
    is 4096 tokens: "inf" and 5000 must start a response, not fail."""
    async with server() as srv:
        for value in ("inf", 5000):
            c = await Conn.open(srv)
            await c.create_session({"temperature": 0, "max_output_tokens": value})
            await c.add_user("hello")
            await c.send({"type": "response.create", "event_id": "big"})
            ev = await c.recv()
            eq(ev["type"], "response.created", f"response.create with max_output_tokens {value!r} answered by")
            await c.send({"type": "response.cancel"})
            await c.recv_until("response.done")
            await c.close()


async def test_response_cancel():
    async with server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0})
        await c.add_user("Talk for a long time.")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 3000}})
        created = await c.expect("response.created")
        rid = created["response"]["id"]
        events = [created]
        while True:
            ev = await c.recv()
            events.append(ev)
            if ev["type"] == "response.output_text.delta":
                break
        await c.send({"type": "response.cancel", "event_id": "x1", "response_id": rid})
        events += await c.recv_until("response.done")
        check_response_events(events)
        r = events[-1]["response"]
        eq(r["status"], "cancelled", "status after response.cancel")
        eq(r["status_details"], {"type": "cancelled", "reason": "client_cancelled"}, "status_details")
        u = r["usage"]
        check(1 <= u["output_tokens"] < 3000, f"a cancelled response stops early: {u}")
        eq(len(r["output"]), 1, "the text generated so far is the output")
        # the text so far stays in the conversation; the session goes on
        await c.add_user("and now?")
        _, _, d2 = await c.respond({"max_output_tokens": 3})
        eq(d2["usage"]["input_token_details"]["cached_tokens"], u["total_tokens"] - 1,
           "the cancelled text is part of the cached history")
        eq(d2["status"], "incomplete", "the next response runs")
        # without response_id: the one in progress
        await c.send({"type": "response.create", "response": {"max_output_tokens": 3000}})
        await c.expect("response.created")
        await c.send({"type": "response.cancel"})
        done = (await c.recv_until("response.done"))[-1]
        eq(done["response"]["status"], "cancelled", "cancel without response_id")
        await c.close()


async def test_session_close_and_new_session():
    async with server() as srv:
        c = await Conn.open(srv)
        sid = (await c.create_session())["session"]["id"]
        await c.add_user("hi")
        await c.send({"type": "session.close", "event_id": "c9"})
        ev = await c.expect("session.closed")
        eq(ev["sequence_number"], 3, "session.closed takes the session's next number")
        eq(ev["session_id"], sid, "session_id")
        eq(ev["reason"], "client_requested", "reason")
        # no session now: events are no_session (sequence number 0)
        await c.send({"type": "conversation.item.create", "event_id": "after", "item": user_item("x")})
        await c.expect_error("no_session", event_id="after", seq=0)
        await c.send({"type": "session.close"})
        await c.expect_error("no_session", seq=0)
        # the connection can create a new session, numbered from 1 again
        ev = await c.create_session({"temperature": 0})
        check(ev["session"]["id"] != sid, "a new session id")
        await c.add_user("hi again")
        _, _, done = await c.respond({"max_output_tokens": 2})
        eq(done["usage"]["input_token_details"]["cached_tokens"], 0, "the new session starts empty")
        await c.close()
        # the closed session is gone for good
        c2 = await Conn.open(srv)
        await c2.send({"type": "session.resume", "session_id": sid, "last_sequence_number": 0})
        await c2.expect_error("session_not_found", param="session_id", seq=0)
        await c2.close()


async def test_session_close_during_response():
    async with server() as srv:
        c = await Conn.open(srv)
        sid = (await c.create_session({"temperature": 0}))["session"]["id"]
        await c.add_user("Talk for a long time.")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 3000}})
        events = [await c.expect("response.created")]
        while events[-1]["type"] != "response.output_text.delta":
            events.append(await c.recv())
        await c.send({"type": "session.close"})
        rest = await c.recv_until("session.closed")
        done = rest[-2]
        eq(done["type"], "response.done", f"response.done comes right before session.closed: {[e['type'] for e in rest]}")
        check_response_events(events + rest[:-1])
        eq(done["response"]["status"], "cancelled", "status")
        eq(done["response"]["status_details"], {"type": "cancelled", "reason": "session_closed"}, "status_details")
        eq(rest[-1]["session_id"], sid, "session.closed's id")
        # nothing more of that session arrives
        await c.no_event(0.5)
        await c.create_session()
        await c.close()


async def test_multi_turn_cached_tokens():
    """Turns 2 and 3 find the whole history in the KV cache.

    Token counts of the parts come from a probe session of generate:false responses:
    H (the head: BOS + instructions), |U1|, |U2|, |U3| (the items) and |R| (the reply marker).
    The server's rule (engine_serve.c start_response/finish): the last token sampled in a
    turn is not evaluated until the next turn, so
      cached_k = input_{k-1} + output_{k-1} - 1  and  input_k - cached_k = 1 + |U_k| + |R|.
    """
    async with server() as srv:
        instr = "You answer in one line."
        turns = ["What is the capital of France?", "And of Italy?", "Which one is bigger?"]
        # the probe
        p = await Conn.open(srv)
        await p.create_session({"instructions": instr, "temperature": 0})
        _, _, d = await p.respond({"generate": False})
        head = d["usage"]["input_tokens"]
        sizes, total = [], head
        for t in turns:
            await p.add_user(t)
            _, _, d = await p.respond({"generate": False})
            eq(d["usage"]["input_token_details"]["cached_tokens"], total, "a prefill's cached tokens")
            sizes.append(d["usage"]["input_tokens"] - total)
            total = d["usage"]["input_tokens"]
        _, _, d = await p.respond({"max_output_tokens": 1})
        reply = d["usage"]["input_tokens"] - d["usage"]["input_token_details"]["cached_tokens"]
        await p.close()
        log(f"    head {head}, items {sizes}, reply marker {reply}")

        c = await Conn.open(srv)
        await c.create_session({"instructions": instr, "temperature": 0})
        prev = None
        for k, t in enumerate(turns):
            await c.add_user(t)
            _, text, done = await c.respond({"max_output_tokens": 8})
            u = done["usage"]
            cached = u["input_token_details"]["cached_tokens"]
            log(f"    turn {k + 1}: input {u['input_tokens']} cached {cached} output {u['output_tokens']}")
            if prev is None:
                eq(cached, 0, "turn 1 cached_tokens")
                eq(u["input_tokens"], head + sizes[0] + reply, "turn 1 input_tokens")
            else:
                history = prev["input_tokens"] + prev["output_tokens"]
                eq(u["input_tokens"], history + sizes[k] + reply, f"turn {k + 1} input_tokens = history + new")
                eq(cached, history - 1, f"turn {k + 1} cached_tokens = the whole history but the last sampled token")
                eq(u["input_tokens"] - cached, 1 + sizes[k] + reply, f"turn {k + 1} uncached = the new tokens only")
            prev = u
        await c.close()


async def test_fork():
    async with server() as srv:
        a = await Conn.open(srv)
        src = (await a.create_session({"instructions": "Fork me.", "temperature": 0, "stop": ["zz"], "seed": 3}))["session"]
        await a.add_user("first question")
        _, _, d1 = await a.respond({"max_output_tokens": 6})
        b = await Conn.open(srv)
        ev = await b.create_session({"fork_from": src["id"], "max_output_tokens": 9})
        f = ev["session"]
        check(f["id"] != src["id"], "a fork has a new id")
        eq({k: v for k, v in f.items() if k != "id"}, dict({k: v for k, v in src.items() if k != "id"}, max_output_tokens=9),
           "a fork copies the settings, with the given fields on top")
        # the same next turn in both: the same greedy text
        await a.add_user("second question")
        await b.add_user("second question")
        _, ta, da = await a.respond({"max_output_tokens": 8})
        _, tb, db = await b.respond({"max_output_tokens": 8})
        eq(tb, ta, "the fork continues exactly like its source")
        eq(db["usage"]["input_tokens"], da["usage"]["input_tokens"], "the fork's input_tokens")
        # docs (Forks) say the fork shares the source's KV pages copy-on-write; the engine has no
        # prefix sharing yet (kv_store.h), so the fork prefills its history again: logged, not asserted
        log(f"    fork's first response: cached_tokens {db['usage']['input_token_details']['cached_tokens']} "
            f"(source: {da['usage']['input_token_details']['cached_tokens']})")
        # the source is unchanged by the fork's turn
        await a.add_user("third")
        _, _, da3 = await a.respond({"max_output_tokens": 2})
        eq(da3["usage"]["input_token_details"]["cached_tokens"], da["usage"]["total_tokens"] - 1, "source history")
        # fork of an unknown id
        c = await Conn.open(srv)
        await c.send({"type": "session.create", "event_id": "f1", "session": {"fork_from": "sess_nope"}})
        await c.expect_error("session_not_found", param="session.fork_from", event_id="f1", seq=0)
        await c.close()
        await a.close()
        await b.close()


async def test_item_during_response():
    """docs (Sessions): conversation.item.create is accepted while a response runs, and the
    item goes after the in-progress response's output and is input of the next response.
    Checked against a session that adds the same item after the response ended, and
    through a fork (which copies the gateway's token list of the conversation)."""
    async with server() as srv:
        q1, q2, q3 = user_item("Tell me about ships."), user_item("Now about trains."), user_item("Planes?")
        long = {"max_output_tokens": 60}
        # reference: the item added after the response
        r = await Conn.open(srv)
        await r.create_session({"temperature": 0})
        await r.add_item(q1)
        _, ref1, _ = await r.respond(long)
        await r.add_item(q2)
        _, ref2, rd2 = await r.respond({"max_output_tokens": 10})
        # the same, with q2 sent while the first response runs
        c = await Conn.open(srv)
        sid = (await c.create_session({"temperature": 0}))["session"]["id"]
        await c.add_item(q1)
        await c.send({"type": "response.create", "response": long})
        events = [await c.expect("response.created")]
        while events[-1]["type"] != "response.output_text.delta":
            events.append(await c.recv())
        await c.send({"type": "conversation.item.create", "item": q2})
        events += await c.recv_until("response.done")
        check_response_events(events)
        added = [e for e in events if e["type"] == "conversation.item.added" and e["item"].get("role") == "user"]
        eq(len(added), 1, "the item is added during the response")
        eq(delta_text(events), ref1, "the running response is not affected by the new item")
        _, t2, d2 = await c.respond({"max_output_tokens": 10})
        eq(d2["usage"]["input_tokens"], rd2["usage"]["input_tokens"], "input_tokens of the next response")
        eq(t2, ref2, "the next response sees the item after the first reply")
        # a fork of each: the same conversation, so the same continuation
        fr, fc = await Conn.open(srv), await Conn.open(srv)
        await fr.create_session({"fork_from": r.session_id})
        await fc.create_session({"fork_from": sid})
        await fr.add_item(q3)
        await fc.add_item(q3)
        _, tr, _ = await fr.respond({"max_output_tokens": 10})
        _, tc, _ = await fc.respond({"max_output_tokens": 10})
        eq(tc, tr, "a fork of the session that got the item mid-response continues like the reference's fork")
        for x in (r, c, fr, fc):
            await x.close()


async def test_instructions_change_reprefills():
    async with server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"instructions": "Old instructions.", "temperature": 0})
        await c.add_user("hello")
        _, _, d1 = await c.respond({"max_output_tokens": 4})
        ev = await c.update({"instructions": "New, longer instructions for the model."})
        eq(ev["session"]["instructions"], "New, longer instructions for the model.", "updated instructions")
        await c.add_user("again")
        _, _, d2 = await c.respond({"max_output_tokens": 4})
        eq(d2["usage"]["input_token_details"]["cached_tokens"], 0, "new instructions: the whole conversation is prefilled again")
        check(d2["usage"]["input_tokens"] > d1["usage"]["total_tokens"], f"the rebuilt context holds the history: {d2['usage']}")
        # and the next turn is cached again
        await c.add_user("third")
        _, _, d3 = await c.respond({"max_output_tokens": 2})
        eq(d3["usage"]["input_token_details"]["cached_tokens"], d2["usage"]["total_tokens"] - 1, "cached after a rebuild")
        await c.close()


if __name__ == "__main__":
    run_tests(globals())
