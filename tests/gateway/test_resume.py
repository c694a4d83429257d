#!/usr/bin/python3
"""Sessions that outlive their connection (docs/protocol.md "Sequence numbers and resume",
"Sessions"): abrupt drops mid-response and session.resume with the last sequence number seen
(exactly the missed events, contiguous, byte for byte the same on every replay, then
session.resumed and the live rest; the text equals an uninterrupted greedy run), a detached
response that finishes while nobody listens, resumed_elsewhere, replay from 0, replay from
the oldest buffered event, idle expiry (sessions.idle_timeout_s = 1), and the expiry of a
detached session whose response the gateway paused.
"""
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, Server, check, check_response_events, delta_text, eq, log, run_tests, user_item  # noqa: E402

INSTR = "You are a storyteller."
PROMPT = user_item("Tell me a long story about a lighthouse keeper.")


async def reference(srv, max_tokens):
    """The uninterrupted greedy run: (text, response.done)."""
    c = await Conn.open(srv)
    await c.create_session({"instructions": INSTR, "temperature": 0})
    await c.add_item(PROMPT)
    _, text, done = await c.respond({"max_output_tokens": max_tokens})
    await c.close()
    return text, done


async def start_and_drop(srv, max_tokens, deltas_before_drop):
    """A session whose connection drops (RST, no close frame) after some deltas.
    Returns (session id, events seen before the drop)."""
    c = await Conn.open(srv)
    await c.create_session({"instructions": INSTR, "temperature": 0})
    await c.add_item(PROMPT)
    await c.send({"type": "response.create", "response": {"max_output_tokens": max_tokens}})
    n = 0
    while n < deltas_before_drop:
        ev = await c.recv()
        check(ev["type"] != "response.done", "the response ended before the drop")
        n += ev["type"] == "response.output_text.delta"
    c.abort()
    return c.session_id, list(c.received), list(c.raw)


async def test_reconnect_mid_response():
    async with Server() as srv:
        ref_text, ref_done = await reference(srv, 300)
        eq(ref_done["usage"]["output_tokens"], 300, "the reference runs its 300 tokens")
        sid, seen, _ = await start_and_drop(srv, 300, 5)
        last = seen[-1]["sequence_number"]
        await asyncio.sleep(0.5)  # the response runs on, detached: these events are missed
        # a new connection picks the session up where the client left it
        r = await Conn.open(srv)
        replay, resumed = await r.resume(sid, last)
        eq(replay[0]["sequence_number"] if replay else resumed["sequence_number"], last + 1,
           "the first event after the resume follows the last one seen")
        eq(resumed["session"]["id"], sid, "session.resumed's id")
        eq(resumed["session"]["temperature"], 0, "session.resumed shows the settings")
        eq(resumed["session"]["instructions"], INSTR, "session.resumed's instructions")
        live = [] if any(e["type"] == "response.done" for e in replay) else await r.recv_until("response.done")
        log(f"    seen {len(seen)} events before the drop, {len(replay)} replayed, {len(live)} live after session.resumed")
        check(replay, "events generated while detached are replayed")
        # every event exactly once, in order
        stream = seen + replay + [resumed] + live
        seqs = [e["sequence_number"] for e in stream]
        eq(seqs, list(range(1, len(stream) + 1)), "sequence numbers over both connections")
        ids = [e["event_id"] for e in stream]
        eq(len(set(ids)), len(ids), "event ids are unique")
        response = [e for e in stream if e["type"].startswith("response.")]
        check_response_events(response)
        text = delta_text(response)
        eq(text, ref_text, "the text across the drop == the uninterrupted greedy run")
        done = response[-1]["response"]
        eq(done["usage"], ref_done["usage"], "usage across the drop")
        eq(done["status"], ref_done["status"], "status")
        # a second resume from the same point replays the same events byte for byte
        newest = r.last_seq
        await r.close()
        r2 = await Conn.open(srv)
        replay2, resumed2 = await r2.resume(sid, last, newest=newest)
        eq(r2.raw[:len(r.raw)], r.raw, "a replay is byte-for-byte what the first resume received")
        eq(resumed2["sequence_number"], newest + 1, "the second session.resumed")
        # and the conversation goes on with the history cached
        await r2.add_user("What happened next?")
        _, _, d2 = await r2.respond({"max_output_tokens": 4})
        eq(d2["usage"]["input_token_details"]["cached_tokens"], done["usage"]["total_tokens"] - 1,
           "the history is cached after the reconnect")
        await r2.close()


