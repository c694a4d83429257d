#!/usr/bin/python3
"""Every error code the server sends today, each over a real connection, with its type,
param, event_id echo and sequence number (docs/protocol.md "Errors"); after each error the
connection, and the session when one is attached, still work (the next valid event is
answered, with the next sequence number).

Codes: invalid_json, invalid_utf8 (bytes built by hand in a TEXT frame, through the
websockets connection and through a raw socket), binary_not_supported, frame_too_large,
invalid_event, unknown_event_type, missing_field, invalid_type, invalid_value, no_session,
session_exists, session_not_found, sequence_expired, response_in_progress,
no_response_in_progress, too_many_sessions, rate_limited (retry_after), context_length_exceeded,
kv_unavailable (as a failed response.done). shutting_down is in test_shutdown.py.

Not sent by this server, so not tested here: the reserved quota codes rate_limit_exceeded,
insufficient_quota and quota_unavailable (no quota store yet); kv_unavailable as an `error`
event (the server reports it only in a failed response.done); internal_error (no way to make
the server fail on purpose from a client).
"""
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Conn, RawWS, Server, check, check_error, eq, log, run_tests,  # noqa: E402
                     user_item)

FRAME = 4096          # limits.max_frame_bytes
INSTR = 1024          # sessions.max_instructions_bytes
RESUME_BUF = 16       # sessions.resume_buffer_events (the minimum)
PER_TENANT = 3        # sessions.max_per_tenant


def server(**kw):
    cfg = {"limits": {"max_frame_bytes": FRAME},
           "sessions": {"max_instructions_bytes": INSTR, "resume_buffer_events": RESUME_BUF,
                        "max_per_tenant": PER_TENANT, "default_max_output_tokens": 16}}
    for k, v in kw.items():
        cfg[k] = dict(cfg.get(k, {}), **v)
    return Server(**cfg)


async def alive(c):
    """The connection and its session still work: the next event is answered in order."""
    before = c.last_seq
    await c.send({"type": "session.update", "event_id": "alive", "session": {}})
    ev = await c.expect("session.updated")
    eq(ev["sequence_number"], before + 1, "the session's numbering goes on after the error")


async def with_session(srv, **settings):
    c = await Conn.open(srv)
    await c.create_session(settings or None)
    return c


async def expect_err(c, msg, code, param=None, event_id=None, attached=True):
    """Sends msg (object, text or bytes), expects the error, then checks the session is alive."""
    await c.send(msg)
    want_seq = c.last_seq + 1 if attached else 0
    ev = await c.expect_error(code, param, event_id, seq=want_seq)
    if attached:
        await alive(c)
    return ev


# ---------------------------------------------------------------- message-level


async def test_invalid_json():
    async with server() as srv:
        c = await with_session(srv)
        for msg in ['{"type":', "", "{} {}", '{"type":"session.update","session":{},"session":{}}',
                    '{"event_id":"dup","type":"session.update","type":"session.update"}',
                    "[" * 33 + "]" * 33, '{"type":"session.update","session":{"temperature":1e400}}',
                    '{"type":"response.create","response":{"seed":99999999999999999999}}', "{'single': 1}",
                    '{"type":"session.update","session":{"x":' + "[" * 32 + "]" * 32 + "}}"]:
            await expect_err(c, msg, "invalid_json")
        # nesting of exactly 32 is allowed
        msg = '{"type":"session.update","session":{},"x":' + "[" * 31 + "]" * 31 + "}"
        await c.send(msg)
        await c.expect("session.updated")
        await c.close()
        # before a session: sequence number 0, and the connection goes on
        c = await Conn.open(srv)
        await expect_err(c, "nope", "invalid_json", attached=False)
        await c.create_session()
        await c.close()


INVALID_UTF8 = [
    b'{"type":"session.update","session":{"instructions":"\xff"}}',          # never valid
    b'{"type":"session.update","session":{"instructions":"\xc0\xaf"}}',      # overlong '/'
    b'{"type":"session.update","session":{"instructions":"\xed\xa0\x80"}}',  # surrogate U+D800
    b'{"type":"session.update","session":{"instructions":"\xf4\x90\x80\x80"}}',  # above U+10FFFF
    b'{"type":"session.update","session":{"instructions":"\xe2\x82"}}',      # missing continuation
    b'{"type":"session.update","event_id":"u8","session":{}}\x80',           # stray continuation at the end
]


