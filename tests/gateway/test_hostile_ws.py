#!/usr/bin/python3
"""Hostile WebSocket clients (issue 14): what docs/protocol.md promises holds against them.

- "Closing": a WebSocket-level violation gets a close frame 1002 (a control frame longer than
  125 bytes, a close payload of one byte), never a bare TCP close or an empty close.

"""
import asyncio
import json
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RawWS, Server, Timeout, eq, run_tests, user_item  # noqa: E402

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


if __name__ == "__main__":
    run_tests(globals(), per_test_timeout=240)