async def test_detached_response_finishes():
    """Nobody is attached while the rest of the response is generated: it runs to its end and
    the resume replays all of it, response.done included, before session.resumed."""
    async with Server(log_level="debug") as srv:
        ref_text, ref_done = await reference(srv, 60)
        sid, seen, _ = await start_and_drop(srv, 60, 1)
        deadline = time.monotonic() + 60  # the debug log says when the response ended
        while not any(e.get("session") == sid for e in srv.log_events("response_done")):
            check(time.monotonic() < deadline, "the detached response did not end within 60 s")
            await asyncio.sleep(0.1)
        r = await Conn.open(srv)
        replay, resumed = await r.resume(sid, seen[-1]["sequence_number"])
        types = [e["type"] for e in replay]
        check("response.done" in types, f"the response finished while detached: {types}")
        response = [e for e in seen + replay if e["type"].startswith("response.")]
        check_response_events(response)
        eq(delta_text(response), ref_text, "text")
        await r.no_event(0.3)
        await r.close()


async def test_replay_from_zero():
    async with Server() as srv:
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0})
        await c.add_user("one")
        await c.respond({"max_output_tokens": 5})
        await c.update({"top_k": 3})
        await c.close()
        r = await Conn.open(srv)
        replay, resumed = await r.resume(c.session_id, 0)
        eq(r.raw[:-1], c.raw, "resume from 0 replays every event, byte for byte")
        eq(resumed["sequence_number"], c.last_seq + 1, "session.resumed's number")
        eq(resumed["session"]["top_k"], 3, "settings in session.resumed")
        await r.close()


async def test_resume_without_missed_events():
    async with Server() as srv:
        c = await Conn.open(srv)
        created = (await c.create_session({"temperature": 0, "seed": 9}))["session"]
        await c.add_user("hello")
        _, _, d1 = await c.respond({"max_output_tokens": 5})
        await c.close()  # a clean close also detaches
        r = await Conn.open(srv, tenant="acme")
        replay, resumed = await r.resume(c.session_id, c.last_seq)
        eq(replay, [], "nothing missed, nothing replayed")
        eq(resumed["sequence_number"], c.last_seq + 1, "session.resumed")
        eq(resumed["session"], created, "the settings")
        await r.add_user("again")
        _, _, d2 = await r.respond({"max_output_tokens": 2})
        eq(d2["usage"]["input_token_details"]["cached_tokens"], d1["usage"]["total_tokens"] - 1, "history kept")
        await r.close()


async def test_resumed_elsewhere():
    """The newest connection wins: the old one gets session.closed (resumed_elsewhere,
    sequence number 0) and no more of the session's events; the new one gets the rest."""
    async with Server() as srv:
        ref_text, _ = await reference(srv, 200)
        old = await Conn.open(srv)
        await old.create_session({"instructions": INSTR, "temperature": 0})
        await old.add_item(PROMPT)
        await old.send({"type": "response.create", "response": {"max_output_tokens": 200}})
        while not any(e["type"] == "response.output_text.delta" for e in old.received):
            await old.recv()
        last = old.last_seq
        new = await Conn.open(srv)
        replay, resumed = await new.resume(old.session_id, last)
        # the old connection: maybe a few more events, then session.closed with number 0
        while True:
            ev = await old.recv()
            if ev["type"] == "session.closed":
                break
            check(ev["type"] == "response.output_text.delta", f"before session.closed: {ev}")
        eq(ev["sequence_number"], 0, "session.closed (resumed_elsewhere) is not numbered")
        eq(ev["reason"], "resumed_elsewhere", "reason")
        eq(ev["session_id"], old.session_id, "session_id")
        await old.send({"type": "response.cancel", "event_id": "o"})
        await old.expect_error("no_session", event_id="o", seq=0)
        # the new connection has everything after `last`, exactly once
        live = await new.recv_until("response.done")
        stream = [e for e in old.received if e["sequence_number"] and e["sequence_number"] <= last] + replay + live
        response = [e for e in stream if e["type"].startswith("response.")]
        eq(delta_text(response), ref_text, "the text split over two connections")
        # the old connection may start another session
        await old.create_session()
        await old.close()
        await new.close()


