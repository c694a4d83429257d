#!/usr/bin/python3
"""Hostile WebSocket clients (issue 14): what docs/protocol.md promises holds against them.

- "Closing": a WebSocket-level violation gets a close frame 1002 (a control frame longer than
  125 bytes, a close payload of one byte), never a bare TCP close or an empty close.
- "Closing": a client that does not read is closed with 1008: past the hard limit at once,
  above the soft limit for sessions.output_buffer_soft_s; its response is cancelled and its
  session detached (resumable).
- "Sequence numbers and resume": the resume buffer is bounded in bytes
  (sessions.resume_buffer_bytes): a resume asking for events that left it gets sequence_expired.
- Replies to a client without a session are never dropped: the server stops reading it instead.

The non-reading clients are raw sockets with a small receive buffer, and the server's
connections get a fixed 4 KiB send buffer (Server.limit_send_buffer), so that what the client
does not read piles up in the gateway and not in the kernel.
"""
import asyncio
import json
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, RawWS, Server, Timeout, check, check_error, eq, http_get, log, run_tests, user_item  # noqa: E402

PROMPT = user_item("Tell me a long story about a lighthouse keeper.")


def read_until_close(ws, timeout=30):
    """Reads frames until the server's close frame: (events, close code, or None without a code).
    A TCP close without a close frame raises ConnectionError."""
    events = []
    deadline = time.monotonic() + timeout
    while True:
        _, op, payload = ws.recv_frame(max(0.01, deadline - time.monotonic()))
        if op == 0x8:
            return events, (struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None)
        if op == 0x1:
            events.append(json.loads(payload))


