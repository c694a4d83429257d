#!/usr/bin/python3
"""Graceful shutdown on SIGTERM (docs/protocol.md "Closing", error shutting_down; gateway.h
fg_gateway_request_stop; flashgate.c).

A response in progress ends with response.done (cancelled), then every connection gets an
error shutting_down (in its session's numbering, or 0 without a session) and a close frame
1001; the process exits 0 without a sanitizer report, also with an idle TCP connection and a
half-sent HTTP request open. While a client that does not read holds the drain open, the
server answers new upgrades and /healthz with 503, and drain_timeout_s bounds the wait. A
second signal exits at once.
"""
import asyncio
import json
import os
import signal
import socket
import sys
import time

import websockets.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, RawWS, Server, check, check_error, check_response_events, eq, http_get, log, run_tests, user_item  # noqa: E402


async def closed_with(c, timeout=15):
    """Reads to the end of the connection; returns (events before the close, close code)."""
    events = []
    try:
        while True:
            events.append(await c.recv(timeout))
    except websockets.exceptions.ConnectionClosed as e:
        return events, e.rcvd.code if e.rcvd else None


async def test_sigterm_during_response():
    async with Server() as srv:
        # A: a response streaming; B: a session, idle; C: a connection without a session;
        # plus an idle TCP connection and a half-sent HTTP request
        a = await Conn.open(srv)
        await a.create_session({"temperature": 0})
        await a.add_user("Talk for a long time.")
        b = await Conn.open(srv)
        await b.create_session()
        c = await Conn.open(srv, tenant="beta")
        idle = socket.create_connection(("127.0.0.1", srv.port))
        half = socket.create_connection(("127.0.0.1", srv.port))
        half.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        await a.send({"type": "response.create", "response": {"max_output_tokens": 3000}})
        while not any(e["type"] == "response.output_text.delta" for e in a.received):
            await a.recv()
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)

        ea, code_a = await closed_with(a)
        types = [e["type"] for e in ea]
        check(len(ea) >= 2, f"A's events after SIGTERM: {types}")
        done, err = ea[-2], ea[-1]
        eq(done["type"], "response.done", f"A: response.done before the error ({types})")
        eq(set(types[:-2]) <= {"response.output_text.delta"}, True, f"A: only deltas before response.done ({types})")
        check_response_events(a.received[a.received.index(next(e for e in a.received
                                                                  if e["type"] == "response.created")):-1])
        r = done["response"]
        eq(r["status"], "cancelled", "A: the response in progress is cancelled")
        eq(r["status_details"]["type"], "cancelled", "status_details.type")
        log(f"    A: response.done cancelled, reason {r['status_details'].get('reason')!r}, "
            f"{r['usage']['output_tokens']} tokens; then error and close {code_a}")
        check_error(err, "shutting_down", None, None, seq=done["sequence_number"] + 1)
        eq(code_a, 1001, "A: close code")

        eb, code_b = await closed_with(b)
        eq([e["type"] for e in eb], ["error"], "B: one error, then the close")
        check_error(eb[0], "shutting_down", None, None, seq=b.received[-2]["sequence_number"] + 1)
        eq(code_b, 1001, "B: close code")

        ec, code_c = await closed_with(c)
        eq([e["type"] for e in ec], ["error"], "C: one error, then the close")
        check_error(ec[0], "shutting_down", None, None, seq=0)
        eq(code_c, 1001, "C: close code")

        rc = await srv.wait_exit(30)
        log(f"    exited {rc} {time.monotonic() - t0:.2f}s after SIGTERM")
        drain = srv.log_events("draining")
        eq(len(drain), 1, "one draining log line")
        eq(drain[0]["responses_cancelled"], 1, "responses cancelled by the drain")
        eq(srv.log_events("drain_timeout"), [], "the drain finished before its timeout")
        idle.close()
        half.close()
        # Server.__aexit__ asserts exit code 0 and a clean stderr


async def test_drain_refuses_new_work():
    drain_s = 4
    async with Server(server={"drain_timeout_s": drain_s}) as srv:
        if not srv.limit_send_buffer(4096):
            log("    skipped: cannot limit the server's send buffer here (pidfd_getfd refused), so a client "
                "that does not read cannot be made to hold the drain open")
            return
        # a client that stops reading during a long response holds the drain open
        slow = RawWS(srv.port, rcvbuf=4096)
        slow.send_json({"type": "session.create", "session": {"temperature": 0}})
        slow.recv_event()
        slow.send_json({"type": "conversation.item.create", "item": user_item("Talk for a long time.")})
        slow.recv_event()
        slow.send_json({"type": "response.create", "response": {"max_output_tokens": 3000}})
        await asyncio.sleep(3.0)
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        check(srv.proc.poll() is None, "the server did not wait for the client that does not read")
        status, _, body = http_get(srv.port, "/healthz")
        eq(status, 503, "GET /healthz while draining")
        eq(json.loads(body)["status"], "draining", "healthz status while draining")
        r = RawWS(srv.port)
        eq(r.status, 503, "a new WebSocket upgrade while draining")
        r.close()
        rc = await srv.wait_exit(drain_s + 20)
        took = time.monotonic() - t0
        log(f"    exited {rc} after {took:.1f}s (drain_timeout_s {drain_s})")
        check(drain_s - 0.5 <= took <= drain_s + 5, f"drain_timeout_s bounds the shutdown: {took:.1f}s")
        eq(len(srv.log_events("drain_timeout")) >= 1, True, "drain_timeout logged")
        slow.close()


async def test_second_signal_exits_at_once():
    async with Server(server={"drain_timeout_s": 30}) as srv:
        if not srv.limit_send_buffer(4096):
            log("    skipped: cannot limit the server's send buffer here (pidfd_getfd refused)")
            return
        slow = RawWS(srv.port, rcvbuf=4096)
        slow.send_json({"type": "session.create", "session": {"temperature": 0}})
        slow.recv_event()
        slow.send_json({"type": "conversation.item.create", "item": user_item("Talk for a long time.")})
        slow.recv_event()
        slow.send_json({"type": "response.create", "response": {"max_output_tokens": 3000}})
        await asyncio.sleep(3.0)
        srv.signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        check(srv.proc.poll() is None, "still draining")
        t0 = time.monotonic()
        srv.signal(signal.SIGINT)
        rc = await srv.wait_exit(10)
        eq(rc, 1, "exit code after a second signal")
        check(time.monotonic() - t0 < 3, "the second signal exits at once")
        eq(len(srv.log_events("forced_exit")), 1, "forced_exit logged")
        srv.stopped = True  # not a clean stop, on purpose
        slow.close()


if __name__ == "__main__":
    run_tests(globals())