async def test_resume_from_oldest_kept_event():
    """A full resume buffer (sessions.resume_buffer_events = 16) and a resume from the
    predecessor of its oldest event: every kept event must be replayed. The session.resumed
    that the resume adds must not push the first event to replay out of the buffer."""
    async with Server(sessions={"resume_buffer_events": 16}) as srv:
        c = await Conn.open(srv)
        await c.create_session()
        for i in range(20):
            await c.add_user(f"item {i}")
        newest = c.last_seq
        await c.close()
        oldest = newest - 16 + 1
        r = await Conn.open(srv)
        replay, resumed = await r.resume(c.session_id, oldest - 1)
        eq([e["sequence_number"] for e in replay], list(range(oldest, newest + 1)), "replayed events")
        eq(r.raw[:-1], c.raw[oldest - 1:], "the replay is byte for byte what the first connection got")
        dropped = srv.log_events("event_dropped")
        eq(dropped, [], "events dropped from the resume buffer before they were sent")
        await r.close()


async def test_idle_expiry():
    async with Server(sessions={"idle_timeout_s": 1}) as srv:
        # attached sessions do not expire however idle
        a = await Conn.open(srv)
        await a.create_session()
        # a detached session resumed quickly is still there
        b = await Conn.open(srv)
        await b.create_session()
        await b.close()
        await asyncio.sleep(0.3)
        b2 = await Conn.open(srv)
        await b2.resume(b.session_id, b.last_seq)
        # detached and idle for 3 s: gone
        c = await Conn.open(srv)
        await c.create_session()
        await c.add_user("remember me")
        await c.close()
        t0 = time.monotonic()
        await asyncio.sleep(3.0)
        r = await Conn.open(srv)
        await r.send({"type": "session.resume", "event_id": "late", "session_id": c.session_id,
                      "last_sequence_number": c.last_seq})
        await r.expect_error("session_not_found", "session_id", "late", seq=0)
        expired = [e for e in srv.log_events("session_expired") if e.get("session") == c.session_id]
        eq(len(expired), 1, "one session_expired log line for it")
        log(f"    expired after at most {time.monotonic() - t0:.1f}s")
        # the attached ones are alive
        for x in (a, b2):
            await x.send({"type": "session.update", "session": {}})
            await x.expect("session.updated")
        for x in (a, b2, r):
            await x.close()


async def test_detached_paused_session_expires():
    """A client drops during a long response and never comes back. The response runs on
    while detached (docs), and the session then expires after sessions.idle_timeout_s.
    With a small resume buffer (16) the gateway pauses the detached session's output after
    8 unsent events; the session must still not live forever."""
    async with Server(sessions={"idle_timeout_s": 1, "resume_buffer_events": 16}) as srv:
        sid, seen, _ = await start_and_drop(srv, 400, 1)
        # 400 tokens take about 4 s here; then idle 1 s; the sweep runs every second
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            if any(e.get("session") == sid for e in srv.log_events("session_expired")):
                break
        r = await Conn.open(srv)
        await r.send({"type": "session.resume", "session_id": sid, "last_sequence_number": seen[-1]["sequence_number"],
                      "allow_gap": True})
        ev = await r.recv()
        if ev["type"] != "error":
            await r.send({"type": "session.close"})
            await r.recv_until("session.closed")
        check(ev["type"] == "error" and ev["error"]["code"] == "session_not_found",
              f"20 s after the drop the detached session is still there (its response never ended): got {ev['type']}")
        await r.close()


if __name__ == "__main__":
    run_tests(globals())