async def test_invalid_utf8():
    async with server() as srv:
        c = await with_session(srv)
        for raw in INVALID_UTF8:
            await c.send_raw_frame(0x1, raw)  # a TEXT frame that websockets itself would refuse to send
            ev = await c.expect_error("invalid_utf8", seq=c.last_seq + 1)
            await alive(c)
        # a message in fragments: a character split across two frames is fine...
        text = '{"type":"session.update","session":{"instructions":"é✓"}}'.encode()
        cut = text.index("✓".encode()) + 1
        await c.send_raw_frame(0x1, text[:cut], fin=False)
        await c.send_raw_frame(0x0, text[cut:], fin=True)
        ev = await c.expect("session.updated")
        eq(ev["session"]["instructions"], "é✓", "instructions from a fragmented message")
        # ...and one bad byte in the second fragment makes the whole message invalid_utf8
        await c.send_raw_frame(0x1, text[:cut], fin=False)
        await c.send_raw_frame(0x0, b"\xff" + text[cut:], fin=True)
        await c.expect_error("invalid_utf8", seq=c.last_seq + 1)
        await alive(c)
        await c.close()


def test_invalid_utf8_raw_socket():
    """The same over a plain socket with frames built by the harness (no websockets library)."""
    async def go():
        async with server() as srv:
            r = RawWS(srv.port)
            eq(r.status, 101, "handshake")
            r.send_json({"type": "session.create", "event_id": "c1"})
            eq(r.recv_event()["type"], "session.created", "session.create over a raw socket")
            r.send_text(b'{"type":"conversation.item.create","event_id":"x","item":' +
                        b'{"type":"message","role":"user","content":[{"type":"text","text":"\xfe\xfe"}]}}')
            ev = r.recv_event()
            check_error(ev, "invalid_utf8", None, None, seq=2)
            r.send_json({"type": "conversation.item.create", "item": user_item("fine")})
            ev = r.recv_event()
            eq((ev["type"], ev["sequence_number"]), ("conversation.item.added", 3), "the session goes on")
            r.send_frame(0x8, b"\x03\xe8")
            r.close()
    asyncio.run(go())


async def test_binary_not_supported():
    async with server() as srv:
        c = await with_session(srv)
        await expect_err(c, b'{"type":"session.update","event_id":"b1","session":{}}', "binary_not_supported")
        await expect_err(c, b"\x00\x01\x02", "binary_not_supported")
        await c.close()
        c = await Conn.open(srv)
        await expect_err(c, b"{}", "binary_not_supported", attached=False)
        await c.close()


async def test_frame_too_large():
    async with server() as srv:
        c = await with_session(srv)
        big = json.dumps({"type": "session.update", "event_id": "big", "session": {}, "pad": "x" * FRAME})
        await expect_err(c, big, "frame_too_large")
        # the limit is on the message, all its frames together
        await c.send_raw_frame(0x1, big[:2000].encode(), fin=False)
        await c.send_raw_frame(0x0, big[2000:4000].encode(), fin=False)
        await c.send_raw_frame(0x0, big[4000:].encode(), fin=True)
        await c.expect_error("frame_too_large", seq=c.last_seq + 1)
        await alive(c)
        # a message of exactly the limit is read
        base = json.dumps({"type": "session.update", "session": {}, "pad": ""})
        exact = base[:-2] + "x" * (FRAME - len(base)) + '"}'
        eq(len(exact.encode()), FRAME, "message size")
        await c.send(exact)
        await c.expect("session.updated")
        await c.close()


async def test_invalid_event():
    async with server() as srv:
        c = await with_session(srv)
        for msg in ["[1,2]", '"session.create"', "42", "null", "true"]:
            await expect_err(c, msg, "invalid_event", None)
        await expect_err(c, {"event_id": "e1"}, "invalid_event", "type", "e1")
        await expect_err(c, {"type": 5, "event_id": "e2"}, "invalid_event", "type", "e2")
        await expect_err(c, {"type": None, "event_id": "e3"}, "invalid_event", "type", "e3")
        await expect_err(c, {"type": ["session.update"]}, "invalid_event", "type")
        await c.close()


