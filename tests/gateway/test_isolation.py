#!/usr/bin/python3
"""Tenant isolation, session ids and the handshake (docs/protocol.md "Transport", "Sessions").

Another tenant's session is indistinguishable from an unknown id (session_not_found, the
same error), cannot be resumed, forked, cancelled or read, and its owner notices nothing.
Session ids carry at least 128 random bits. The upgrade: wrong or missing key -> 401, wrong
path -> 404, an unknown subprotocol is refused, no subprotocol is served v1; GET /healthz.
"""
import asyncio
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (KEYS, SESSION_ID_RE, SUBPROTOCOL, Conn, RawWS, Server, check, eq,  # noqa: E402
                     handshake_status, http_get, log, run_tests)


def same_error(a, b, what):
    """Two error events that must not be told apart (everything but event ids)."""
    ea, eb = dict(a["error"]), dict(b["error"])
    ea.pop("event_id")
    eb.pop("event_id")
    eq(ea, eb, what)
    eq(a["sequence_number"], b["sequence_number"], what + " (sequence_number)")


async def test_other_tenant_cannot_resume_or_fork():
    async with Server() as srv:
        a = await Conn.open(srv, tenant="acme")
        await a.create_session({"temperature": 0})
        await a.add_user("secret of acme")
        await a.respond({"max_output_tokens": 4})
        sid = a.session_id
        b = await Conn.open(srv, tenant="beta")
        # attached to A: B's resume fails, and A is not disturbed (no resumed_elsewhere)
        await b.send({"type": "session.resume", "event_id": "b1", "session_id": sid, "last_sequence_number": 0})
        other = await b.expect_error("session_not_found", "session_id", "b1", seq=0)
        await b.send({"type": "session.resume", "event_id": "b2", "session_id": "sess_" + "0" * 32,
                      "last_sequence_number": 0})
        unknown = await b.expect_error("session_not_found", "session_id", "b2", seq=0)
        same_error(other, unknown, "another tenant's session vs an unknown id")
        await a.no_event(0.3)
        # detached: the same
        last = a.last_seq
        await a.close()
        await asyncio.sleep(0.1)
        await b.send({"type": "session.resume", "session_id": sid, "last_sequence_number": last})
        detached = await b.expect_error("session_not_found", "session_id", seq=0)
        same_error(detached, unknown, "a detached session of another tenant vs an unknown id")
        # a last_sequence_number beyond the session's must not tell B that the id exists
        await b.send({"type": "session.resume", "session_id": sid, "last_sequence_number": 10 ** 6})
        probe = await b.expect_error("session_not_found", "session_id", seq=0)
        same_error(probe, unknown, "a resume beyond the session's newest event vs an unknown id")
        # fork_from
        await b.send({"type": "session.create", "event_id": "f1", "session": {"fork_from": sid}})
        f_other = await b.expect_error("session_not_found", "session.fork_from", "f1", seq=0)
        await b.send({"type": "session.create", "event_id": "f2", "session": {"fork_from": "sess_" + "0" * 32}})
        f_unknown = await b.expect_error("session_not_found", "session.fork_from", "f2", seq=0)
        same_error(f_other, f_unknown, "fork of another tenant's session vs an unknown id")
        # B cannot act on A's session without it attached
        await b.send({"type": "response.cancel", "event_id": "c"})
        await b.expect_error("no_session", event_id="c", seq=0)
        # A resumes its session intact
        a2 = await Conn.open(srv, tenant="acme")
        replay, resumed = await a2.resume(sid, last)
        eq(replay, [], "nothing happened to A's session meanwhile")
        await a2.add_user("still mine")
        _, _, done = await a2.respond({"max_output_tokens": 2})
        check(done["usage"]["input_token_details"]["cached_tokens"] > 0, "A's history is intact")
        await a2.close()
        await b.close()


async def test_other_tenant_cannot_read_or_cancel_running_response():
    async with Server() as srv:
        a = await Conn.open(srv, tenant="acme")
        await a.create_session({"temperature": 0})
        await a.add_user("a long answer please")
        await a.send({"type": "response.create", "response": {"max_output_tokens": 150}})
        await a.expect("response.created")
        b = await Conn.open(srv, tenant="beta")
        await b.send({"type": "session.resume", "session_id": a.session_id, "last_sequence_number": 0})
        await b.expect_error("session_not_found", "session_id", seq=0)
        await b.send({"type": "response.cancel"})
        await b.expect_error("no_session", seq=0)
        events = await a.recv_until("response.done")
        done = events[-1]["response"]
        eq(done["status"], "incomplete", "A's response ran to its limit")
        eq(done["usage"]["output_tokens"], 150, "output tokens")
        await b.no_event(0.2)
        await a.close()
        await b.close()


async def test_session_ids():
    async with Server(limits={"messages_per_second": 100000, "message_burst": 100000}) as srv:
        ids = []
        for tenant in ("acme", "beta"):
            c = await Conn.open(srv, tenant=tenant)
            for _ in range(150):
                ids.append((await c.create_session())["session"]["id"])
                await c.send({"type": "session.close"})
                await c.expect("session.closed")
            await c.close()
        for sid in ids:
            check(SESSION_ID_RE.match(sid), f"session id format: {sid}")
        eq(len(set(ids)), len(ids), "session ids are unique")
        bits = [int(sid[5:], 16) for sid in ids]
        ones = sum(bin(v).count("1") for v in bits)
        share = ones / (128 * len(bits))
        log(f"    {len(ids)} ids, share of 1 bits {share:.4f}")
        check(0.47 < share < 0.53, f"the 128 bits look random: share of ones {share}")
        for pos in range(128):
            col = {(v >> pos) & 1 for v in bits}
            eq(col, {0, 1}, f"bit {pos} of the ids varies")
        diffs = {(bits[i + 1] - bits[i]) for i in range(len(bits) - 1)}
        eq(len(diffs), len(bits) - 1, "ids are not sequential")