async def wait_log(srv, event, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = srv.log_events(event)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise Timeout(f"no log line {event} within {timeout}s")


def send_in_background(ws, frames):
    """Sends the frames from a thread (a client that does not read soon cannot send either)."""
    def run():
        try:
            for f in frames:
                ws.send_json(f)
        except OSError:
            pass  # the server stopped reading, then closed
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def updates(n, size):
    return [{"type": "session.update", "session": {"instructions": chr(ord("a") + i % 26) * size}}
            for i in range(n)]


# ---- framing violations: close 1002 with a close frame


async def test_long_control_frame_gets_close_1002():
    async with Server() as srv:
        ws = RawWS(srv.port)
        ws.send_frame(0x9, b"p" * 126)  # a ping of 126 bytes (control frames have at most 125)
        try:
            _, code = read_until_close(ws)
        except ConnectionError:
            code = "no close frame"
        ws.close()
        eq(code, 1002, "close code after a 126-byte ping")


async def test_one_byte_close_payload_gets_close_1002():
    async with Server() as srv:
        ws = RawWS(srv.port)
        ws.send_frame(0x8, b"\x03")  # a close payload is empty or starts with a 2-byte code
        try:
            _, code = read_until_close(ws)
        except ConnectionError:
            code = "no close frame"
        ws.close()
        eq(code, 1002, "close code after a 1-byte close payload")


async def test_well_formed_close_is_echoed():
    """The preset 1002 does not leak into an ordinary close: the client's code comes back."""
    async with Server() as srv:
        ws = RawWS(srv.port)
        ws.send_json({"type": "session.create"})
        ws.recv_event()
        ws.send_frame(0x8, struct.pack("!H", 1000) + b"bye")
        _, code = read_until_close(ws)
        ws.close()
        eq(code, 1000, "the server's answer to a close 1000")


# ---- replies without a session: none dropped


async def test_every_reply_without_a_session_arrives():
    n = 500
    async with Server(limits={"message_burst": 1000}) as srv:
        ws = RawWS(srv.port)
        # back to back: the server reads them far faster than it writes (one reply per writable callback)
        send_in_background(ws, [{"type": "response.create", "event_id": f"e{i}"} for i in range(n)])
        got = []
        while len(got) < n:
            ev = ws.recv_event(20)
            check_error(ev, "no_session", event_id=f"e{len(got)}", seq=0)
            got.append(ev["error"]["event_id"])
        ws.close()
        eq(got, [f"e{i}" for i in range(n)], "every no_session reply, in order")


# ---- the resume buffer in bytes


async def test_resume_buffer_is_bounded_in_bytes():
    limit = 16384
    async with Server(sessions={"resume_buffer_bytes": limit}) as srv:
        c = await Conn.open(srv)
        await c.create_session()
        for u in updates(10, 8000):  # each session.updated echoes its 8000 bytes of instructions
            await c.update(u["session"])
        newest = c.last_seq
        await c.close()
        c2 = await Conn.open(srv)
        await c2.send({"type": "session.resume", "session_id": c.session_id, "last_sequence_number": 0})
        await c2.expect_error("sequence_expired", param="last_sequence_number", seq=0)
        replayed, resumed = await c2.resume(c.session_id, 0, allow_gap=True)
        eq(resumed["sequence_number"], newest + 1, "session.resumed's number")
        seqs = [e["sequence_number"] for e in replayed]
        eq(seqs, list(range(seqs[0], newest + 1)), "the replay: the newest events, contiguous")
        kept = sum(len(m) for m in c2.raw[1:1 + len(replayed)])
        log(f"    {len(replayed)} of {newest} events kept, {kept} bytes (limit {limit})")
        check(seqs[0] > 1, "the oldest events left the resume buffer")
        check(kept <= limit + 8200, f"the resume buffer kept {kept} bytes past its limit of {limit}")
        await c2.close()


# ---- clients that do not read: close 1008


async def test_client_above_soft_limit_is_closed_1008():
    """Sends session.update with big instructions and never reads: the server stops reading it
    at the soft limit, and closes it with 1008 once it stayed above it output_buffer_soft_s."""
    n = 40
    async with Server(sessions={"output_buffer_bytes": 16384, "output_buffer_soft_s": 2}) as srv:
        if not srv.limit_send_buffer(4096):
            log("    skipped: cannot limit the server's send buffer here (pidfd_getfd refused)")
            return
        ws = RawWS(srv.port, rcvbuf=4096)
        ws.send_json({"type": "session.create"})
        sid = ws.recv_event()["session"]["id"]
        sender = send_in_background(ws, updates(n, 8000))
        closed = await wait_log(srv, "slow_client_closed")
        eq(closed[0]["limit"], "soft", "the limit that closed it")
        events, code = read_until_close(ws)
        ws.close()
        sender.join(30)
        eq(code, 1008, "close code for a client that does not read")
        # the session lives on, detached; the server answered only what it read before it stopped
        c = await Conn.open(srv)
        _, resumed = await c.resume(sid, 0, allow_gap=True)
        answered = resumed["sequence_number"] - 2
        log(f"    closed after {answered} of {n} updates were answered; {len(events)} read after the close")
        check(answered < n, "the server kept reading a client that did not read")
        await c.close()


async def test_client_past_hard_limit_is_closed_1008_at_once():
    async with Server(sessions={"output_buffer_bytes": 4096, "output_buffer_hard_bytes": 8192,
                                "resume_buffer_bytes": 4096, "output_buffer_soft_s": 3600}) as srv:
        if not srv.limit_send_buffer(4096):
            log("    skipped: cannot limit the server's send buffer here (pidfd_getfd refused)")
            return
        ws = RawWS(srv.port, rcvbuf=4096)
        ws.send_json({"type": "session.create"})
        ws.recv_event()
        sender = send_in_background(ws, updates(4, 20000))
        closed = await wait_log(srv, "slow_client_closed")
        eq(closed[0]["limit"], "hard", "the limit that closed it")
        _, code = read_until_close(ws)
        ws.close()
        sender.join(30)
        eq(code, 1008, "close code past the hard limit")
        _, _, body = http_get(srv.port, "/metrics")
        line = [ln for ln in body.decode().splitlines() if ln.startswith("flashgate_output_limit_closes_total")]
        eq(line, ["flashgate_output_limit_closes_total 1"], "the metric of 1008 closes")


async def test_response_of_a_client_closed_1008_is_cancelled():
    async with Server(sessions={"output_buffer_bytes": 4096, "output_buffer_soft_s": 1}) as srv:
        if not srv.limit_send_buffer(4096):
            log("    skipped: cannot limit the server's send buffer here (pidfd_getfd refused)")
            return
        ws = RawWS(srv.port, rcvbuf=4096)
        ws.send_json({"type": "session.create", "session": {"temperature": 0}})
        sid = ws.recv_event()["session"]["id"]
        ws.send_json({"type": "conversation.item.create", "item": PROMPT})
        ws.recv_event()
        ws.send_json({"type": "response.create", "response": {"max_output_tokens": 20000}})
        await wait_log(srv, "slow_client_closed", timeout=120)
        _, code = read_until_close(ws)
        ws.close()
        eq(code, 1008, "close code")
        deadline = time.monotonic() + 60
        while True:  # the engine's cancelled response.done reaches the resume buffer soon after the close
            c = await Conn.open(srv)
            replayed, _ = await c.resume(sid, 0, allow_gap=True)
            done = [e for e in replayed if e["type"] == "response.done"]
            if done:
                break
            await c.close()
            check(time.monotonic() < deadline, "no response.done in the resume buffer after the close")
            await asyncio.sleep(0.5)
        eq(done[-1]["response"]["status"], "cancelled", "the response of a client closed for not reading")
        eq(done[-1]["response"]["status_details"]["reason"], "slow_client", "its reason")
        await c.close()


if __name__ == "__main__":
    run_tests(globals(), per_test_timeout=240)