async def test_event_id_checks():
    """event_id: a string (invalid_type) of at most 64 bytes without U+0000 (invalid_value);
    a valid one is echoed in every error from then on."""
    async with server() as srv:
        c = await with_session(srv)
        await expect_err(c, {"type": "session.update", "event_id": 5, "session": {}}, "invalid_type", "event_id")
        await expect_err(c, {"type": "session.update", "event_id": "x" * 65, "session": {}}, "invalid_value", "event_id")
        await expect_err(c, {"type": "session.update", "event_id": "a\u0000b", "session": {}}, "invalid_value", "event_id")
        eid = "é" * 32  # 64 bytes
        await expect_err(c, {"type": "session.update", "event_id": eid}, "missing_field", "session", eid)
        await c.close()


async def test_unknown_event_type():
    async with server() as srv:
        c = await with_session(srv)
        for t in ["response.delete", "session.created", "SESSION.CREATE", "", "input_audio_buffer.append"]:
            await expect_err(c, {"type": t, "event_id": "u1"}, "unknown_event_type", "type", "u1")
        await c.close()


# ---------------------------------------------------------------- schema


MISSING = [
    ({"type": "session.update"}, "session"),
    ({"type": "session.update", "session": None}, "session"),
    ({"type": "conversation.item.create"}, "item"),
    ({"type": "conversation.item.create", "item": {}}, "item.type"),
    ({"type": "conversation.item.create", "item": {"type": "message", "content": [{"type": "text", "text": "a"}]}},
     "item.role"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "user"}}, "item.content"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                   "content": [{"type": "text", "text": "a"}, {"type": "text"}]}},
     "item.content[1].text"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"text": "a"}]}},
     "item.content[0].type"),
    ({"type": "conversation.item.create", "item": {"type": "function_call", "name": "f", "arguments": "{}"}},
     "item.call_id"),
    ({"type": "conversation.item.create", "item": {"type": "function_call", "call_id": "c", "arguments": "{}"}},
     "item.name"),
    ({"type": "conversation.item.create", "item": {"type": "function_call", "call_id": "c", "name": "f"}},
     "item.arguments"),
    ({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "c"}}, "item.output"),
    ({"type": "conversation.item.create", "item": {"type": "function_call_output", "output": "o"}}, "item.call_id"),
]


async def test_missing_field():
    async with server() as srv:
        c = await with_session(srv)
        for n, (msg, param) in enumerate(MISSING):
            await expect_err(c, dict(msg, event_id=f"m{n}"), "missing_field", param, f"m{n}")
        await c.close()
        # session.resume's fields, on a connection without a session
        c = await Conn.open(srv)
        await expect_err(c, {"type": "session.resume", "event_id": "r", "last_sequence_number": 0}, "missing_field",
                         "session_id", "r", attached=False)
        await expect_err(c, {"type": "session.resume", "event_id": "r", "session_id": "sess_x"}, "missing_field",
                         "last_sequence_number", "r", attached=False)
        await c.close()


INVALID_TYPE = [
    ({"type": "session.update", "session": []}, "session"),
    ({"type": "session.update", "session": {"temperature": "hot"}}, "session.temperature"),
    ({"type": "session.update", "session": {"top_k": 1.5}}, "session.top_k"),
    ({"type": "session.update", "session": {"top_k": "5"}}, "session.top_k"),
    ({"type": "session.update", "session": {"seed": True}}, "session.seed"),
    ({"type": "session.update", "session": {"instructions": 5}}, "session.instructions"),
    ({"type": "session.update", "session": {"stop": [1]}}, "session.stop[0]"),
    ({"type": "session.update", "session": {"stop": {"a": 1}}}, "session.stop"),
    ({"type": "conversation.item.create", "item": "hi"}, "item"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": "hi"}},
     "item.content"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                   "content": [{"type": "text", "text": 5}]}}, "item.content[0].text"),
    ({"type": "conversation.item.create", "item": {"type": "function_call", "call_id": "c", "name": "f",
                                                   "arguments": {"a": 1}}}, "item.arguments"),
    ({"type": "response.create", "response": "x"}, "response"),
    ({"type": "response.create", "response": {"generate": "no"}}, "response.generate"),
    ({"type": "response.create", "response": {"max_output_tokens": 2.5}}, "response.max_output_tokens"),
    ({"type": "response.cancel", "response_id": 7}, "response_id"),
]