def test_handshake_status_raw():
    """The status line of each refusal, read from a plain socket."""
    async def go():
        async with Server() as srv:
            cases = [
                ("wrong key", dict(key="acme-test-key-0123456789abcdeX"), 401),
                ("no key", dict(key=None), 401),
                ("key of no tenant", dict(key="x" * 32), 401),
                ("not Bearer", dict(key=None, headers={"Authorization": "Basic " + KEYS["acme"]}), 401),
                ("empty Bearer", dict(key=None, headers={"Authorization": "Bearer "}), 401),
                ("wrong path", dict(path="/v1/other"), 404),
                ("root path", dict(path="/"), 404),
                ("good", dict(), 101),
                ("beta's key", dict(key=KEYS["beta"]), 101),
                ("no subprotocol", dict(subprotocols=()), 101),
                ("v1 among others", dict(subprotocols=("flashgate.v0", SUBPROTOCOL)), 101),
            ]
            for what, kw, want in cases:
                r = RawWS(srv.port, **kw)
                eq(r.status, want, f"handshake status ({what})")
                if want == 101:
                    offered = kw.get("subprotocols", (SUBPROTOCOL,))
                    eq(r.headers.get("sec-websocket-protocol"), SUBPROTOCOL if offered else None,
                       f"subprotocol chosen ({what})")
                    r.send_json({"type": "session.create"})
                    eq(r.recv_event()["type"], "session.created", f"a session over the connection ({what})")
                r.close()
            # only unknown subprotocols: no 101
            r = RawWS(srv.port, subprotocols=("flashgate.v2",))
            check(r.status != 101, f"an unknown subprotocol was accepted: {r.status}")
            r.close()
            status, _, _ = http_get(srv.port, "/healthz")
            eq(status, 200, "the server is fine after the refusals")
    asyncio.run(go())


async def test_handshake_status_websockets_client():
    """What an agent framework on python-websockets sees: the refusal's HTTP status
    (InvalidStatusCode 401 / 404). websockets accepts only an HTTP/1.1 status line."""
    async with Server() as srv:
        eq(await handshake_status(srv, key="wrong-key-0123456789abcdef"), 401, "wrong key")
        eq(await handshake_status(srv, auth=False), 401, "no key")
        eq(await handshake_status(srv, path="/v1/nope"), 404, "wrong path")


async def test_subprotocols_websockets_client():
    async with Server() as srv:
        c = await Conn.open(srv, subprotocols=())
        eq(c.ws.subprotocol, None, "no subprotocol offered: none chosen")
        await c.create_session()
        await c.close()
        c = await Conn.open(srv, subprotocols=("other", SUBPROTOCOL))
        eq(c.ws.subprotocol, SUBPROTOCOL, "flashgate.v1 chosen among others")
        await c.close()
        refused = False
        try:
            c = await Conn.open(srv, subprotocols=("flashgate.v2",))
            await c.close()
        except Exception as e:  # noqa: BLE001  (InvalidHandshake or a dropped connection)
            refused = True
            log(f"    unknown subprotocol refused: {type(e).__name__}")
        check(refused, "a connection offering only an unknown subprotocol was opened")


def _local_addresses():
    """(family, address) of this machine that are not loopback, plus ::1 if it works."""
    out = []
    for target in ("192.0.2.1", "10.255.255.255", "8.8.8.8"):  # UDP connect: no packet is sent
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.connect((target, 9))
                ip = u.getsockname()[0]
            if not ip.startswith("127.") and ip != "0.0.0.0":
                out.append((socket.AF_INET, ip))
                break
        except OSError:
            continue
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as t:
            t.bind(("::1", 0))
        out.append((socket.AF_INET6, "::1"))
    except OSError:
        pass
    return out


async def test_listens_only_on_configured_host():
    """server.host = 127.0.0.1 (the default, "keep server.host on loopback") must not accept
    connections on other addresses of the machine."""
    async with Server() as srv:
        others = _local_addresses()
        if not others:
            log("    note: no non-loopback IPv4 address and no ::1 here: nothing to check")
            return
        reachable = []
        for fam, ip in others:
            with socket.socket(fam, socket.SOCK_STREAM) as t:
                t.settimeout(2)
                try:
                    t.connect((ip, srv.port))
                    reachable.append(ip)
                except OSError:
                    pass
        eq(reachable, [], f"addresses other than 127.0.0.1 where the server accepted a connection (tried {others})")


async def test_healthz():
    async with Server() as srv:
        status, headers, body = http_get(srv.port, "/healthz")
        eq(status, 200, "GET /healthz")
        eq(headers.get("content-type"), "application/json", "content type")
        h = json.loads(body)
        eq((h["status"], h["version"], h["sessions"], h["connections"]), ("ok", SUBPROTOCOL, 0, 0), "healthz")
        c = await Conn.open(srv)
        await c.create_session()
        d = await Conn.open(srv, tenant="beta")
        h = json.loads(http_get(srv.port, "/healthz")[2])
        eq((h["sessions"], h["connections"]), (1, 2), "counts with one session and two connections")
        await c.close()
        await d.close()
        await asyncio.sleep(0.2)
        h = json.loads(http_get(srv.port, "/healthz")[2])
        eq((h["sessions"], h["connections"]), (1, 0), "a detached session still counts")
        status, headers, body = http_get(srv.port, "/nope")
        eq(status, 404, "unknown path")
        eq(json.loads(body)["error"]["code"], "not_found", "404 body")


if __name__ == "__main__":
    run_tests(globals())
