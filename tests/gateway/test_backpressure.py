#!/usr/bin/python3
"""A client that stops reading while a long response streams (docs/config.md
sessions.output_buffer_bytes: "above it generation for that connection pauses until the
client reads"; gw_session.c: nothing is dropped).

The slow client is a raw socket with a 4 KiB receive buffer that reads nothing for a while;
the server's connections get a fixed 4 KiB send buffer (Server.limit_send_buffer), so the
bytes pile up in the gateway and not in the kernel. Checked: the gateway pauses that
session's output (the debug log line output_paused), the server's RSS stays bounded while the
client does not read, no event is dropped, and once the client reads again it gets every
event (contiguous sequence numbers) and every token: the text equals the same greedy
response read eagerly by another client at the same time.

A second test reads through websockets with a small read limit and a pause per message.
"""
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, RawWS, Server, check, check_response_events, delta_text, eq, log, run_tests, user_item  # noqa: E402

PROMPT = user_item("Tell me a long story about a lighthouse keeper.")
SESSION = {"instructions": "You are a storyteller.", "temperature": 0}
OUTPUT_BUFFER = 4096  # sessions.output_buffer_bytes (the minimum)
RSS_BOUND_KB = 32 << 10


async def eager(srv, max_tokens):
    c = await Conn.open(srv)
    await c.create_session(SESSION)
    await c.add_item(PROMPT)
    _, text, done = await c.respond({"max_output_tokens": max_tokens}, timeout=300)
    await c.close()
    return text, done


async def test_slow_reader():
    n_tokens = 2500
    async with Server(log_level="debug", sessions={"output_buffer_bytes": OUTPUT_BUFFER}) as srv:
        limited = srv.limit_send_buffer(4096)
        if not limited:
            log("    note: cannot set the server's send buffer (pidfd_getfd refused): the kernel may absorb "
                "the whole response, so the pause itself is not required below")
        slow = RawWS(srv.port, rcvbuf=4096)
        slow.send_json({"type": "session.create", "session": SESSION})
        sid = slow.recv_event()["session"]["id"]
        slow.send_json({"type": "conversation.item.create", "item": PROMPT})
        slow.recv_event()
        # the same greedy response, read eagerly, at the same time (the engine batches both)
        ref = asyncio.create_task(eager(srv, n_tokens))
        slow.send_json({"type": "response.create", "response": {"max_output_tokens": n_tokens}})
        await asyncio.sleep(0.5)
        base = srv.rss_kb()
        peak, t0, paused_at = base, time.monotonic(), None
        while time.monotonic() - t0 < 90:
            await asyncio.sleep(0.2)
            peak = max(peak, srv.rss_kb())
            if paused_at is None and any(e.get("session") == sid for e in srv.log_events("output_paused")):
                paused_at = time.monotonic() - t0
            if paused_at is not None and time.monotonic() - t0 > paused_at + 3:
                break  # stay paused a little longer, measuring
            if not limited and time.monotonic() - t0 > 10:
                break
        log(f"    output paused after {paused_at}s; RSS while not reading: +{(peak - base) // 1024} MiB over "
            f"{base // 1024} MiB")
        if limited:
            check(paused_at is not None, "the gateway never paused the output of the client that does not read")
        check(peak - base < RSS_BOUND_KB, f"RSS grew by {peak - base} kB while the client did not read")
        # read again: everything arrives
        events = slow.recv_until("response.done", timeout=300)
        slow.close()
        response = [e for e in events if e["type"].startswith("response.")]
        check_response_events(response)
        seqs = [e["sequence_number"] for e in events]
        eq(seqs, list(range(3, 3 + len(events))), "every event, in order, none missing")
        text, done = delta_text(response), events[-1]["response"]
        ref_text, ref_done = await ref
        eq(done["usage"], ref_done["usage"], "usage of the throttled response == the eager one")
        eq(text, ref_text, "the throttled client's text == the eager client's (every token arrived)")
        eq(srv.log_events("event_dropped"), [], "events dropped by the gateway")
        log(f"    {done['usage']['output_tokens']} tokens, {len(response)} events")


async def test_small_read_limit():
    async with Server(sessions={"output_buffer_bytes": OUTPUT_BUFFER}) as srv:
        srv.limit_send_buffer(4096)
        ref_task = asyncio.create_task(eager(srv, 400))
        c = await Conn.open(srv, read_limit=1024, max_queue=1)
        await c.create_session(SESSION)
        await c.add_item(PROMPT)
        await c.send({"type": "response.create", "response": {"max_output_tokens": 400}})
        events = []
        while not events or events[-1]["type"] != "response.done":
            events.append(await c.recv(60))
            await asyncio.sleep(0.02)
        check_response_events(events)
        ref_text, ref_done = await ref_task
        eq(delta_text(events), ref_text, "text read slowly through websockets")
        eq(events[-1]["response"]["usage"], ref_done["usage"], "usage")
        await c.close()


async def test_non_reading_client_that_keeps_sending():
    """The output is paused for a client that does not read, but the client can still send:
    each message is answered with an event (here session.updated) queued in the same ring.
    Those answers must not push unsent events out of the resume buffer of a live connection:
    when the client reads again it gets every event, with contiguous sequence numbers, or
    (docs/protocol.md "Closing") the server closes with 1008. Never a silent gap."""
    async with Server(sessions={"resume_buffer_events": 16}) as srv:
        if not srv.limit_send_buffer(4096):
            log("    skipped: cannot limit the server's send buffer here (pidfd_getfd refused)")
            return
        slow = RawWS(srv.port, rcvbuf=4096)
        slow.send_json({"type": "session.create", "session": SESSION})
        slow.recv_event()
        slow.send_json({"type": "conversation.item.create", "item": PROMPT})
        slow.recv_event()
        slow.send_json({"type": "response.create", "response": {"max_output_tokens": 1000}})
        await asyncio.sleep(6.0)  # the socket's buffers are full by now
        for _ in range(40):
            slow.send_json({"type": "session.update", "session": {}})
        await asyncio.sleep(1.0)
        events, close = [], None
        try:  # until the response and the 40 answers are in, or 10 s of silence
            while not (any(e["type"] == "response.done" for e in events) and
                       sum(e["type"] == "session.updated" for e in events) == 40):
                events.append(slow.recv_event(10))
        except ConnectionError as e:
            close = str(e)
        except AssertionError as e:  # the harness's Timeout
            log(f"    reading stopped: {e}")
        slow.close()
        dropped = srv.log_events("event_dropped")
        seqs = [e["sequence_number"] for e in events]
        gaps = [(x, y) for x, y in zip(seqs, seqs[1:]) if y != x + 1]
        log(f"    {len(events)} events read, close: {close}, gaps {gaps[:3]}, event_dropped x{len(dropped)}")
        if close is not None:
            eq(close, "close frame 1008", "the only documented way to give up on a client that does not read")
        eq(gaps, [], "sequence numbers on one live connection (events silently lost)")
        eq(sum(e["type"] == "session.updated" for e in events), 40, "answers to the 40 session.update")
        eq(sum(e["type"] == "response.done" for e in events), 1, "the response's response.done")


if __name__ == "__main__":
    run_tests(globals())