async def test_invalid_type():
    async with server() as srv:
        c = await with_session(srv)
        for n, (msg, param) in enumerate(INVALID_TYPE):
            await expect_err(c, dict(msg, event_id=f"t{n}"), "invalid_type", param, f"t{n}")
        # an integral real is an integer
        await c.send({"type": "session.update", "session": {"top_k": 5.0}})
        eq((await c.expect("session.updated"))["session"]["top_k"], 5, "top_k 5.0")
        await c.close()
        c = await Conn.open(srv)
        await expect_err(c, {"type": "session.resume", "session_id": 5, "last_sequence_number": 0}, "invalid_type",
                         "session_id", attached=False)
        await expect_err(c, {"type": "session.resume", "session_id": "s", "last_sequence_number": "1"},
                         "invalid_type", "last_sequence_number", attached=False)
        await expect_err(c, {"type": "session.resume", "session_id": "s", "last_sequence_number": 0,
                             "allow_gap": "yes"}, "invalid_type", "allow_gap", attached=False)
        await c.close()


def _item(**kw):
    return {"type": "conversation.item.create", "item": dict({"type": "message", "role": "user"}, **kw)}


INVALID_VALUE = [
    ({"type": "session.update", "session": {"temperature": 3}}, "session.temperature"),
    ({"type": "session.update", "session": {"temperature": -0.1}}, "session.temperature"),
    ({"type": "session.update", "session": {"top_p": 0}}, "session.top_p"),
    ({"type": "session.update", "session": {"top_p": 1.01}}, "session.top_p"),
    ({"type": "session.update", "session": {"min_p": 1}}, "session.min_p"),
    ({"type": "session.update", "session": {"top_k": 1000001}}, "session.top_k"),
    ({"type": "session.update", "session": {"top_k": -1}}, "session.top_k"),
    ({"type": "session.update", "session": {"seed": -1}}, "session.seed"),
    ({"type": "session.update", "session": {"seed": 2 ** 53 + 2}}, "session.seed"),
    ({"type": "session.update", "session": {"max_output_tokens": 0}}, "session.max_output_tokens"),
    ({"type": "session.update", "session": {"max_output_tokens": 32769}}, "session.max_output_tokens"),
    ({"type": "session.update", "session": {"max_output_tokens": "lots"}}, "session.max_output_tokens"),
    ({"type": "session.update", "session": {"stop": ["a", "b", "c", "d", "e"]}}, "session.stop"),
    ({"type": "session.update", "session": {"stop": ["ok", ""]}}, "session.stop[1]"),
    ({"type": "session.update", "session": {"stop": ["x" * 65]}}, "session.stop[0]"),
    ({"type": "session.update", "session": {"instructions": "a\u0000b"}}, "session.instructions"),
    ({"type": "session.update", "session": {"instructions": "i" * (INSTR + 1)}}, "session.instructions"),
    ({"type": "session.update", "session": {"fork_from": "sess_x"}}, "session.fork_from"),
    (_item(role="robot", content=[{"type": "text", "text": "a"}]), "item.role"),
    ({"type": "conversation.item.create", "item": {"type": "image"}}, "item.type"),
    (_item(content=[]), "item.content"),
    (_item(content=[{"type": "text", "text": "a"}] * 17), "item.content"),
    (_item(content=[{"type": "input_image", "text": "a"}]), "item.content[0].type"),
    (_item(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, {"type": "text", "text": "c\u0000"}]),
     "item.content[2].text"),
    ({"type": "conversation.item.create", "item": {"type": "function_call", "call_id": "c", "name": "bad name!",
                                                   "arguments": "{}"}}, "item.name"),
    ({"type": "conversation.item.create", "item": {"type": "function_call", "call_id": "", "name": "f",
                                                   "arguments": "{}"}}, "item.call_id"),
    ({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "c" * 65,
                                                   "output": "o"}}, "item.call_id"),
    ({"type": "response.create", "response": {"temperature": 2.5}}, "response.temperature"),
    ({"type": "response.create", "response": {"stop": [""]}}, "response.stop[0]"),
    ({"type": "response.create", "response": {"max_output_tokens": 0}}, "response.max_output_tokens"),
    ({"type": "response.cancel", "response_id": ""}, "response_id"),
]


async def test_invalid_value():
    async with server() as srv:
        c = await with_session(srv)
        for n, (msg, param) in enumerate(INVALID_VALUE):
            await expect_err(c, dict(msg, event_id=f"v{n}"), "invalid_value", param, f"v{n}")
        await c.close()
        # instructions too long at create: nothing is created
        c = await Conn.open(srv)
        await expect_err(c, {"type": "session.create", "event_id": "v", "session": {"instructions": "i" * (INSTR + 1)}},
                         "invalid_value", "session.instructions", "v", attached=False)
        await c.create_session({"instructions": "i" * INSTR})
        sid = c.session_id
        await c.close()
        # last_sequence_number newer than the session
        c = await Conn.open(srv)
        await expect_err(c, {"type": "session.resume", "event_id": "v", "session_id": sid, "last_sequence_number": 2},
                         "invalid_value", "last_sequence_number", "v", attached=False)
        await expect_err(c, {"type": "session.resume", "session_id": sid, "last_sequence_number": -1},
                         "invalid_value", "last_sequence_number", attached=False)
        await c.resume(sid, 1)
        await alive(c)
        await c.close()


# ---------------------------------------------------------------- state


async def test_no_session():
    async with server() as srv:
        c = await Conn.open(srv)
        for n, msg in enumerate([{"type": "session.update", "session": {}},
                                 {"type": "conversation.item.create", "item": user_item("x")},
                                 {"type": "response.create"}, {"type": "response.cancel"}, {"type": "session.close"}]):
            await expect_err(c, dict(msg, event_id=f"n{n}"), "no_session", None, f"n{n}", attached=False)
        await c.create_session()
        await alive(c)
        await c.close()


async def test_session_exists():
    async with server() as srv:
        c = await with_session(srv)
        sid = c.session_id
        await expect_err(c, {"type": "session.create", "event_id": "x1"}, "session_exists", None, "x1")
        await expect_err(c, {"type": "session.resume", "event_id": "x2", "session_id": sid, "last_sequence_number": 0},
                         "session_exists", None, "x2")
        other = await with_session(srv)
        await expect_err(c, {"type": "session.resume", "session_id": other.session_id, "last_sequence_number": 0},
                         "session_exists")
        await alive(other)  # the other session was not taken
        eq(c.session_id, sid, "still the first session")
        await c.close()
        await other.close()


async def test_session_not_found():
    async with server() as srv:
        c = await Conn.open(srv)
        for sid in ["sess_00000000000000000000000000000000", "sess_nope", "x", "s" * 64]:
            await expect_err(c, {"type": "session.resume", "event_id": "nf", "session_id": sid,
                                 "last_sequence_number": 0}, "session_not_found", "session_id", "nf", attached=False)
        await expect_err(c, {"type": "session.create", "event_id": "nf", "session": {"fork_from": "sess_nope"}},
                         "session_not_found", "session.fork_from", "nf", attached=False)
        await c.create_session()
        await alive(c)
        await c.close()


async def test_sequence_expired():
    async with server() as srv:
        c = await with_session(srv)
        sid = c.session_id
        for i in range(20):
            await c.add_user(f"item {i}")
        newest = c.last_seq
        eq(newest, 21, "events so far")
        await c.close()
        oldest = newest - RESUME_BUF + 1  # the buffer keeps the newest 16
        r = await Conn.open(srv)
        for last in (0, oldest - 2):
            await expect_err(r, {"type": "session.resume", "event_id": "se", "session_id": sid,
                                 "last_sequence_number": last}, "sequence_expired", "last_sequence_number", "se",
                             attached=False)
        # the failed resumes attached nothing
        await expect_err(r, {"type": "session.update", "session": {}}, "no_session", attached=False)
        # from the oldest kept event on (test_resume.py resumes from its predecessor)
        replay, resumed = await r.resume(sid, oldest)
        eq([e["sequence_number"] for e in replay], list(range(oldest + 1, newest + 1)), "replayed sequence numbers")
        eq(resumed["sequence_number"], newest + 1, "session.resumed's number")
        await alive(r)
        newest = r.last_seq
        await r.close()
        # allow_gap: attaches anyway, the first replayed number shows the gap
        g = await Conn.open(srv)
        replay, resumed = await g.resume(sid, 0, allow_gap=True, newest=newest)
        check(replay and replay[0]["sequence_number"] > 1, "a gap")
        seqs = [e["sequence_number"] for e in replay]
        eq(seqs, list(range(seqs[0], resumed["sequence_number"])), "contiguous after the gap")
        # (a full buffer less the event that session.resumed pushes out: see test_resume.py
        # test_resume_from_oldest_kept_event for that loss)
        dropped = [l for l in srv.lines if '"event_dropped"' in l]
        check(len(replay) >= RESUME_BUF - 1, f"a full buffer replayed: {seqs}, {dropped}")
        await alive(g)
        await g.close()


async def test_response_in_progress():
    async with server() as srv:
        c = await with_session(srv, temperature=0)
        await c.add_user("talk")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 3000}})
        await c.expect("response.created")
        await c.expect("conversation.item.added")
        await c.send({"type": "response.create", "event_id": "again"})
        while True:
            ev = await c.recv()
            if ev["type"] == "error":
                check_error(ev, "response_in_progress", None, "again")
                break
            eq(ev["type"], "response.output_text.delta", "events before the error")
        # a fork of a session with a response in progress
        f = await Conn.open(srv)
        await expect_err(f, {"type": "session.create", "event_id": "fk", "session": {"fork_from": c.session_id}},
                         "response_in_progress", "session.fork_from", "fk", attached=False)
        await f.create_session()
        await f.close()
        # the response goes on; session.update during it is answered
        await c.send({"type": "session.update", "session": {}})
        await c.recv_until("session.updated")
        await c.send({"type": "response.cancel"})
        done = (await c.recv_until("response.done"))[-1]
        eq(done["response"]["status"], "cancelled", "status")
        await alive(c)
        await c.close()


async def test_no_response_in_progress():
    async with server() as srv:
        c = await with_session(srv, temperature=0)
        await expect_err(c, {"type": "response.cancel", "event_id": "nr"}, "no_response_in_progress", None, "nr")
        await c.add_user("hi")
        _, _, done = await c.respond({"max_output_tokens": 2})
        # after the response ended, cancelling it is no_response_in_progress too
        await expect_err(c, {"type": "response.cancel", "event_id": "nr2"}, "no_response_in_progress", None, "nr2")
        await c.close()


async def test_no_response_in_progress_named():
    """docs: no_response_in_progress, param response_id when it was given: 'there is no
    response in progress, or not the one named'."""
    async with server() as srv:
        c = await with_session(srv, temperature=0)
        await expect_err(c, {"type": "response.cancel", "event_id": "nr", "response_id": "resp_1"},
                         "no_response_in_progress", "response_id", "nr")
        await c.add_user("talk")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 3000}})
        rid = (await c.expect("response.created"))["response"]["id"]
        await c.send({"type": "response.cancel", "event_id": "other", "response_id": "resp_999"})
        while True:
            ev = await c.recv()
            if ev["type"] == "error":
                try:
                    check_error(ev, "no_response_in_progress", "response_id", "other")
                finally:
                    await c.send({"type": "response.cancel", "response_id": rid})
                    await c.recv_until("response.done")
                break
        await alive(c)
        await c.close()


async def test_too_many_sessions():
    async with server() as srv:
        conns = [await with_session(srv) for _ in range(PER_TENANT)]
        extra = await Conn.open(srv)
        await expect_err(extra, {"type": "session.create", "event_id": "tm"}, "too_many_sessions", None, "tm",
                         attached=False)
        # a fork is a session too
        await expect_err(extra, {"type": "session.create", "session": {"fork_from": conns[0].session_id}},
                         "too_many_sessions", attached=False)
        # other tenants have their own count
        b = await Conn.open(srv, tenant="beta")
        await b.create_session()
        # a detached session still counts
        await conns[0].close()
        await asyncio.sleep(0.2)
        await expect_err(extra, {"type": "session.create"}, "too_many_sessions", attached=False)
        # a closed one does not
        await conns[1].send({"type": "session.close"})
        await conns[1].expect("session.closed")
        await extra.create_session()
        await alive(extra)
        for c in conns[1:] + [extra, b]:
            await c.close()


async def test_rate_limited():
    rate, burst = 0.5, 5
    async with server(limits={"messages_per_second": rate, "message_burst": burst}) as srv:
        c = await with_session(srv)  # one message of the burst
        for i in range(burst + 3):
            await c.send({"type": "session.update", "event_id": f"r{i}", "session": {}})
        for i in range(burst - 1):
            await c.expect("session.updated")
        ev = await c.recv()
        check_error(ev, "rate_limited", None, ev["error"]["event_id"], seq=c.last_seq)
        if ev["error"]["event_id"] is None:
            log("    note: rate_limited has error.event_id null (the docs' example echoes the dropped event's id)")
        eq(ev["retry_after"], 2, "retry_after: 1 / messages_per_second, rounded up")
        # the rest were dropped silently (at most one such error per second)
        await c.no_event(1.0)
        await asyncio.sleep(ev["retry_after"])
        await alive(c)
        await c.close()


async def test_context_length_exceeded():
    async with server(model={"max_context": 64}) as srv:
        c = await Conn.open(srv)
        # instructions that do not fit: no session is created
        await expect_err(c, {"type": "session.create", "event_id": "cl", "session": {"instructions": "word " * 60}},
                         "context_length_exceeded", "session.instructions", "cl", attached=False)
        await c.create_session({"temperature": 0})
        # an item that does not fit is not added
        await expect_err(c, {"type": "conversation.item.create", "event_id": "ci", "item": user_item("x y " * 60)},
                         "context_length_exceeded", "item", "ci")
        ev = await c.add_user("a short question")
        eq(ev["item"]["id"], "item_1", "the refused item took no id")
        await c.respond({"generate": False})
        # fill the context up to where the reply marker no longer fits
        while True:
            await c.send({"type": "conversation.item.create", "item": user_item("more")})
            ev = await c.recv()
            if ev["type"] == "error":
                check_error(ev, "context_length_exceeded", "item", None)
                break
            eq(ev["type"], "conversation.item.added", "item")
        await c.send({"type": "response.create", "event_id": "rc"})
        ev = await c.recv()
        check_error(ev, "context_length_exceeded", None, "rc")
        await alive(c)
        await c.close()
        # a response that runs into the context window ends incomplete (context_length)
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0})
        await c.add_user("hello there")
        _, _, done = await c.respond({"max_output_tokens": 60})
        eq(done["status"], "incomplete", "status")
        eq(done["status_details"], {"type": "incomplete", "reason": "context_length"}, "status_details")
        check(done["usage"]["output_tokens"] < 60, "stopped by the context")
        await alive(c)
        await c.close()


async def test_kv_unavailable_failed_response():
    """A response whose KV reservation can never fit the budget ends failed with
    kv_unavailable (f32 KV: 1280 B/token, 1 MiB budget: 12 pages of 64 tokens)."""
    async with server(model={"kv_format": "f32", "kv_budget_bytes": 1 << 20}) as srv:
        c = await with_session(srv, temperature=0)
        await c.add_user("hello")
        events, _, done = await c.respond({"max_output_tokens": 2000})
        eq(done["status"], "failed", "status")
        det = done["status_details"]
        eq(det["type"], "failed", "status_details.type")
        eq(det["error"]["code"], "kv_unavailable", "status_details.error.code")
        eq(det["error"]["type"], "server_error", "status_details.error.type")
        eq(done["output"], [], "no output")
        eq(done["usage"]["output_tokens"], 0, "no output tokens")
        # a response that fits still runs
        _, _, d2 = await c.respond({"max_output_tokens": 4})
        check(d2["status"] in ("completed", "incomplete"), f"a small response after the failed one: {d2['status']}")
        await c.close()


async def test_seq0_event_ids_unique():
    """docs (Conventions): server event ids are unique within the connection for sequence number 0."""
    async with server() as srv:
        c = await Conn.open(srv)
        ids = []
        for _ in range(3):
            await c.send("{bad")
            ids.append((await c.expect_error("invalid_json", seq=0))["event_id"])
        eq(len(set(ids)), len(ids), f"event ids of sequence-0 events on one connection: {ids}")
        await c.close()


if __name__ == "__main__":
    run_tests(globals())
